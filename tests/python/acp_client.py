"""An ACP client on the official Python SDK (PyPI `agent-client-protocol`), driving an agent over
stdio as an editor would. The end-to-end tests run it against `reel acp`.

Usage: python acp_client.py CWD AGENT_PROGRAM [AGENT_ARGS...]

In one agent process: initialize, session/new in CWD, a prompt (permission requests are
allowed once); in a second one: session/load of that session. Prints one JSON document: the
answers, the permission requests, and each process's session/update notifications.
"""

import asyncio
import json
import sys

import acp
from acp.schema import AllowedOutcome, RequestPermissionResponse


class Recorder:
    """The client side: keeps every notification, allows every permission request once."""

    def __init__(self):
        self.updates = []
        self.permissions = []

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append([option.kind for option in options])
        chosen = next(option for option in options if option.kind == "allow_once")
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )


async def connect(recorder, program, args, steps):
    async with acp.spawn_agent_process(lambda _agent: recorder, program, *args) as (conn, _):
        init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        return init, await steps(conn)


async def main():
    cwd, program, *args = sys.argv[1:]
    first = Recorder()

    async def prompt(conn):
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        answer = await conn.prompt(
            session_id=session.session_id, prompt=[acp.text_block("where?")]
        )
        return session.session_id, answer.stop_reason

    init, (session_id, stop_reason) = await connect(first, program, args, prompt)
    second = Recorder()

    async def load(conn):
        return await conn.load_session(cwd=cwd, session_id=session_id, mcp_servers=[])

    await connect(second, program, args, load)
    print(
        json.dumps(
            {
                "protocolVersion": init.protocol_version,
                "loadSession": init.agent_capabilities.load_session,
                "sessionId": session_id,
                "stopReason": stop_reason,
                "permissions": first.permissions,
                "live": first.updates,
                "replayed": second.updates,
            }
        )
    )


asyncio.run(main())
