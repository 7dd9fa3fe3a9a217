"""Reminders as the model uses them (issue 27): the built-in tools `reminders__add`,
`reminders__list` and `reminders__cancel`, who may see and cancel which reminder, and what
becomes of a due one (sent, sent saying how late, dropped; retried, paused). NoneBot-free: the
chat layer's scheduler (chat/reminders.py) sends what these rules decide.

A reminder always belongs to the chat it was asked in and to its asker: nobody can make marsho
post into a chat they did not ask in. The asker sees their own there; in a group its admins
(and superusers) see and cancel all of the group's; superusers cancel anyone's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Literal

from ..exceptions import StoreError
from ..redaction import logger
from ..store.reminders import LimitReached, Reminder, ReminderStore, Scope
from ..tools.model import ToolContext, Toolkit, ToolResponse
from ..tools.runner import clean_text
from ..tools.schema import function_tool
from .schedule import Repeat, ScheduleError, first_time, parse_every, parse_when, span, words, zone_name

TOOLKIT = "reminders"
REMINDER_TOOLS = (f"{TOOLKIT}__add", f"{TOOLKIT}__list", f"{TOOLKIT}__cancel")
MAX_BODY_CHARS = 1000
"""Characters of a reminder's text or prompt."""
LIST_LIMIT = 30
"""Reminders one reminders__list shows at most."""
RETRY_AFTER = (30.0, 120.0, 600.0)
"""Seconds before each new try of a reminder whose send failed; after the last, it is paused."""
LATE_AFTER = 60.0
"""Seconds late after which a reminder says how late it is (the bot was down, or busy)."""
STALE_CLAIM = 1800.0
"""Seconds after which a claimed reminder never marked is taken for one whose process died
while sending it: never sent again (a repeat goes on to its next time, a single one is paused)."""
ADMIN_ROLES = ("admin", "owner", "superuser")

OUTSIDE_CHAT = ("Reminders are kept only in chats: this call has no asker and no chat (the command line, "
                "or a library call without them), so there is nothing to add, list or cancel here.")
STORE_FAILED = ("The reminders' store is unavailable right now (the database failed); say so and try "
                "again later.")


@dataclass(frozen=True)
class Asker:
    """Who asks about reminders, and where."""

    platform: str
    user_id: str
    chat_key: str
    role: str = "member"
    session_key: str = ""

    @property
    def person(self) -> str:
        return f"{self.platform}:{self.user_id}"

    @property
    def in_group(self) -> bool:
        return not self.chat_key.startswith(f"{self.platform}:private:")

    @property
    def superuser(self) -> bool:
        return self.role == "superuser"

    @property
    def group_admin(self) -> bool:
        """A group's admin or owner (or a superuser) asking in the group."""
        return self.in_group and self.role in ADMIN_ROLES

    @classmethod
    def of(cls, context: ToolContext | None) -> Asker | None:
        """The asker of a tool call; None outside a chat."""
        if context is None or not context.platform or not context.chat_key or not context.user_id:
            return None
        return cls(context.platform, context.user_id, context.chat_key, context.role, context.session_key)


def may_see(asker: Asker, reminder: Reminder) -> bool:
    """The asker's own in this chat, and in their private chat their own paused ones of every
    chat (a group the bot can no longer post in shows there why); all of this group's for its
    admins; superusers everyone's."""
    if asker.superuser:
        return True
    if reminder.chat_key != asker.chat_key:
        return reminder.asker == asker.person and reminder.state == "paused" and not asker.in_group
    return reminder.asker == asker.person or asker.group_admin


def may_cancel(asker: Asker, reminder: Reminder) -> bool:
    """The asker's own (wherever it was set), any of the group's for its admins, any for
    superusers."""
    return reminder.asker == asker.person or may_see(asker, reminder) and (
        asker.superuser or asker.group_admin)


def chat_of(chat_key: str, platform: str) -> tuple[str, str, str, str]:
    """(kind, chat id, guild id, channel id) of a chat key (store/session.session_key)."""
    rest = chat_key[len(platform) + 1:]
    kind, _, chat_id = rest.partition(":")
    guild, _, channel = chat_id.partition("/") if kind == "channel" else ("", "", "")
    return kind, chat_id, guild, channel


Fate = Literal["send", "late", "missed"]


def fate(reminder: Reminder, now: float, grace: float) -> Fate:
    """What a claimed reminder does: sent ("late": saying how late, past LATE_AFTER), or, past
    `grace` seconds on its first try, dropped and its asker told ("missed")."""
    late = now - reminder.scheduled_at
    if late > grace and reminder.attempts == 0:
        return "missed"
    return "late" if late > LATE_AFTER else "send"


def retry_at(reminder: Reminder, now: float) -> float | None:
    """When to try a failed reminder again; None when its tries are used up (paused)."""
    if reminder.attempts >= len(RETRY_AFTER):
        return None
    return now + RETRY_AFTER[reminder.attempts]


def next_time(reminder: Reminder, now: float) -> float | None:
    """A repeating reminder's first time after `now` (and after the time it last fired),
    counted from its first time (so a clamped day or a skipped wall time moves one occurrence
    only), those missed skipped at once, never one by one; None for one that fires once, or
    whose repeat no longer reads or runs past the year 9999."""
    if not reminder.every:
        return None
    from .schedule import zone_named

    zone = zone_named(reminder.zone)
    first, last = _at(reminder.first_at or reminder.scheduled_at, zone), reminder.scheduled_at
    try:
        return Repeat.read(reminder.every).next_after(first, _at(max(now, last), zone), zone).timestamp()
    except (ScheduleError, OverflowError, ValueError) as error:
        logger.warning(f"marsho: reminder #{reminder.id}: its repeat {reminder.every!r} stopped: {error}")
        return None


def _at(seconds: float, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc).astimezone(zone)


class ReminderBook:
    """The reminder tools on one ReminderStore, with the MARSHO_REMINDER* settings; `added` is
    called after each new reminder (the scheduler wakes for it)."""

    def __init__(self, store: ReminderStore, *, zone: tzinfo, min_interval: float = 300.0,
                 per_user: int = 10, per_group: int = 30, clock: Callable[[], float] = time.time,
                 added: Callable[[Reminder], None] | None = None) -> None:
        self.store = store
        self.zone = zone
        self.min_interval = min_interval
        self.per_user = per_user
        self.per_group = per_group
        self.clock = clock
        self.added = added

    def now(self) -> datetime:
        return _at(self.clock(), self.zone)

    def toolkit(self) -> Toolkit:
        """`reminders__add`, `reminders__list` and `reminders__cancel`, for everyone."""
        zone = zone_name(self.zone)
        minimum = span(self.min_interval)

        async def add(when: str, context: ToolContext, text: str = "", prompt: str = "",
                      every: str = "") -> ToolResponse:
            return await self.add(context, when, text=text, prompt=prompt, every=every)

        add.__doc__ = f"""Set a reminder, or a question to answer later, in this chat.

        Use it when the person asking wants to be reminded of something, or wants something said
        or asked here at a later time, once or repeatedly ("remind me in 20 minutes to take the
        laundry out", "every weekday at 8:00 tell this group the weather"). Give exactly one of
        `text` (said as is at that time, mentioning the person asking) or `prompt` (at that time
        you answer it here as if they asked it then, with the tools they have then). The current
        time is in the note beside each message. Tell them the reminder's number and when it fires.

        Args:
            when: When it fires first: an ISO 8601 date-time, like 2026-12-03T08:00, meaning
                {zone} time unless it has an offset (+08:00), or a duration from now such as
                PT20M.
            text: What to say at that time (a short reminder, in the conversation's language).
            prompt: A question or task to answer at that time instead (e.g. "What is the
                weather in Hangzhou today?").
            every: To repeat: an ISO 8601 duration (P1D daily, P1W weekly, PT2H every two
                hours) or a five-field cron expression in {zone} time ("0 8 * * 1-5": 8:00 on
                weekdays; the first time is then the first match at or after `when`). At most
                every {minimum}. Empty: once.
        """

        async def listed(context: ToolContext) -> ToolResponse:
            return await self.list_text(context)

        listed.__doc__ = """List the reminders of the person asking in this chat, with their numbers.

        In a group, its admins also see the group's other reminders.
        """

        async def cancel(id: int, context: ToolContext) -> ToolResponse:  # noqa: A002 - the issue's name
            return await self.cancel(context, id)

        cancel.__doc__ = """Cancel a reminder by its number (#12: 12).

        The person asking may cancel their own; a group's admins any of the group's.

        Args:
            id: The reminder's number, from reminders__add or reminders__list.
        """
        tools = [
            function_tool(add, name=f"{TOOLKIT}__add", toolkit=TOOLKIT),
            function_tool(listed, name=f"{TOOLKIT}__list", toolkit=TOOLKIT),
            function_tool(cancel, name=f"{TOOLKIT}__cancel", toolkit=TOOLKIT),
        ]
        # the list is this asker's: a shared conversation's next asker must not read it
        tools[1].keeps_result = False
        return Toolkit(name=TOOLKIT, source="built-in", tools=tools)

    # the tools

    async def add(self, context: ToolContext, when: str, *, text: str = "", prompt: str = "",
                  every: str = "") -> ToolResponse:
        """A new reminder in the asker's chat, or an error the model can act on."""
        asker = Asker.of(context)
        if asker is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        if not context.personal:
            return ToolResponse.error("This message was not addressed to you (you chose to answer it): "
                                      "set no reminder for its sender.")
        body = " ".join(clean_text(text or prompt).replace("\x00", " ").split())
        refused = self._not_to_add(text, prompt, body)
        if refused:
            return ToolResponse.error(refused)
        now = self.now()
        try:
            moment = parse_when(when, self.zone, now)
            repeat = parse_every(every, self.zone, moment, min_interval=self.min_interval)
            moment = first_time(moment, repeat, self.zone)
        except ScheduleError as error:
            return ToolResponse.error(str(error))
        row = self._row(asker, context, body, "text" if text.strip() else "prompt", moment, repeat)
        unbound = asker.superuser
        try:
            reminder = await self.store.add(row, per_user=0 if unbound else self.per_user,
                                            per_group=0 if unbound else self.per_group)
        except LimitReached as limit:
            return ToolResponse.error(self._over(limit))
        except StoreError as error:
            logger.warning(f"marsho: reminders__add in {asker.chat_key} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        if self.added is not None:
            self.added(reminder)
        return ToolResponse.success(self._set(reminder, moment, repeat, now))

    @staticmethod
    def _not_to_add(text: str, prompt: str, body: str) -> str | None:
        if text.strip() and prompt.strip():
            return ("Give only one of `text` (said as is) or `prompt` (answered at that time), not both: "
                    "call reminders__add again with one of them.")
        if not body:
            return "Nothing to remind: give `text` (what to say) or `prompt` (what to answer) at that time."
        if len(body) > MAX_BODY_CHARS:
            return (f"Too long: {len(body)} characters, and a reminder holds at most {MAX_BODY_CHARS}. "
                    "Say it shorter and call reminders__add again.")
        return None

    def _row(self, asker: Asker, context: ToolContext, body: str, what: str, moment: datetime,
             repeat: Repeat | None) -> Reminder:
        kind, chat_id, guild, channel = chat_of(asker.chat_key, asker.platform)
        due = moment.timestamp()
        return Reminder(id=0, chat_key=asker.chat_key, platform=asker.platform, kind=kind, chat_id=chat_id,
                        guild_id=guild, channel_id=channel, user_id=asker.user_id, asker=asker.person,
                        session_key=context.session_key or asker.chat_key,
                        what="text" if what == "text" else "prompt", body=body, due_at=due,
                        scheduled_at=due, first_at=due, every=repeat.expression if repeat else "",
                        zone=zone_name(self.zone), created_at=self.clock())

    def _over(self, limit: LimitReached) -> str:
        whose = "the person asking has" if limit.scope == "user" else "this group has"
        setting = "MARSHO_REMINDERS_PER_USER" if limit.scope == "user" else "MARSHO_REMINDERS_PER_GROUP"
        paused = " (paused ones not counted)" if limit.scope == "user" else ""
        return (f"Not set: {whose} {limit.limit} reminders already{paused}, the most allowed ({setting}). "
                "Tell them to cancel one first (reminders__list shows them).")

    def _set(self, reminder: Reminder, moment: datetime, repeat: Repeat | None, now: datetime) -> str:
        said = (f"Reminder #{reminder.id} set: first {words(moment, self.zone, now)}")
        if repeat is not None:
            said += f"; then {repeat_words(repeat.expression)}"
        if reminder.what == "text":
            said += f". It will say in this chat, mentioning the person asking: {reminder.body}"
        else:
            said += f". At that time you will answer in this chat, as the person asking: {reminder.body}"
        return said

    async def list_text(self, context: ToolContext) -> ToolResponse:
        """The asker's reminders in this chat (an admin's: the group's), numbered."""
        asker = Asker.of(context)
        if asker is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        scope: Scope = "chat" if asker.group_admin else "mine"
        try:
            found = await self.visible(asker, scope)
        except StoreError as error:
            logger.warning(f"marsho: reminders__list in {asker.chat_key} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        if not found:
            whose = "this chat has" if scope == "chat" else "the person asking has"
            return ToolResponse.success(f"No reminders: {whose} none here.")
        now = self.now()
        lines = [self._line(reminder, asker, now) for reminder in found[:LIST_LIMIT]]
        heading = "Reminders in this chat, soonest first:" if scope == "chat" else (
            "The reminders of the person asking in this chat, soonest first:")
        if len(found) > LIST_LIMIT:
            lines.append(f"(and {len(found) - LIST_LIMIT} more)")
        return ToolResponse.success("\n".join([heading, *lines]))

    def _line(self, reminder: Reminder, asker: Asker, now: datetime) -> str:
        zone = zone_named_or(reminder.zone, self.zone)
        when = words(_at(reminder.due_at, zone), zone, now if reminder.due_at > now.timestamp() else None)
        line = f"#{reminder.id}: {when}"
        if reminder.every:
            line += f", {repeat_words(reminder.every)}"
        if reminder.state == "paused":
            line += f" [paused: {reminder.problem}]"
        if reminder.asker != asker.person:
            line += f" (set by user {reminder.user_id})"
        if reminder.chat_key != asker.chat_key:
            line += f" (in {reminder.chat_key})"
        kind = "says" if reminder.what == "text" else "answers"
        return f"{line}; {kind}: {reminder.body}"

    async def visible(self, asker: Asker, scope: Scope) -> list[Reminder]:
        """The reminders of `scope` the asker may see (a scope beyond their rights reads as
        their own)."""
        if scope == "all" and not asker.superuser:
            scope = "chat"
        if scope == "chat" and not (asker.group_admin or asker.superuser):
            scope = "mine"
        found = await self.store.listed(scope, chat_key=asker.chat_key, asker=asker.person)
        if scope == "mine" and not asker.in_group:
            elsewhere = [reminder for reminder in await self.store.paused(asker.person)
                         if reminder.chat_key != asker.chat_key]
            found = sorted(found + elsewhere, key=lambda reminder: (reminder.due_at, reminder.id))
        return [reminder for reminder in found if may_see(asker, reminder)]

    async def cancel(self, context: ToolContext, reminder_id: int) -> ToolResponse:
        """Cancel reminder `reminder_id` if the asker may."""
        asker = Asker.of(context)
        if asker is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        try:
            outcome, reminder = await self.cancel_for(asker, reminder_id)
        except StoreError as error:
            logger.warning(f"marsho: reminders__cancel in {asker.chat_key} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        if outcome == "absent":
            return ToolResponse.error(f"There is no reminder #{reminder_id} here (reminders__list shows "
                                      "the ones the person asking can see, with their numbers).")
        if outcome == "forbidden":
            return ToolResponse.error(f"Reminder #{reminder_id} is someone else's: only they, or the "
                                      "group's admins, can cancel it.")
        assert reminder is not None
        return ToolResponse.success(f"Cancelled #{reminder.id}: {reminder.body}")

    async def cancel_for(self, asker: Asker, reminder_id: int) -> tuple[
            Literal["cancelled", "absent", "forbidden"], Reminder | None]:
        """Cancel a reminder for `asker`: "absent" when they cannot see it (nor is it theirs),
        "forbidden" when they see it but may not cancel it."""
        if not 1 <= reminder_id < 2**63:
            return "absent", None
        reminder = await self.store.get(reminder_id)
        if reminder is None or not (may_see(asker, reminder) or reminder.asker == asker.person):
            return "absent", None  # someone else's, elsewhere, reads as absent: numbers tell nothing
        if not may_cancel(asker, reminder):
            return "forbidden", reminder
        if not await self.store.delete(reminder.id):
            return "absent", None
        return "cancelled", reminder


    async def resume_for(self, asker: Asker, reminder_id: int) -> tuple[
            Literal["resumed", "absent", "forbidden", "active", "full"], Reminder | None]:
        """Resume a paused reminder for `asker` (whoever may cancel it: its asker, the group's
        admins, superusers): a repeat at its next time after now, one that fires once at once.
        "active" when it is not paused; "full" when its asker has MARSHO_REMINDERS_PER_USER
        reminders that are not paused already (superusers' are not bound). The reminder
        returned is as resumed."""
        if not 1 <= reminder_id < 2**63:
            return "absent", None
        reminder = await self.store.get(reminder_id)
        if reminder is None or not (may_see(asker, reminder) or reminder.asker == asker.person):
            return "absent", None
        if not may_cancel(asker, reminder):
            return "forbidden", reminder
        if reminder.state != "paused":
            return "active", reminder
        now = self.clock()
        due = next_time(reminder, now) or now
        try:
            resumed = await self.store.resume(reminder, due_at=due,
                                              per_user=0 if asker.superuser else self.per_user)
        except LimitReached:
            return "full", reminder
        if not resumed:
            return "active", reminder
        reminder = dataclasses.replace(reminder, state="active", due_at=due, scheduled_at=due, attempts=0,
                                       problem="")
        if self.added is not None:
            self.added(reminder)
        return "resumed", reminder


def repeat_words(every: str) -> str:
    """A repeat as the model reads it: "repeats every P1D", "repeats on cron 0 8 * * 1-5"."""
    return f"repeats on cron {every}" if len(every.split()) == 5 else f"repeats every {every}"


def zone_named_or(name: str, default: tzinfo) -> tzinfo:
    """A reminder's own zone, else `default`."""
    from .schedule import zone_named

    return zone_named(name) if name else default
