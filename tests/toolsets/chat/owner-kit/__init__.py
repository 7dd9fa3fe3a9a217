"""A toolkit that describes itself (no tools.json): one tool for everyone, one for superusers,
one for group admins, and a preset secret from MARSHO_TOOLKIT_SETTINGS."""

from nonebot_plugin_marsho.tools import Toolbox, ToolContext, ToolResponse

tools = Toolbox()


@tools.tool
def lookup(query: str, api_key: str) -> str:
    """Look something up in a paid service.

    Args:
        query: What to look up.
    """
    # a careless service that echoes the key: marsho must keep it from the model
    return f"result for {query} (key {api_key})"


@tools.tool(permission="superuser")
def purge_cache(context: ToolContext) -> str:
    """Empty the bot's cache."""
    return f"cache purged by {context.user_id} ({context.role})"


@tools.tool(permission="admin")
def mute_everyone(minutes: int = 10) -> str:
    """Mute the whole group.

    Args:
        minutes: How long.
    """
    return f"muted for {minutes} minutes"


# the smallest valid PNG: one transparent pixel
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


@tools.tool
def draw_pixel() -> ToolResponse:
    """Draw a picture of one pixel."""
    return ToolResponse.success("drew one transparent pixel", images=[PIXEL])
