"""Where history lives: in memory for now, bounded per session."""

from __future__ import annotations

from collections import deque

from .session import Turn


class MemoryStore:
    """Keeps each session's turns in memory; lost on restart."""

    def __init__(self, max_messages: int) -> None:
        self.max_messages = max_messages
        self._sessions: dict[str, deque[Turn]] = {}

    async def turns(self, key: str) -> list[Turn]:
        """The session's stored turns, oldest first (copies: callers cannot change the store)."""
        return [[dict(m) for m in turn] for turn in self._sessions.get(key, ())]

    async def append_turn(self, key: str, turn: Turn) -> None:
        """Store a finished turn; drop the oldest turns that no request could include any more."""
        turns = self._sessions.setdefault(key, deque())
        turns.append([dict(m) for m in turn])
        total = sum(len(t) for t in turns)
        while len(turns) > 1 and total > self.max_messages:
            total -= len(turns.popleft())

    async def clear(self, key: str) -> int:
        """Forget the session."""
        return len(self._sessions.pop(key, ()))
