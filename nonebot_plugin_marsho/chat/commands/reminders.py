"""`marsho.reminders`: the asker's reminders in this chat (in their private chat, their paused
ones of every chat too), the group's for its admins (`group`), everyone's for superusers
(`all`, in a private chat), cancelling one by its number (`cancel <number>`) and resuming a
paused one (`resume <number>`). Who may see, cancel and resume what is agent/reminders.py's."""

from __future__ import annotations

from ...agent.reminders import Asker, ReminderBook
from ...store.reminders import Reminder, Scope
from ..reminders import time_text
from .registry import Command, CommandContext, Form

SHOWN = 30
"""Reminders one listing shows at most."""


def _asker(context: CommandContext) -> Asker:
    from ..matchers import chat_key

    where = context.where
    return Asker(where.platform, where.user_id, chat_key(where), context.role, context.key)


def _book(context: CommandContext) -> ReminderBook | None:
    services = context.services
    return services.reminders.book if services is not None and services.reminders is not None else None


async def reminders_command(context: CommandContext) -> str:
    """`marsho.reminders [group|all|cancel <number>]`."""
    t, name = context.t, context.name
    book = _book(context)
    if book is None:
        return t("reminders.off")
    word, _, rest = context.text.partition(" ")
    word = word.lower()
    asker = _asker(context)
    if word == "cancel":
        return await _cancel(context, book, asker, rest.strip().lstrip("#"))
    if word == "resume":
        return await _resume(context, book, asker, rest.strip().lstrip("#"))
    if word == "group":
        if not asker.in_group:
            return t("group.only", command=f"{name}.reminders group")
        refused = REMINDERS.refused(context, "group")
        if refused is not None:
            return refused
        return await _listing(context, book, asker, "chat")
    if word == "all":
        refused = REMINDERS.refused(context, "all")
        if refused is not None:
            return refused
        if asker.in_group:  # everyone's private reminders are not for a group to read
            return t("reminders.all_private", name=name)
        return await _listing(context, book, asker, "all")
    if word:
        return t("reminders.usage", name=name)
    return await _listing(context, book, asker, "mine")


async def _listing(context: CommandContext, book: ReminderBook, asker: Asker, scope: Scope) -> str:
    t = context.t
    found = await book.visible(asker, scope)
    if scope == "all":
        heading = t("reminders.all", count=len(found)) if found else t("reminders.none_all")
    elif scope == "chat":
        heading = t("reminders.group", count=len(found)) if found else t("reminders.none_group")
    else:
        heading = t("reminders.mine", count=len(found)) if found else t("reminders.none", name=context.name)
    if not found:
        return heading
    lines = [heading]
    lines += [_line(context, reminder, asker, scope) for reminder in found[:SHOWN]]
    if len(found) > SHOWN:
        lines.append(t("reminders.more", count=len(found) - SHOWN))
    lines.append(t("reminders.cancel_hint", name=context.name))
    if any(reminder.state == "paused" for reminder in found):
        lines.append(t("reminders.resume_hint", name=context.name))
    return "\n".join(lines)


def _line(context: CommandContext, reminder: Reminder, asker: Asker, scope: Scope) -> str:
    t = context.t
    parts = [f"#{reminder.id}", time_text(t, reminder.due_at, reminder.zone)]
    if reminder.every:
        parts.append(t("reminders.every", every=reminder.every))
    if reminder.state == "paused":
        parts.append(t("reminders.paused", problem=reminder.problem))
    if reminder.asker != asker.person:
        parts.append(t("reminders.by", user=reminder.user_id))
    if scope == "all" or reminder.chat_key != asker.chat_key:
        parts.append(t("reminders.in", chat=reminder.chat_key))
    said = t("reminders.says", body=reminder.body) if reminder.what == "text" else t(
        "reminders.asks", body=reminder.body)
    return " ".join(parts) + " " + said


async def _cancel(context: CommandContext, book: ReminderBook, asker: Asker, number: str) -> str:
    t = context.t
    if not number.isdigit():
        return t("reminders.cancel_usage", name=context.name)
    outcome, reminder = await book.cancel_for(asker, int(number))
    if outcome == "absent":
        return t("reminders.absent", id=number, name=context.name)
    assert reminder is not None
    if outcome == "forbidden":
        return t("reminders.forbidden", id=reminder.id)
    return t("reminders.cancelled", id=reminder.id, body=reminder.body)


async def _resume(context: CommandContext, book: ReminderBook, asker: Asker, number: str) -> str:
    t = context.t
    if not number.isdigit():
        return t("reminders.resume_usage", name=context.name)
    outcome, reminder = await book.resume_for(asker, int(number))
    if outcome == "absent":
        return t("reminders.absent", id=number, name=context.name)
    assert reminder is not None
    if outcome == "forbidden":
        return t("reminders.resume_forbidden", id=reminder.id)
    if outcome == "active":
        return t("reminders.not_paused", id=reminder.id)
    if outcome == "full":
        return t("reminders.resume_full", id=reminder.id, limit=book.per_user, name=context.name)
    return t("reminders.resumed", id=reminder.id, time=time_text(t, reminder.due_at, reminder.zone))


REMINDERS = Command("reminders", reminders_command, forms=(
    Form("mine"), Form("cancel", "cancel <number>"), Form("resume", "resume <number>"),
    Form("group", "group", who="admin", where="groups", refusal="reminders.admins_only"),
    Form("all", "all", who="superuser", where="private")))
