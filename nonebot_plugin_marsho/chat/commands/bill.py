"""The owner's bill: `marsho.usage` (what was used, a chart) and `marsho.quota` (chat/bill.py)."""

from __future__ import annotations

from ..bill import quota_command as quota_reply
from ..bill import usage_report
from .registry import Answer, Command, CommandContext, Form


async def usage_command(context: CommandContext) -> Answer:
    """`marsho.usage [all]`: the report, and its chart."""
    app = context.app
    text, pictures = await usage_report(app.meter, context.t, app.config, context.where, context.role,
                                        context.text)
    return Answer(text, pictures)


async def quota_command(context: CommandContext) -> str:
    """`marsho.quota [user|group <id> <tokens|off|default>]`."""
    app = context.app
    return await quota_reply(app.meter, context.t, app.config, context.where, context.role, context.text)


# `all` is checked in chat/bill.py's usage_report; tests/test_command_registry.py holds it to this
USAGE = Command("usage", usage_command, forms=(Form("yours"), Form("all", "all", who="superuser")))
QUOTA = Command("quota", quota_command, who="superuser", forms=(
    Form("show", who="superuser"), Form("set", "user|group <id> <tokens|off|default>", who="superuser")))
