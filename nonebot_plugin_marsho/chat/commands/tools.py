"""`marsho.tools`: the toolkits and tools marsho can use, MCP servers' states, what failed."""

from __future__ import annotations

from ..render import tools_text
from .registry import Command, CommandContext, Form


async def tools_command(context: CommandContext) -> str:
    """The listing; why a toolkit or server failed only for superusers."""
    mcp = context.app.mcp
    toolset = context.engine.toolset.listed_in(context.t.language)  # built-in tools in the chat's language
    return tools_text(context.t, toolset, mcp.status() if mcp else None,
                      owner=context.role == "superuser")


TOOLS = Command("tools", tools_command, forms=(Form("list"),))
