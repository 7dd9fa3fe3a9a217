"""nonebot-plugin-marsho: talk to an LLM that can use tools, in QQ/OneBot chats.

Loaded by NoneBot, the package wires itself in (see plugin.py). Imported before NoneBot is
initialised (`python -m nonebot_plugin_marsho`, a toolkit's own tests) it wires nothing and
offers only the public API below.
"""

import gc

from nonebot import get_driver


def _nonebot_initialized() -> bool:
    try:
        get_driver()
    except ValueError:
        return False
    return True


_WIRED = _nonebot_initialized()
if _WIRED:
    # what the bot loaded before the plugin (NoneBot, its drivers and adapters) lives as long as
    # the bot: out of the collector's sight, the collections the plugin's import triggers walk
    # only what it makes (about 40 ms less CPU before the bot takes connections; plugin.py does
    # the same after its required plugins, its own modules and its start)
    gc.freeze()

from .agent.conversation import Conversation  # noqa: E402
from .exceptions import EndpointError, MarshoError  # noqa: E402
from .tools import Tool, Toolbox, ToolCall, ToolContext, ToolResponse, ToolResult  # noqa: E402

if _WIRED:
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
