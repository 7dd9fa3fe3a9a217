"""A small MCP server for tests/test_mcp.py, written with the SDK's FastMCP.

    python tests/mcp_server.py                      # stdio
    python tests/mcp_server.py streamable-http PORT # http://127.0.0.1:PORT/mcp
    python tests/mcp_server.py sse PORT             # http://127.0.0.1:PORT/sse

MARSHO_TEST_TAG (environment) is what `whoami` answers, to tell servers apart.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.fastmcp import Context, FastMCP, Image

PNG = base64.b64decode(  # a 1×1 transparent PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
server = FastMCP("marsho-test", host="127.0.0.1", port=port, log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Repeat the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


@server.tool()
def whoami() -> str:
    """Say which server this is."""
    return os.environ.get("MARSHO_TEST_TAG", "untagged")


@server.tool()
def fail(message: str) -> str:
    """Always raise an error with the message."""
    raise ValueError(message)


@server.tool()
def crash() -> str:
    """Kill the server process in the middle of the call."""
    os._exit(3)


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def picture() -> list:
    """A caption and a picture."""
    return ["a tiny picture", Image(data=PNG, format="png")]


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called `name` and tell the client that the tool list changed."""

    def added(x: str) -> str:
        return f"{name}: {x}"

    server.add_tool(added, name=name, description=f"The {name} tool, added at run time.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run(transport=transport)  # type: ignore[arg-type]
