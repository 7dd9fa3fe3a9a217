"""The owner's bill: `marsho.usage` (what was used, a chart) and `marsho.quota` (chat/bill.py)."""

from __future__ import annotations

from ..bill import quota_command as quota_reply
from ..bill import usage_report
from .registry import Answer, Command, CommandContext


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


USAGE = Command("usage", usage_command)
QUOTA = Command("quota", quota_command, who="superuser")
