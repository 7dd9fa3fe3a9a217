"""`marsho.tools`: the toolkits and tools marsho can use, MCP servers' states, what failed."""

from __future__ import annotations

from ..render import tools_text
from .registry import Command, CommandContext, Form


async def tools_command(context: CommandContext) -> str:
    """The listing; why a toolkit or server failed only for superusers."""
    mcp = context.app.mcp
    return tools_text(context.t, context.engine.toolset, mcp.status() if mcp else None,
                      owner=context.role == "superuser")


TOOLS = Command("tools", tools_command, forms=(Form("list"),))
