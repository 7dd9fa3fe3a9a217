"""Reminders going out (issue 27): the scheduler, a small loop over marsho_reminders that wakes
at the next due time (and when one is added), claims what is due in the database and fires each
in a task of its own, so a slow send or a model's answer never delays the others; and the
courier, which says a reminder in its chat through the saved target, mentioning its asker, or
answers a scheduled question as the asker through the same pipeline as a question (the request
gate's lane, quotas, fair use, the asker's tools as their role is now).

Why a loop and not APScheduler: APScheduler 3's SQLAlchemy job store keeps each process's jobs
and runs them in every process that loads it (a job store alone does not make a job fire once
across processes), and it pickles jobs into the database. A reminder is a row: claiming it with
one UPDATE (store/reminders.py) is what makes it fire once, and a loop over the table is all the
scheduling the rows need.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import nonebot
from nonebot.adapters import Bot
from nonebot.exception import ActionFailed
from nonebot_plugin_alconna.uniseg import At, Text, UniMessage

from ..agent.engine import Reply
from ..agent.gate import lane
from ..agent.metering import Asker, charged_to, model_for_turn
from ..agent.reminders import (
    STALE_CLAIM,
    Fate,
    ReminderBook,
    fate,
    next_time,
    retry_at,
)
from ..agent.schedule import zone_named
from ..agent.turn import TurnFacts, ask
from ..exceptions import MarshoError
from ..i18n import Texts
from ..redaction import logger
from ..store.reminders import Reminder, ReminderStore
from ..store.sql import SqlStore
from ..tools import Toolset
from ..tools.model import Role, ToolContext
from .bill import limits_of, quota_text
from .outgoing import send_answer
from .render import brief_reason, brief_text, reply_text
from .targets import SendError
from .where import Where

if TYPE_CHECKING:
    from .app import Marsho

POLL = 30.0
"""Seconds the loop sleeps at most: reminders another bot process added are seen within it
(this process's own wake it at once)."""
NO_BOT_POLL = 1.0
"""Seconds between looks while no bot is connected (nothing could be sent)."""
CLAIM_BATCH = 200
"""Reminders claimed by one statement; more due at once are claimed in further rounds."""
ERROR_PAUSE = 5.0
"""Seconds the loop waits after the database failed, before it tries again."""
STOP_WAIT = 5.0
"""Seconds the loop's stop waits for reminders being sent before it cancels them."""


class Undeliverable(MarshoError):
    """A reminder that could not be said now (tried again later, then paused; `final`: paused
    at once): `problem` says why, as its list shows it."""

    def __init__(self, problem: str, *, final: bool = False) -> None:
        super().__init__(problem)
        self.problem = problem
        self.final = final


class NotMember(Exception):
    """The platform answered that a reminder's asker is not a member of its group."""


Fire = Callable[[Reminder, Fate, float], Awaitable[None]]
"""Says (or drops, telling its asker) one claimed reminder; raises Undeliverable to retry. It
calls `saying()` just before anything of the reminder goes out."""

_said: ContextVar[list[bool] | None] = ContextVar("marsho_reminder_said", default=None)
"""The reminder being fired in this task: whether anything of it went out yet."""


def saying() -> None:
    """Something of the reminder this task fires is about to go out (its text, a scheduled
    question's heading): from now on its occurrence is done, marked sent even if the bot stops
    before the end, and never given back to be said (or asked, and paid for) again."""
    said = _said.get()
    if said is not None:
        said[0] = True


class Scheduler:
    """The loop: claim what is due, fire each (`fire`) in its own task, mark it sent (its next
    time for a repeat), retried, paused. `ready()`: whether anything can be sent now (a bot is
    connected)."""

    def __init__(self, store: ReminderStore, fire: Fire, *, grace: float, texts: Texts,
                 ready: Callable[[], bool] = lambda: True, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.fire = fire
        self.grace = grace
        self.texts = texts
        self.ready = ready
        self.clock = clock
        self.owner = uuid.uuid4().hex
        """This process's mark on the reminders it claims."""
        self._woken = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._firing: set[asyncio.Task[None]] = set()
        self._stale_checked = 0.0

    def wake(self, _: object = None) -> None:
        """Look at the table again now (a reminder was added)."""
        self._woken.set()

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop().create_task(self._run(), name="marsho-reminders")

    async def stop(self) -> None:
        """End the loop; reminders being sent get STOP_WAIT seconds, then are cancelled: one
        cancelled before anything was said is given back, to be sent by the next start; one
        that had begun (a scheduled question's heading said, its answer under way) is marked
        sent, never said or asked twice."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        if self._firing:
            await asyncio.wait(set(self._firing), timeout=STOP_WAIT)
        for task in list(self._firing):
            task.cancel()
        await asyncio.gather(*self._firing, return_exceptions=True)

    async def settled(self) -> None:
        """Wait until no reminder is being sent (tests, the benchmark)."""
        while self._firing:
            await asyncio.gather(*self._firing, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                delay = await self.round()
            except MarshoError as error:  # the database: try again shortly
                logger.warning(f"marsho: reminders not read: {error}")
                delay = ERROR_PAUSE
            except Exception as error:
                logger.opt(exception=error).error(f"marsho: the reminders' loop failed: {error}")
                delay = ERROR_PAUSE
            self._woken.clear()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._woken.wait(), delay)
                except asyncio.TimeoutError:
                    pass

    async def round(self) -> float:
        """Claim and fire what is due; the seconds until the next look."""
        if not self.ready():
            return NO_BOT_POLL
        now = self.clock()
        if now - self._stale_checked > STALE_CLAIM / 10:
            self._stale_checked = now
            await self._recover(now)
        claimed = await self.store.claim(now, self.owner, limit=CLAIM_BATCH)
        for reminder in claimed:
            task = asyncio.get_running_loop().create_task(self._fire(reminder))
            self._firing.add(task)
            task.add_done_callback(self._firing.discard)
        if len(claimed) == CLAIM_BATCH:
            return 0.0
        due = await self.store.next_due()
        if due is None:
            return POLL
        return min(POLL, max(0.0, due - self.clock()))

    async def _fire(self, reminder: Reminder) -> None:
        now = self.clock()
        said = [False]
        _said.set(said)  # this task's own context: the courier's saying() marks it
        try:
            await self.fire(reminder, fate(reminder, now, self.grace), now)
        except asyncio.CancelledError:
            await asyncio.shield(self._sent(reminder) if said[0] else self._give_back(reminder))
            raise
        except Undeliverable as error:
            await self._failed(reminder, error.problem, now, final=error.final)
            return
        except Exception as error:
            logger.opt(exception=error).error(f"marsho: reminder #{reminder.id} failed: {error}")
            await self._failed(reminder, f"{type(error).__name__}: {error}", now)
            return
        await self._sent(reminder)

    async def _sent(self, reminder: Reminder) -> None:
        """Mark a claimed reminder sent: gone, or its next time for a repeat."""
        try:
            await self.store.finish(reminder, next_at=await next_time_off_loop(reminder, self.clock()))
        except Exception as error:  # left claimed: never sent twice (recovered as stale)
            logger.error(f"marsho: reminder #{reminder.id} sent, not marked: {error}")

    async def _failed(self, reminder: Reminder, problem: str, now: float, *, final: bool = False) -> None:
        again = None if final else retry_at(reminder, now)
        if again is None:
            logger.warning(f"marsho: reminder #{reminder.id} in {reminder.chat_key} paused: {problem}")
        else:
            logger.info(f"marsho: reminder #{reminder.id} in {reminder.chat_key} not sent ({problem}); "
                        f"trying again in {again - now:.0f} s")
        try:
            await self.store.failed(reminder, problem=problem, retry_at=again)
        except MarshoError as error:
            logger.error(f"marsho: reminder #{reminder.id} not marked: {error}")
        if again is not None:
            self.wake()

    async def _give_back(self, reminder: Reminder) -> None:
        try:
            await self.store.release(reminder)
        except Exception as error:  # the database is closing: recovered as stale later
            logger.warning(f"marsho: reminder #{reminder.id} not given back: {error}")

    async def _recover(self, now: float) -> None:
        """Claims a process left unmarked (it died sending): never sent again; a repeat goes on
        to its next time, a single one is paused, saying so."""
        for reminder in await self.store.stale(now - STALE_CLAIM):
            following = await next_time_off_loop(reminder, now)
            if following is not None:
                await self.store.finish(reminder, next_at=following)
            else:
                await self.store.failed(reminder, problem=self.texts("reminders.interrupted"), retry_at=None)


async def next_time_off_loop(reminder: Reminder, now: float) -> float | None:
    """agent/reminders.next_time in a worker thread: a few date computations, but croniter's
    search for a rare date (29 February) must not hold up the bot's other chats."""
    if not reminder.every:
        return None
    return await asyncio.to_thread(next_time, reminder, now)


# saying a reminder


def _superuser(bot: Bot, user_id: str, superusers: set[str]) -> bool:
    """nonebot's SuperUser rule, for a person and not an event."""
    adapter = bot.adapter.get_name().split(maxsplit=1)[0].lower()
    return user_id in superusers or f"{adapter}:{user_id}" in superusers


async def member_info(bot: Bot, reminder: Reminder) -> Mapping[str, Any]:
    """The asker's member info in the reminder's group where the platform tells it without an
    event (OneBot v11's get_group_member_info: role, group card), {} where it cannot (another
    platform, a private chat, a timeout). NotMember when the platform answers that they are not
    a member while the bot itself still is (when the bot is not either, the send says so)."""
    if reminder.kind != "group" or bot.adapter.get_name() != "OneBot V11":
        return {}
    try:
        info = await bot.call_api("get_group_member_info", group_id=int(reminder.chat_id),
                                  user_id=int(reminder.user_id), no_cache=True)
    except ActionFailed:
        if await _bot_is_member(bot, reminder.chat_id):
            raise NotMember(reminder.user_id) from None
        return {}
    except Exception:  # a timeout, a dropped connection: not an answer
        return {}
    return info if isinstance(info, Mapping) else {}


async def _bot_is_member(bot: Bot, group_id: str) -> bool:
    try:
        await bot.call_api("get_group_member_info", group_id=int(group_id), user_id=int(bot.self_id),
                           no_cache=True)
    except Exception:
        return False
    return True


async def asker_now(bot: Bot, reminder: Reminder, superusers: set[str],
                    info: Mapping[str, Any] | None = None) -> tuple[Role, str]:
    """The asker's role and name in the chat as they are now: superuser (SUPERUSERS), else their
    group role where the platform tells it (`info`, else member_info's), else member."""
    superuser = _superuser(bot, reminder.user_id, superusers)
    if info is None:
        try:
            info = await member_info(bot, reminder)
        except NotMember:
            info = {}
    name = str(info.get("card") or info.get("nickname") or reminder.name)
    if superuser:
        return "superuser", name
    role = info.get("role")
    return (role if role in ("owner", "admin") else "member"), name


def where_of_reminder(reminder: Reminder, role: Role, name: str = "") -> Where:
    """The chat and person of a reminder, as a message there would have them."""
    kind = reminder.kind if reminder.kind in ("group", "channel", "private") else "private"
    return Where(platform=reminder.platform, kind=kind, chat_id=reminder.chat_id,  # type: ignore[arg-type]
                 user_id=reminder.user_id, name=name or reminder.name,
                 role=role if role in ("owner", "admin") else "member",  # type: ignore[arg-type]
                 guild_id=reminder.guild_id or None, channel_id=reminder.channel_id or None)


def late_text(t: Texts, seconds: float) -> str:
    """How long, in the chat's language: "2 hours 5 minutes", "2 小时 5 分钟"."""
    total = int(round(seconds))
    days, rest = divmod(total, 86400)
    hours, minutes = rest // 3600, rest % 3600 // 60
    parts = [t.plural("reminders.days", days) if days else "",
             t.plural("reminders.hours", hours) if hours else "",
             t.plural("reminders.minutes", minutes) if minutes else ""]
    return " ".join([part for part in parts if part][:2]) or t.plural("reminders.minutes", 1)


def time_text(t: Texts, seconds: float, zone_name_: str) -> str:
    """A reminder's time in its zone: "2026-12-03 08:00 (Thursday)"."""
    local = datetime.fromtimestamp(seconds, timezone.utc).astimezone(zone_named(zone_name_))
    return t("reminders.time", date=f"{local:%Y-%m-%d}", time=f"{local:%H:%M}",
             weekday=t.weekday(local.weekday()))


def send_problem(t: Texts, reason: str) -> str:
    """What a SendError's reason is called where a paused reminder is listed."""
    if reason == "unknown":
        return t("reminders.why_unknown")
    if reason == "unreadable":
        return t("reminders.why_unreadable")
    if reason == "no_bot":
        return t("reminders.why_no_bot")
    if reason == "refused":
        return t("reminders.why_refused")
    return t("reminders.why_failed")


class Courier:
    """Says claimed reminders in their chats, for the running `app`."""

    def __init__(self, app: Marsho) -> None:
        self.app = app

    def _superusers(self) -> set[str]:
        try:
            return set(nonebot.get_driver().config.superusers)
        except ValueError:  # NoneBot not initialised (a library use)
            return set()

    async def __call__(self, reminder: Reminder, what: Fate, now: float) -> None:
        app, t = self.app, self.app.texts
        services = app.services
        if services is None:
            raise Undeliverable(t("reminders.why_not_ready"))
        info = await self._member(reminder)
        late = now - reminder.scheduled_at
        if what == "missed":
            following = await next_time_off_loop(reminder, now)
            due, ago = time_text(t, reminder.scheduled_at, reminder.zone), late_text(t, late)
            notice = t("reminders.missed", id=reminder.id, due=due, late=ago, body=reminder.body)
            if following is not None:
                notice += t("reminders.missed_next", next=time_text(t, following, reminder.zone))
            await self._say(reminder, notice)
            return
        note = t("reminders.late", late=late_text(t, late)) if what == "late" else ""
        if reminder.what == "text":
            await self._say(reminder, t("reminders.text", text=reminder.body, late=note))
            return
        await self._ask(reminder, note, info)

    async def _member(self, reminder: Reminder) -> Mapping[str, Any] | None:
        """The asker's member info in a group reminder's group ({} where the platform cannot
        tell; None for other chats); Undeliverable, paused at once, when they left it: nobody
        makes marsho post, mentioning them, where they are not."""
        if reminder.kind != "group":
            return None
        bot, _ = await self._destination(reminder)
        try:
            return await member_info(bot, reminder)
        except NotMember:
            raise Undeliverable(self.app.texts("reminders.why_left"), final=True) from None

    def _message(self, reminder: Reminder, said: str) -> UniMessage[Any]:
        if reminder.kind == "private":
            return UniMessage(Text(said))
        return UniMessage([At("user", reminder.user_id), Text(" " + said)])

    async def _say(self, reminder: Reminder, said: str) -> None:
        services = self.app.built()
        saying()
        try:
            await services.targets.send_to(reminder.chat_key, self._message(reminder, said))
        except SendError as error:
            logger.info(f"marsho: reminder #{reminder.id}: {error}")
            raise Undeliverable(send_problem(self.app.texts, error.reason)) from None

    async def _ask(self, reminder: Reminder, note: str, info: Mapping[str, Any] | None = None) -> None:
        """A scheduled question: admitted as a question would be now, its heading said (which
        mentions the asker, and shows the chat can be reached before the model is paid), then
        answered as the asker and posted."""
        app, t = self.app, self.app.texts
        services = app.built()
        bot, target = await self._destination(reminder)
        role, name = await asker_now(bot, reminder, self._superusers(), info)
        where = where_of_reminder(reminder, role, name)
        superuser = role == "superuser"
        if not app.fair_use.admits(where.names or None, where.user_id, superuser=superuser):
            raise Undeliverable(t("reminders.why_not_served"))
        over = None if superuser else await services.meter.over_quota(where.person, where.chat or "",
                                                                       limits_of(app.config))
        cheaper = app.config.marsho_quota_fallback_model if over is not None else ""
        if over is not None and not cheaper:
            await self._say(reminder, t("reminders.over_quota", id=reminder.id, reason=quota_text(t, over)))
            return
        turn = app.fair_use.admit(where.person, where.chat, superuser=superuser)
        if not turn.go:
            raise Undeliverable(t("reminders.why_rate", wait=f"{turn.wait:.0f}"))
        try:
            await self._say(reminder, t("reminders.prompt", id=reminder.id, prompt=reminder.body, late=note))
            try:
                reply = await self._answer(bot, reminder, where, role, cheaper)
            except Exception as error:  # told in the chat; not tried again (it may have cost)
                logger.warning(f"marsho: scheduled question #{reminder.id} failed: {error}")
                detail = brief_text(t, brief_reason(error))
                await send_answer(bot, t("reminders.prompt_failed", id=reminder.id, reason=detail), (),
                                  app.delivery(), quote=False, to=target)
                return
        except BaseException:
            turn.refund()
            raise
        finally:
            turn.done()
        from .ask import _with_quota

        reply, tips = _with_quota(app, reply, [])  # a quota that ran out during the turn
        engine = services.engine
        answer = reply_text(t, reply, engine.max_tool_rounds, app.config.marsho_max_answer_chars)
        await send_answer(bot, answer, reply.images, app.delivery(), quote=False, to=target)
        if tips:
            await send_answer(bot, "\n".join(tips), (), app.delivery(), quote=False, to=target)

    async def _destination(self, reminder: Reminder) -> tuple[Bot, Any]:
        try:
            return await self.app.built().targets.destination(reminder.chat_key)
        except SendError as error:
            raise Undeliverable(send_problem(self.app.texts, error.reason)) from None

    async def _answer(self, bot: Bot, reminder: Reminder, where: Where, role: Role, cheaper: str) -> Reply:
        """The turn of a scheduled question, as chat/ask.py's for a message: the asker's
        nickname and label, the group's persona and recent chat, their memories and tools."""
        from .ask import _billing, _carried, _group_side, _not_carried, _speaker
        from .matchers import user_key

        app = self.app
        services = app.built()
        key = reminder.session_key or reminder.chat_key
        shared = where.shared and app.config.marsho_session_scope == "group"
        nickname = await services.nicknames.get(user_key(bot, where.user_id))
        speaker = _speaker(app, bot, where, nickname) if shared else ""
        context = ToolContext(session_key=key, user_id=where.user_id, group_id=where.group_id, role=role,
                              bot=bot, event=None, platform=where.platform, chat_key=reminder.chat_key)
        persona, unread = await _group_side(app, where, key)
        facts = TurnFacts.asking(reminder.body, speaker=speaker, shared=shared, nickname=nickname,
                                 group_persona=persona, recent=_not_carried(unread, None))
        try:
            with lane(reminder.chat_key), charged_to(Asker(key, where.person, where.chat or "")), \
                    model_for_turn(cheaper), _billing(app, services.engine, where, role, shared=shared,
                                                      unsolicited=False, recent=facts.recent):
                reply = await ask(services.engine, key, facts, app.prompt, context=context,
                                  memories=services.memory_book)
        except BaseException:
            _carried(app, where, key, unread, stored=False)
            raise
        _carried(app, where, key, unread, stored=reply.stored)
        return reply


# the start's stage


@dataclass
class Reminders:
    """The reminders of the running bot: the book (its tools, listings, cancels) and the loop
    that sends them."""

    book: ReminderBook
    scheduler: Scheduler


def start_reminders(app: Marsho, toolset: Toolset, store: SqlStore, stack: AsyncExitStack,
                    bots: Callable[[], Mapping[str, Bot]] = nonebot.get_bots) -> Reminders:
    """The reminders: their book (the tools added to `toolset`), and the loop that sends them,
    started now (it sends nothing until the bot is ready and a bot is connected) and stopped
    by `stack`, before the database closes."""
    config = app.config
    store_ = ReminderStore(store)
    scheduler = Scheduler(store_, Courier(app), grace=config.marsho_reminder_grace, texts=app.texts,
                          ready=lambda: app.ready and bool(bots()))
    book = ReminderBook(store_, zone=zone_named(config.marsho_timezone),
                        min_interval=config.marsho_reminder_min_interval,
                        per_user=config.marsho_reminders_per_user,
                        per_group=config.marsho_reminders_per_group,
                        added=scheduler.wake)
    app.add_builtin(toolset, book.toolkit())  # MARSHO_DISABLED_TOOLS and the like apply
    scheduler.start()
    stack.push_async_callback(scheduler.stop)
    return Reminders(book, scheduler)
