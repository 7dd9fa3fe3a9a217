"""`marsho.help`: how to ask, and every command with what it does."""

from __future__ import annotations

from ..render import usage_text
from .registry import Command, CommandContext, Form


async def help_command(context: CommandContext) -> str:
    """The help, listing the registry's commands."""
    config = context.app.config
    return usage_text(context.t, config.trigger_names, config.marsho_at, context.commands.names())


HELP = Command("help", help_command, needs_model=False, forms=(Form("show"),))
