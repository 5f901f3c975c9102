"""The Python ACP SDK's client driving cairn, for tests/it/conformance.rs.

It takes one JSON argument: {"cairn": binary, "workspace": dir, "env": {cairn's environment},
"buffers": {absolute path: text the editor holds unsaved}}. Through the SDK's typed API it
spawns cairn and runs initialize, session/new and a prompt whose tools read and write files
through this client (answering the permission question), a prompt whose `question` tool asks
through an elicitation form (answered with the second choice), then, in a second cairn process,
session/load and a prompt it cancels mid-stream. It prints one JSON summary on stdout: every
update as the SDK parsed it, re-serialized with the protocol's names, the answers, the fs calls
and permission questions it served, and any error the SDK logged (it only logs, for instance,
a notification it cannot parse). It asserts nothing about cairn's behaviour: the Rust test does.
Each step waits at most STEP seconds, so a hang fails with the step's name instead of blocking.
"""

import asyncio
import json
import logging
import sys

from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    FileSystemCapabilities,
    Implementation,
    PlanCapabilities,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)

STEP = 60.0


class ErrorLog(logging.Handler):
    """Keeps what the SDK logs at ERROR and above."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(self.format(record))


def dumped(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Editor:
    """The client side: fs reads and writes, permission answers, and every update seen."""

    def __init__(self, buffers):
        self.buffers = buffers
        self.updates = []
        self.reads = []
        self.writes = []
        self.permissions = []
        self.forms = []
        self.streaming = asyncio.Event()

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(dumped(update))
        if update.session_update == "agent_message_chunk" and getattr(update.content, "text", "").startswith("tick"):
            self.streaming.set()

    async def read_text_file(self, session_id, path, line=None, limit=None, **kwargs):
        self.reads.append(path)
        text = self.buffers.get(path)
        if text is None:
            try:
                with open(path, encoding="utf-8") as file:
                    text = file.read()
            except FileNotFoundError:
                raise RequestError.resource_not_found(path) from None
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = len(lines) if limit is None else start + limit
        return ReadTextFileResponse(content="".join(lines[start:end]))

    async def write_text_file(self, session_id, path, content, **kwargs):
        self.writes.append(path)
        with open(path, "w", encoding="utf-8") as file:
            file.write(content)
        return WriteTextFileResponse()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append({"toolCallId": tool_call.tool_call_id, "kinds": [o.kind for o in options]})
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id=allow.option_id, outcome="selected"))

    async def create_elicitation(self, message, mode, **kwargs):
        form = dumped(mode)
        self.forms.append({"message": message, **form})
        choices = form["requestedSchema"]["properties"]["answer"]["oneOf"]
        return AcceptElicitationResponse(action="accept", content={"answer": choices[1]["const"]})

    def taken(self):
        updates, self.updates = self.updates, []
        return updates


async def step(name, awaitable):
    try:
        return await asyncio.wait_for(awaitable, STEP)
    except asyncio.TimeoutError:
        raise SystemExit(f"conformance client: {name} got no answer within {STEP:.0f}s") from None


def spawn(editor, config):
    return spawn_agent_process(
        editor,
        config["cairn"],
        env=config["env"],
        cwd=config["workspace"],
        # cairn's log goes to this script's stderr, which the Rust test shows on failure.
        transport_kwargs={"stderr": None},
        # This SDK version still files elicitation (stable in the protocol) under its unstable
        # methods and answers "method not found" for it unless these are enabled.
        use_unstable_protocol=True,
    )


async def initialize(connection):
    capabilities = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
        elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()),
        plan=PlanCapabilities(),
    )
    info = Implementation(name="cairn-conformance", version="1")
    request = connection.initialize(
        protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities, client_info=info
    )
    return await step("initialize", request)


async def first_process(config, summary):
    editor = Editor(config["buffers"])
    async with spawn(editor, config) as (connection, _process):
        summary["initialize"] = dumped(await initialize(connection))
        session = await step("session/new", connection.new_session(cwd=config["workspace"], mcp_servers=[]))
        prompt = [text_block("Read notes.md, then write out.txt")]
        answer = await step("session/prompt", connection.prompt(session_id=session.session_id, prompt=prompt))
        summary["sessionId"] = session.session_id
        summary["prompt"] = {
            "stopReason": answer.stop_reason,
            "updates": editor.taken(),
            "reads": editor.reads,
            "writes": editor.writes,
            "permissions": editor.permissions,
        }
        prompt = [text_block("Ask me which database to use")]
        answer = await step("session/prompt with a question", connection.prompt(session_id=session.session_id, prompt=prompt))
        summary["question"] = {"stopReason": answer.stop_reason, "updates": editor.taken(), "forms": editor.forms}
    return session.session_id


async def second_process(config, session_id, summary):
    editor = Editor(config["buffers"])
    async with spawn(editor, config) as (connection, _process):
        await initialize(connection)
        load = connection.load_session(cwd=config["workspace"], session_id=session_id, mcp_servers=[])
        await step("session/load", load)
        summary["load"] = {"updates": editor.taken()}

        prompt = [text_block("Count until I stop you")]
        running = asyncio.create_task(connection.prompt(session_id=session_id, prompt=prompt))
        await step("the first streamed chunk", editor.streaming.wait())
        await connection.cancel(session_id=session_id)
        answer = await step("the cancelled session/prompt", running)
        summary["cancelled"] = {"stopReason": answer.stop_reason, "updates": editor.taken()}


async def main():
    config = json.loads(sys.argv[1])
    errors = ErrorLog()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger().addHandler(errors)
    summary = {}
    session_id = await first_process(config, summary)
    await second_process(config, session_id, summary)
    summary["sdkErrors"] = errors.messages
    json.dump(summary, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())
