"""The Python ACP SDK's remote clients (`acp.ws` and the Streamable HTTP `acp.http`, experimental in
0.12.1) driving `cairn serve`, for tests/it/serve/mod.rs.

It takes one JSON argument: {"url": "ws://…/acp" or "http://…/acp", "workspace": dir, "secret": the
server's secret, shown as a bearer token}; the URL's scheme picks the client. Through the SDK's typed API
it connects, runs initialize, session/new and a prompt whose tool asks a permission question
(answered "allow once"), closes; then connects again and loads the session. It prints one JSON
summary on stdout: the updates each connection saw, re-serialized with the protocol's names, the
prompt's stop reason and the permission questions it served. It asserts nothing about cairn's
behaviour: the Rust test does. Each step waits at most STEP seconds.
"""

import asyncio
import json
import sys

from acp import PROTOCOL_VERSION, connect_to_agent, text_block
from acp.schema import AllowedOutcome, ClientCapabilities, Implementation, RequestPermissionResponse
from acp.http.client import create_http_stream
from acp.ws.client import create_websocket_stream

STEP = 30.0


def dumped(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Viewer:
    """The client side: permission answers, and every update seen."""

    def __init__(self):
        self.updates = []
        self.permissions = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(dumped(update))

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append({"toolCallId": tool_call.tool_call_id, "kinds": [o.kind for o in options]})
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id=allow.option_id, outcome="selected"))


async def step(name, awaitable):
    try:
        return await asyncio.wait_for(awaitable, STEP)
    except asyncio.TimeoutError:
        raise SystemExit(f"ws client: {name} got no answer within {STEP:.0f}s") from None


async def connected(viewer, url, secret):
    headers = {"Authorization": f"Bearer {secret}"}
    if url.startswith("http"):
        transport = create_http_stream(url, headers=headers)
    else:
        transport = await step("connect", create_websocket_stream(url, headers=headers))
    connection = connect_to_agent(viewer, transport)
    info = Implementation(name="cairn-ws-conformance", version="1")
    await step(
        "initialize",
        connection.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(), client_info=info),
    )
    return connection, transport


async def main(config):
    summary = {}
    first = Viewer()
    connection, transport = await connected(first, config["url"], config["secret"])
    session = await step("session/new", connection.new_session(cwd=config["workspace"], mcp_servers=[]))
    answer = await step(
        "session/prompt", connection.prompt(session_id=session.session_id, prompt=[text_block("Write the note")])
    )
    summary["sessionId"] = session.session_id
    summary["stopReason"] = answer.stop_reason
    summary["first"] = first.updates
    summary["permissions"] = first.permissions
    await connection.close()
    await transport.close()

    second = Viewer()
    connection, transport = await connected(second, config["url"], config["secret"])
    await step(
        "session/load",
        connection.load_session(session_id=session.session_id, cwd=config["workspace"], mcp_servers=[]),
    )
    summary["loaded"] = second.updates
    await connection.close()
    await transport.close()
    json.dump(summary, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
