"""nonebot-plugin-marsho: talk to an LLM that can use tools, in QQ/OneBot chats.

Loaded by NoneBot, the package wires itself in (see plugin.py). Imported before NoneBot is
initialised (`python -m nonebot_plugin_marsho`, a toolkit's own tests) it wires nothing and
offers only the public API below.
"""

from nonebot import get_driver

from .agent.conversation import Conversation
from .exceptions import EndpointError, MarshoError
from .tools import Tool, Toolbox, ToolCall, ToolContext, ToolResponse, ToolResult


def _nonebot_initialized() -> bool:
    try:
        get_driver()
    except ValueError:
        return False
    return True


if _nonebot_initialized():
    from .plugin import __plugin_meta__  # noqa: F401

__all__ = [
    "Conversation",
    "EndpointError",
    "MarshoError",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResponse",
    "ToolResult",
    "Toolbox",
]
