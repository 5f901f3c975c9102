// The official TypeScript ACP SDK's remote clients (`@agentclientprotocol/sdk/experimental/ws-client`,
// with the `ws` package as Node.js 20 has no WebSocket of its own, and `experimental/http-client`)
// driving `cairn serve`, for tests/it/serve/mod.rs.
//
// It takes one JSON argument: {"url": "ws://…/acp" or "http://…/acp", "workspace": dir, "modules":
// the directory holding node_modules, "secret": the server's secret, shown as a bearer token}; the URL's scheme picks the client. Through the SDK's client app it runs initialize, session/new and a prompt
// whose tool asks a permission question (answered "allow once"), closes; then connects again and
// loads the session. It prints one JSON summary on stdout: the updates each connection saw, the
// prompt's stop reason and the permission questions it served. It asserts nothing about cairn's
// behaviour: the Rust test does. Each step waits at most STEP milliseconds.

import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const STEP = 30_000;
const config = JSON.parse(process.argv[2]);
const require = createRequire(join(config.modules, "package.json"));
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const acp = await load("@agentclientprotocol/sdk");
const { createWebSocketStream } = await load("@agentclientprotocol/sdk/experimental/ws-client");
const { createHttpStream } = await load("@agentclientprotocol/sdk/experimental/http-client");
const WebSocket = (await load("ws")).default;

function step(name, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`ts ws client: ${name} got no answer within ${STEP} ms`)), STEP);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/// One connection: runs `op` with the agent's context, recording updates and permission questions.
async function connected(seen, op) {
  const app = acp
    .client({ name: "cairn-ts-ws-conformance" })
    .onNotification("session/update", ({ params }) => {
      seen.updates.push(params.update);
    })
    .onRequest("session/request_permission", ({ params }) => {
      seen.permissions.push({ toolCallId: params.toolCall.toolCallId, kinds: params.options.map((o) => o.kind) });
      const allow = params.options.find((o) => o.kind === "allow_once");
      return { outcome: { outcome: "selected", optionId: allow.optionId } };
    });
  const headers = { Authorization: `Bearer ${config.secret}` };
  const stream = config.url.startsWith("http")
    ? createHttpStream(config.url, { headers })
    : createWebSocketStream(config.url, { WebSocket, headers });
  return app.connectWith(stream, async (agent) => {
    await step("initialize", agent.request("initialize", { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} }));
    return op(agent);
  });
}

const summary = {};
const first = { updates: [], permissions: [] };
await connected(first, async (agent) => {
  const session = await step("session/new", agent.request("session/new", { cwd: config.workspace, mcpServers: [] }));
  const prompt = [{ type: "text", text: "Write the note" }];
  const answer = await step("session/prompt", agent.request("session/prompt", { sessionId: session.sessionId, prompt }));
  summary.sessionId = session.sessionId;
  summary.stopReason = answer.stopReason;
});
summary.first = first.updates;
summary.permissions = first.permissions;

const second = { updates: [], permissions: [] };
await connected(second, async (agent) => {
  const request = { sessionId: summary.sessionId, cwd: config.workspace, mcpServers: [] };
  await step("session/load", agent.request("session/load", request));
});
summary.loaded = second.updates;
process.stdout.write(JSON.stringify(summary));
process.exit(0);
