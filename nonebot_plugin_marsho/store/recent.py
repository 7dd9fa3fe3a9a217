"""The newest turns of the sessions in use, kept in memory so that a turn does not read its
history back from the database (store/sql.py's `SqlStore.recent_turns`).

Only a store that no other process writes uses it (SQLite, whose file the bot process claims:
`SqlStore.claim`); on PostgreSQL every turn reads the database, where another bot process may
have written the session. Each entry holds a session's newest whole turns as they are stored (the
messages' JSON text, decoded at the first read; every read gets copies, so a caller that changes
what it got changes nothing here), and how far they answer: every read whose `max_messages` is
at most `covers`, or every read at all (`complete`: the session has no older turn). A stored
turn is added at the front, a cleared session forgotten, and a read that raced a write of its
session is not kept.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from .session import Message, Turn

StoredTurn = tuple[str, list[str], list[int]]
"""A turn as its rows hold it: its id, each message's JSON text and token count, oldest first."""

MAX_SESSIONS = 1_000
"""Sessions whose newest turns are kept (the least recently used are forgotten first, and read
from the database again when they speak)."""


_FLAT = (str, int, float, bool, type(None))


@dataclass
class _Stored:
    """One turn as its rows hold it."""

    id: str
    data: list[str]
    tokens: list[int]
    _decoded: list[Message] | None = field(default=None, compare=False, repr=False)
    """The messages decoded at the first read."""
    _nested: list[int] = field(default_factory=list, compare=False, repr=False)
    """Which of them hold lists or objects (tool calls, content parts), not only plain values."""

    def turn(self) -> Turn:
        """The turn, its messages fresh copies: a message of plain values (text) is copied as a
        dict, one holding lists or objects (tool calls, content parts) decoded again."""
        decoded = self._decoded
        if decoded is None:
            decoded = self._decoded = [json.loads(data) for data in self.data]
            self._nested = [index for index, message in enumerate(decoded) if not _flat(message)]
        messages = [dict(message) for message in decoded] if not self._nested else [
            json.loads(self.data[index]) for index in range(len(decoded))]
        return Turn(messages, list(self.tokens), self.id)


def _flat(message: Any) -> bool:
    return isinstance(message, dict) and all(isinstance(value, _FLAT) for value in message.values())


@dataclass
class _Entry:
    turns: list[_Stored]
    """Newest first, each whole."""
    covers: int
    """Reads with `max_messages` up to this are answered (the turns within it are all here)."""
    complete: bool
    """The session has no turn older than these: every read is answered."""
    wanted: int
    """The largest `max_messages` read: what the turns are trimmed to keep answering."""


class RecentTurns:
    """The LRU of sessions' newest turns (see the module's docstring)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._reading: dict[str, int] = {}
        """Reads of the database in flight, per session."""
        self._writing: dict[str, int] = {}
        """Writes in flight, per session."""
        self._raced: set[str] = set()
        """Sessions written while a read of them was in flight: that read may hold rows from
        before the write, or rows of it not added here yet, and is not kept."""

    def get(self, key: str, max_messages: int) -> list[Turn] | None:
        """The session's newest whole turns with at most `max_messages` messages in all (the
        newest one alone when it has more), newest first; None when not known here."""
        entry = self._entries.get(key)
        if entry is None or not (entry.complete or max_messages <= entry.covers):
            return None
        self._entries.move_to_end(key)
        entry.wanted = max(entry.wanted, max_messages)
        chosen: list[Turn] = []
        used = 0
        for stored in entry.turns:
            used += len(stored.data)
            if used > max_messages:
                break
            chosen.append(stored.turn())
        if not chosen and entry.turns:
            chosen.append(entry.turns[0].turn())
        return chosen

    def read_started(self, key: str) -> None:
        """A read of the session's newest turns from the database begins."""
        self._reading[key] = self._reading.get(key, 0) + 1

    def read_ended(self, key: str, found: list[StoredTurn] | None = None, *, max_messages: int = 0,
                   complete: bool = False) -> None:
        """The read begun with `read_started` ended, and `found` the whole turns within the
        newest `max_messages` messages, newest first (`complete`: the session has no more; None:
        the read failed). They are kept unless the session was written meanwhile."""
        left = self._reading[key] - 1
        raced = key in self._raced or key in self._writing
        if left:
            self._reading[key] = left
        else:
            del self._reading[key]
            self._raced.discard(key)
        if found is None or raced:
            return
        stored = [_Stored(turn_id, data, tokens) for turn_id, data, tokens in found]
        self._entries[key] = _Entry(stored, max_messages, complete, max_messages)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)

    def write_started(self, key: str) -> None:
        """A write to the session begins."""
        self._writing[key] = self._writing.get(key, 0) + 1
        if key in self._reading:
            self._raced.add(key)

    def write_ended(self, key: str, turn: StoredTurn | None = None) -> None:
        """The write begun with `write_started` ended: `turn` was stored in the session,
        committed, as its newest; None: the session changed otherwise (cleared), or the write
        failed, and is read from the database next time."""
        left = self._writing[key] - 1
        if left:
            self._writing[key] = left
        else:
            del self._writing[key]
        if key in self._reading:
            self._raced.add(key)
        entry = self._entries.get(key)
        if entry is None:
            return
        if turn is None:
            del self._entries[key]
            return
        turn_id, data, tokens = turn
        entry.turns.insert(0, _Stored(turn_id, data, tokens))
        entry.covers += len(data)
        kept = sum(len(stored.data) for stored in entry.turns)
        while len(entry.turns) > 1 and kept > entry.wanted:
            # the oldest turn ends past every read made: no answer within `wanted` holds it
            entry.covers = kept - 1 if entry.complete else min(entry.covers, kept - 1)
            entry.complete = False
            kept -= len(entry.turns.pop().data)

    def clear(self) -> None:
        """Forget every session."""
        self._entries.clear()
