"""Sessions: the key of a conversation, one turn at a time per key, and the History interface."""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Message = dict[str, Any]
SessionScope = Literal["group", "user_in_group", "user"]


def session_key(
    platform: str, *, group_id: str | None, user_id: str, scope: SessionScope = "group",
    channel: bool = False,
) -> str:
    """The conversation a message belongs to: per group (or guild channel, `channel` with
    `group_id` "<guild>/<channel>"), per member of a group, or per person across the groups of
    a platform (MARSHO_SESSION_SCOPE). Private chats are always per person and never share a
    conversation with a group, whatever the scope."""
    if not group_id:
        return f"{platform}:private:{user_id}"
    if scope == "user":
        return f"{platform}:user:{user_id}"
    where = f"{platform}:channel:{group_id}" if channel else f"{platform}:group:{group_id}"
    return f"{where}:user:{user_id}" if scope == "user_in_group" else where


@dataclass
class Turn:
    """One finished exchange, from the user's message to the final answer, with each message's
    token count."""

    messages: list[Message] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    id: str = field(default="", compare=False)
    """The store's id of the turn ("" when unknown): where the history sent starts is kept by it."""

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


@dataclass(frozen=True)
class Summary:
    """A session's running summary of the turns trimmed off the start of its history."""

    text: str
    """"" when nothing could be summarised yet (the summary request failed)."""
    through_turn: str
    """The id of the newest turn folded in (or dropped, when its summary failed)."""
    turns: int
    """How many turns the text covers in all."""
    tokens: int
    updated_at: float = 0.0


class History(Protocol):
    """Where the finished turns of each session are kept."""

    def lock(self, key: str) -> AbstractAsyncContextManager[None]:
        """Run alone in the session until the context ends."""
        ...

    async def recent_turns(self, key: str, *, max_messages: int, max_tokens: int) -> list[Turn]:
        """The newest whole turns within the bounds, oldest first (the newest always)."""
        ...

    async def last_turn(self, key: str) -> Turn | None:
        """The newest turn."""
        ...

    async def append_turn(self, key: str, messages: list[Message], tokens: list[int]) -> None:
        """Store one finished turn as a whole."""
        ...

    async def clear(self, key: str) -> int:
        """Forget the session (and its summary); returns how many turns were dropped."""
        ...

    async def turns_between(self, key: str, after: str, before: str, *, max_messages: int,
                            with_after: bool = False) -> list[Turn]:
        """The whole turns stored after turn `after` (and `after` itself, `with_after`) and before
        turn `before`, oldest first: the newest of them within `max_messages` messages."""
        ...

    async def get_summary(self, key: str) -> Summary | None:
        """The session's summary of its trimmed turns (MARSHO_SUMMARY), if it has one."""
        ...

    async def save_summary(self, key: str, text: str, *, through_turn: str, turns: int, tokens: int) -> None:
        """Keep the session's summary, replacing the one before."""
        ...

    async def stats(self, key: str) -> tuple[int, int, int]:
        """(turns, messages, tokens) stored for the session."""
        ...

    async def export(self, key: str) -> list[dict[str, Any]]:
        """Every stored message of the session, oldest first."""
        ...

    async def get_setting(self, name: str) -> str | None:
        """A persisted setting."""
        ...

    async def set_setting(self, name: str, value: str) -> None:
        """Persist a setting."""
        ...

    async def get_nickname(self, user_key: str) -> str | None:
        """The nickname a person set with `marsho.nickname`, or None."""
        ...

    async def set_nickname(self, user_key: str, nickname: str | None) -> None:
        """Keep a person's nickname (None forgets it)."""
        ...


class SessionLocks:
    """One lock per session key, so two turns of a session never interleave in this process."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    def hold(self, key: str) -> AbstractAsyncContextManager[None]:
        """Wait for the session's earlier turns, then run alone in it."""
        return _Hold(self, key)

    def _left(self, key: str) -> None:
        self._users[key] -= 1
        if not self._users[key]:  # nobody waits: drop it so idle sessions cost nothing
            del self._users[key]
            del self._locks[key]


class _Hold:
    """SessionLocks.hold's context (a class: an async generator's context costs twice as much,
    and every turn takes one)."""

    __slots__ = ("locks", "key", "lock")

    def __init__(self, locks: SessionLocks, key: str) -> None:
        self.locks = locks
        self.key = key
        self.lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        locks, key = self.locks, self.key
        lock = locks._locks.get(key)
        if lock is None:
            lock = locks._locks[key] = asyncio.Lock()
        locks._users[key] = locks._users.get(key, 0) + 1
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: no longer one of its users
            locks._left(key)
            raise
        self.lock = lock

    async def __aexit__(self, *_: object) -> None:
        assert self.lock is not None
        self.lock.release()
        self.locks._left(self.key)
