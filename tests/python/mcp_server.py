"""An MCP server on the official Python SDK (PyPI `mcp`), for the end-to-end tests of reel's MCP
client, over stdio:

- echo(text): the text back;
- add(a, b): the sum, as structured content too;
- slow(seconds, marker): makes the file `marker`.started, then waits; when the call is
  cancelled (MCP's notifications/cancelled), it writes "cancelled" to the file `marker` before
  it ends;
- crash(): the server process dies mid-call;
- whoami(): the reel keys of the call's `_meta` (its idempotency key among them), as JSON.

Usage: python mcp_server.py             (stdio)
       python mcp_server.py http PORT   (streamable HTTP on 127.0.0.1:PORT, path /mcp)
"""

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("reel-test")


@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@server.tool()
async def slow(seconds: float, marker: str) -> str:
    """Waits; writes 'cancelled' to the marker file if the call is cancelled."""
    # A cancellation that reaches the SDK before this function starts stops the call before it
    # runs, and nothing writes the marker: a test cancels once this file says it has started.
    with open(marker + ".started", "w"):
        pass
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        # Written aside, then renamed: the test polls for the marker, and would otherwise read
        # it between its creation and its write (empty).
        partial = marker + ".partial"
        with open(partial, "w") as file:
            file.write("cancelled")
        os.replace(partial, marker)
        raise
    return "done"


@server.tool()
def crash() -> str:
    """Dies mid-call."""
    os._exit(3)


@server.tool()
def whoami(ctx: Context) -> str:
    """Says which reel call this is, from the request's _meta."""
    params = ctx.request_context.params or {}
    meta = dict(params.get("_meta") or {})
    return json.dumps({k: v for k, v in meta.items() if k.startswith("reel/")}, sort_keys=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
