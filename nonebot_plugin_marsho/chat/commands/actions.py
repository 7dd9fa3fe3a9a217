"""`marsho.actions` (issue 28): the group actions marsho was asked for in this group (who asked,
on whom, what, how it ended), for the group's admins, who also turn the group tools off or on
there (`marsho.actions off|on`)."""

from __future__ import annotations

from datetime import datetime

from ...store.group_actions import GroupActionLog, LoggedAction
from ...store.sql import SqlStore
from ..observe import group_key
from .registry import Command, CommandContext, Form
from .words import OFF_WORDS, ON_WORDS

LISTED = 20
"""Actions `marsho.actions` lists, newest first."""


async def actions_command(context: CommandContext) -> str:
    """`marsho.actions`: whether the group tools are on here, and the last actions asked for;
    `on`/`off` turn them on or off in this group."""
    app, t, name, text = context.app, context.t, context.name, context.text.strip().casefold()
    group = group_key(context.where)
    actions = app.group_actions
    if text and text not in ON_WORDS + OFF_WORDS:
        return t("actions.bad_value", name=name)
    if text:
        if actions is None:
            return t("actions.disabled")
        await actions.set_on(group, text in ON_WORDS)
        return t("actions.on") if text in ON_WORDS else t("actions.off", name=name)
    if actions is None:
        state = t("actions.disabled")
    else:
        off = await actions.turned_off(group)
        tools = t.join(t(f"actions.tool_{action}") for action in actions.actions_on(context.bot))
        state = t("actions.state_off", name=name) if off else t("actions.state_on", name=name, tools=tools)
    store: SqlStore = context.services.store if context.services is not None else app.built().store
    logged = await GroupActionLog(store).recent(group, limit=LISTED)
    if not logged:
        return f"{state}\n{t('actions.none')}"
    lines = [_line(context, entry) for entry in logged]
    return "\n".join([state, t("actions.heading", count=len(logged)), *lines])


def _line(context: CommandContext, entry: LoggedAction) -> str:
    t = context.t
    asker = entry.asker.split(":", 1)[-1]
    detail = ""
    if entry.action == "mute":
        detail = t("actions.minutes", minutes=entry.detail)
    elif entry.action == "recall":
        detail = t("actions.message", message_id=entry.detail)
    outcomes = {"done": t("actions.outcome_done"), "denied": t("actions.outcome_denied"),
                "failed": t("actions.outcome_failed"), "pending": t("actions.outcome_pending")}
    outcome = outcomes.get(entry.outcome, entry.outcome)
    if entry.reason:
        outcome = f"{outcome} ({entry.reason})"
    verbs = {"mute": t("actions.mute"), "unmute": t("actions.unmute"), "kick": t("actions.kick"),
             "recall": t("actions.recall")}
    return t("actions.line", time=datetime.fromtimestamp(entry.at).strftime("%m-%d %H:%M"), asker=asker,
             action=verbs.get(entry.action, entry.action), target=entry.target, detail=detail,
             outcome=outcome)


ACTIONS = Command("actions", actions_command, who="admin", where="groups", forms=(
    Form("show", who="admin"), Form("on", "on", who="admin"), Form("off", "off", who="admin")))
