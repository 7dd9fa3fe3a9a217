"""Sessions: the key of a conversation, one turn at a time per key, and the History interface."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

Message = dict[str, Any]
Turn = list[Message]


def session_key(platform: str, *, group_id: str | None, user_id: str) -> str:
    """One conversation per group, and per user in private chats."""
    if group_id:
        return f"{platform}:group:{group_id}"
    return f"{platform}:private:{user_id}"


class History(Protocol):
    """Where the finished turns of each session are kept."""

    async def turns(self, key: str) -> list[Turn]:
        """The session's stored turns, oldest first."""
        ...

    async def append_turn(self, key: str, turn: Turn) -> None:
        """Store one finished turn (user message to final answer) as a whole."""
        ...

    async def clear(self, key: str) -> int:
        """Forget the session; returns how many turns were dropped."""
        ...


class SessionLocks:
    """One lock per session key, so two turns of a session never interleave."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Wait for the session's earlier turns, then run alone in it."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if not self._users[key]:  # nobody waits: drop it so idle sessions cost nothing
                del self._users[key]
                del self._locks[key]

    def busy(self, key: str) -> bool:
        """True while a turn of this session runs or waits."""
        return key in self._users


def _shrink_turn(turn: Turn) -> Turn:
    """A turn without its tool exchanges: the question and the final answer."""
    kept = [turn[0]]
    if len(turn) > 1 and turn[-1].get("role") == "assistant" and not turn[-1].get("tool_calls"):
        kept.append(turn[-1])
    return kept


def fit_history(turns: list[Turn], max_messages: int) -> list[Message]:
    """The newest whole turns that fit in `max_messages`, oldest first.

    A turn is never cut inside, so an assistant message with `tool_calls` keeps all its `tool`
    answers; a newest turn too big to fit is sent as just its question and answer.
    """
    chosen: list[Turn] = []
    used = 0
    for turn in reversed(turns):
        if used + len(turn) > max_messages:
            if not chosen:
                small = _shrink_turn(turn)
                if len(small) <= max_messages:
                    chosen.append(small)
            break
        chosen.append(turn)
        used += len(turn)
    return [message for turn in reversed(chosen) for message in turn]
