"""A toolkit that describes itself (no tools.json): one tool for everyone, one for superusers,
one for group admins, and a preset secret from MARSHO_TOOLKIT_SETTINGS."""

from nonebot_plugin_marsho.tools import Toolbox, ToolContext

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
