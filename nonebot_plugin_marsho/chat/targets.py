"""Where each chat is, so marsho can speak there later: the chat's nonebot-plugin-alconna
`Target`, saved when marsho answers there and found again after a restart, and sending to a chat
by its key through a bot that is connected. Whatever speaks outside a handler (a reminder, a
notice) sends through it, never through NoneBot's internals.

    book = TargetBook(store)                     # at startup, on the history's SqlStore
    await book.remember(bot, event, chat_key)    # when marsho answers a question
    await book.send_to(chat_key, "It is time!")  # later, from anywhere (a reminder's loop)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import nonebot
from nonebot.adapters import Bot, Event
from nonebot.exception import ActionFailed
from nonebot_plugin_alconna.uniseg import Receipt, SerializeFailed, Target, UniMessage, get_target

from ..exceptions import MarshoError, StoreError
from ..redaction import logger
from ..store.session import SessionLocks
from ..store.sql import SqlStore
from ..store.targets import SavedTarget, TargetStore
from .outgoing import speak_to
from .where import looks_private

SEEN_EVERY = 86_400.0
"""Seconds after which a chat whose target has not changed is written again, to keep when it was
last seen: at most one write per chat a day, not one per message."""
MAX_KNOWN = 10_000
"""Chats whose saved target is kept in memory (the least recently seen are forgotten first, and
read again from the database when they speak again)."""
REPLY_CONTEXT = ("qq.reply_seq",)
"""What alconna keeps in a target to reply to one message (QQ counts the replies to it); a saved
target speaks to the chat, not in reply, and it changes with every message."""


class SendError(MarshoError):
    """Nothing could be said in a saved chat. `reason`: `unknown` (no target is saved for it),
    `unreadable` (the saved target cannot be loaded), `no_bot` (no connected bot can reach it),
    `refused` (the platform refused the message), `failed` (a network error or a timeout: the
    message may still have arrived)."""

    def __init__(self, message: str, /, *, chat_key: str, reason: str) -> None:
        super().__init__(message)
        self.chat_key = chat_key
        self.reason = reason


def target_of(bot: Bot, event: Event) -> Target:
    """The chat `event` was said in, as an address to speak to later (not a reply to the event);
    raises SerializeFailed or NotImplementedError for an event that is in no chat alconna knows.

    A private chat's target is the person: alconna sends to a private target by the user's id
    (Discord and Satori open the direct channel from it), while its target of a Discord direct
    message is the channel's id and of a Kook one the bot's own id (a "group" at that)."""
    data = get_target(event, bot).dump()
    data["extra"] = {key: value for key, value in data["extra"].items() if key not in REPLY_CONTEXT}
    if looks_private(event):
        data.update(id=event.get_user_id(), private=True)
    return Target.load(data)


def speak_in(bot: Bot, event: Event) -> Event | Target:
    """From now on, what this task says goes through `bot` to the chat `event` was said in (as
    an address, not quoting it): for a task that speaks outside a handler, such as an unsolicited
    reply. Returns where it goes: the chat's target, or the event itself where alconna knows no
    target for it."""
    to: Event | Target
    try:
        to = target_of(bot, event)
    except (SerializeFailed, NotImplementedError):
        to = event
    speak_to(bot, to)
    return to


def _dumped(target: Target) -> str:
    """A target as the database keeps it: JSON, keys sorted (so equal targets compare equal)."""
    return json.dumps(target.dump(), ensure_ascii=False, sort_keys=True)


class TargetBook:
    """The chats' saved targets: `remember` one when marsho answers there (a database write only
    when it is new or changed, or once a day to keep when it was seen), `destination` and
    `send_to` to speak there later, through a connected bot."""

    def __init__(self, store: SqlStore, *, clock: Callable[[], float] = time.time,
                 bots: Callable[[], Mapping[str, Bot]] = nonebot.get_bots) -> None:
        self.store = TargetStore(store)
        self.clock = clock
        self.bots = bots
        """The connected bots by self id (NoneBot's, unless a test gives its own)."""
        self._known: OrderedDict[str, tuple[str, float]] = OrderedDict()
        """Chat key → (its target as saved, when it was written), the most recently seen last."""
        self._all_known = False
        """Every chat with a saved target is in `_known` (read once, `_read_known`): a chat that
        is not is new, and is written without a read first."""
        self._reading: asyncio.Future[None] | None = None
        self._forgotten = 0
        self._batch: dict[str, SavedTarget] | None = None
        """Targets waiting for the write `_batch_written` to start."""
        self._batch_written: asyncio.Future[None] | None = None
        """Chats dropped from `_known` so far."""
        self._saving = SessionLocks()
        """One lock per chat whose target is being saved: a chat's first questions at once read and
        write it once, and other chats' saves do not wait for it."""

    async def remember(self, bot: Bot, event: Event, chat_key: str) -> Target | None:
        """Keep where `event` was said as chat `chat_key`'s target, and return it (None for an
        event in no chat). Never raises: a failed save is logged, and tried again next time."""
        try:
            target = target_of(bot, event)
            dumped = _dumped(target)
        except (SerializeFailed, NotImplementedError) as error:  # an event in no chat alconna knows
            logger.debug(f"marsho: no target for chat {chat_key}: {type(error).__name__}: {error}")
            return None
        except Exception as error:  # an adapter's odd event: the answer goes out all the same
            logger.opt(exception=error).warning(f"marsho: no target for chat {chat_key}: {error}")
            return None
        if self._fresh(chat_key, dumped):
            return target
        async with self._saving.hold(chat_key):  # a chat's first questions at once: one reads, one writes
            if not self._fresh(chat_key, dumped):
                await self._save(chat_key, dumped, adapter=bot.adapter.get_name(), self_id=str(bot.self_id))
        return target

    def _fresh(self, chat_key: str, dumped: str) -> bool:
        """Whether the chat's target is known to be saved as `dumped`, and recently enough."""
        known = self._known.get(chat_key)
        if known is None or known[0] != dumped or self.clock() - known[1] >= SEEN_EVERY:
            return False
        self._known.move_to_end(chat_key)
        return True

    async def _read_known(self) -> None:
        """Read the chats seen last (up to MAX_KNOWN), once, all the saves waiting for it; if they
        are all of them, a chat not among them has no saved target."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_newest())
        try:
            await asyncio.shield(self._reading)
        except StoreError:
            self._reading = None  # read chat by chat meanwhile; tried again next time

    async def _read_newest(self) -> None:
        found = await self.store.newest(MAX_KNOWN + 1)
        forgotten = self._forgotten
        for saved in reversed(found[:MAX_KNOWN]):
            if saved.chat_key not in self._known:  # a save since has the newer one
                self._keep(saved.chat_key, json.dumps(saved.target, ensure_ascii=False, sort_keys=True),
                           saved.seen_at)
        self._all_known = len(found) <= MAX_KNOWN and self._forgotten == forgotten

    async def _save(self, chat_key: str, dumped: str, *, adapter: str, self_id: str) -> None:
        try:
            if chat_key not in self._known and not self._all_known:
                await self._read_known()
                if self._fresh(chat_key, dumped):
                    return
            if chat_key not in self._known and not self._all_known:  # forgotten: as saved
                saved = await self.store.get(chat_key)
                if saved is not None:
                    self._keep(chat_key, json.dumps(saved.target, ensure_ascii=False, sort_keys=True),
                               saved.seen_at)
                    if self._fresh(chat_key, dumped):
                        return
            now = self.clock()
            await self._write(SavedTarget(chat_key, json.loads(dumped), adapter, self_id, now))
        except StoreError as error:
            logger.warning(f"marsho: the target of chat {chat_key} was not saved: {error}")
            return
        self._keep(chat_key, dumped, now)

    async def _write(self, saved: SavedTarget) -> None:
        """Write the chat's target with the others being written at the same moment (a burst of
        new chats: one transaction, not one each, so the turns' own writes do not wait behind
        them), and return once it is written."""
        if self._batch is None:
            self._batch = {}
            self._batch_written = asyncio.ensure_future(self.store.save_all(self._take_batch))
        self._batch[saved.chat_key] = saved
        assert self._batch_written is not None
        await asyncio.shield(self._batch_written)

    def _take_batch(self) -> list[SavedTarget]:
        batch, self._batch = self._batch or {}, None  # later saves make the next batch
        return list(batch.values())

    def _keep(self, chat_key: str, dumped: str, seen_at: float) -> None:
        self._known[chat_key] = (dumped, seen_at)
        self._known.move_to_end(chat_key)
        while len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
            self._all_known = False  # the chat forgotten is read again when it speaks
            self._forgotten += 1

    async def target(self, chat_key: str) -> Target | None:
        """The chat's saved target, or None when marsho has not answered there."""
        saved = await self.store.get(chat_key)
        return None if saved is None else _loaded(saved)

    async def destination(self, chat_key: str) -> tuple[Bot, Target]:
        """The chat's saved target and a connected bot to speak there: the bot that answered
        there if it is connected, else one the target selects (alconna: a bot of the same
        adapter and platform). Raises SendError (`unknown`, `unreadable`, `no_bot`); StoreError
        when the database cannot be read."""
        saved = await self.store.get(chat_key)
        if saved is None:
            raise SendError(f"no target is saved for chat {chat_key}: marsho has not answered there",
                            chat_key=chat_key, reason="unknown")
        target = _loaded(saved)
        bot = self.bots().get(saved.self_id)
        if bot is not None and bot.adapter.get_name() == saved.adapter:
            return bot, target
        try:
            return await target.select(), target
        except Exception:  # alconna: KeyError, IndexError or ValueError when no bot matches
            raise SendError(
                f"no bot is connected that can speak in chat {chat_key} (it was answered by bot "
                f"{saved.self_id} on {saved.adapter})", chat_key=chat_key, reason="no_bot") from None

    async def send_to(self, chat_key: str, message: UniMessage[Any] | str) -> Receipt:
        """Say `message` in chat `chat_key`, as is (not redacted, not split: chat/outgoing's
        `send_answer(bot, ..., to=target)` does that for an answer). Raises SendError saying
        what went wrong; StoreError when the database cannot be read."""
        bot, target = await self.destination(chat_key)
        unimessage = UniMessage(message) if isinstance(message, str) else message
        try:
            return await unimessage.send(target=target, bot=bot)
        except ActionFailed as error:
            raise SendError(f"the chat {chat_key} refused the message: {error}", chat_key=chat_key,
                            reason="refused") from error
        except Exception as error:
            raise SendError(f"could not send to chat {chat_key}: {type(error).__name__}: {error}",
                            chat_key=chat_key, reason="failed") from error


def _loaded(saved: SavedTarget) -> Target:
    try:
        return Target.load(dict(saved.target))
    except Exception as error:  # a row another version of alconna wrote
        raise SendError(f"the saved target of chat {saved.chat_key} cannot be read: "
                        f"{type(error).__name__}: {error}", chat_key=saved.chat_key,
                        reason="unreadable") from None
