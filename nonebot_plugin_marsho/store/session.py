"""Sessions: the key of a conversation, one turn at a time per key, the History interface, and
fitting history into a request's message and token budget."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from nonebot.log import logger

from ..agent.tokens import TokenCounter
from ..i18n import t

Message = dict[str, Any]
SessionScope = Literal["group", "user_in_group", "user"]


def session_key(
    platform: str, *, group_id: str | None, user_id: str, scope: SessionScope = "group"
) -> str:
    """The conversation a message belongs to: per group, per member of a group, or per user
    everywhere (MARSHO_SESSION_SCOPE); private chats are always per user."""
    if group_id and scope == "group":
        return f"{platform}:group:{group_id}"
    if group_id and scope == "user_in_group":
        return f"{platform}:group:{group_id}:user:{user_id}"
    return f"{platform}:private:{user_id}" if scope != "user" else f"{platform}:user:{user_id}"


@dataclass
class Turn:
    """One finished exchange, from the user's message to the final answer, with each message's
    token count."""

    messages: list[Message] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)


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
        """Forget the session; returns how many turns were dropped."""
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


def without_reasoning(message: Message) -> Message:
    """The message as later turns send it: reasoning is passed back only within its own turn."""
    if "reasoning_content" not in message:
        return message
    return {k: v for k, v in message.items() if k != "reasoning_content"}


def _shrink_turn(turn: Turn) -> Turn:
    """A turn without its tool exchanges: the question and the final answer."""
    kept = Turn([turn.messages[0]], [turn.tokens[0]])
    last = turn.messages[-1]
    if len(turn.messages) > 1 and last.get("role") == "assistant" and not last.get("tool_calls"):
        kept.messages.append(last)
        kept.tokens.append(turn.tokens[-1])
    return kept


def fit_history(turns: list[Turn], *, max_messages: int, max_tokens: int) -> list[Message]:
    """The newest whole turns within both bounds, oldest first.

    A turn is never cut inside, so an assistant message with `tool_calls` keeps all its `tool`
    answers; a newest turn too big to fit is sent as just its question and answer.
    """
    chosen: list[Turn] = []
    used_messages = used_tokens = 0
    for turn in reversed(turns):
        if (used_messages + len(turn.messages) > max_messages
                or used_tokens + turn.total_tokens > max_tokens):
            if not chosen:
                small = _shrink_turn(turn)
                if len(small.messages) <= max_messages and small.total_tokens <= max_tokens:
                    chosen.append(small)
            break
        chosen.append(turn)
        used_messages += len(turn.messages)
        used_tokens += turn.total_tokens
    return [without_reasoning(m) for turn in reversed(chosen) for m in turn.messages]


KEPT_TEXT_TOKENS = 256
"""Tokens of a text that pictures give way to: a text is cut down to this before the running
turn's pictures are left out, and below it only once they are."""


def fit_current(messages: list[Message], counter: TokenCounter, max_tokens: int) -> list[Message]:
    """The running turn's messages within `max_tokens`: the biggest contents are cut (with a
    note) down to KEPT_TEXT_TOKENS, then pictures give way (the last first, each to a
    placeholder), then contents are cut further; no message is dropped, so every tool call
    keeps its answer and a question never loses its words to its pictures."""
    fitted = list(messages)
    sizes = [counter.count_message(m) for m in fitted]
    _cut(fitted, sizes, counter, max_tokens, floor=KEPT_TEXT_TOKENS)
    for index in range(len(fitted)):
        while sum(sizes) > max_tokens and _has_picture(fitted[index]):
            fitted[index] = _without_last_picture(fitted[index])
            sizes[index] = counter.count_message(fitted[index])
            logger.warning("marsho: a picture was left out to fit MARSHO_HISTORY_TOKENS")
    _cut(fitted, sizes, counter, max_tokens, floor=0)
    return fitted


def _cut(fitted: list[Message], sizes: list[int], counter: TokenCounter, max_tokens: int,
         *, floor: int) -> None:
    """Cut the biggest texts (in place) until the messages fit or none can go below `floor`."""
    stuck: set[int] = set()  # messages that cannot shrink any further
    while sum(sizes) > max_tokens:
        candidates = [i for i, m in enumerate(fitted) if i not in stuck and _longest_text(m)[1]]
        if not candidates:
            return
        index = max(candidates, key=sizes.__getitem__)
        part, content = _longest_text(fitted[index])
        overflow = sum(sizes) - max_tokens
        keep = max(floor, counter.count_text(content) - overflow - 16)
        shorter = _with_text(fitted[index], part, counter.truncate(content, keep))
        new_size = counter.count_message(shorter)
        if new_size >= sizes[index]:
            stuck.add(index)
            continue
        fitted[index], sizes[index] = shorter, new_size


def _has_picture(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content)


def _without_last_picture(message: Message) -> Message:
    content = list(message["content"])
    last = max(i for i, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "image_url")
    content[last] = {"type": "text", "text": t("image.placeholder")}
    return {**message, "content": content}


def _longest_text(message: Message) -> tuple[int | None, str]:
    """The text that can be cut: the content, or the longest text part of content parts (the
    pictures of a question stay whole); (its part index or None, the text)."""
    content = message.get("content")
    if isinstance(content, str):
        return None, content
    if not isinstance(content, list):
        return None, ""
    texts = [(i, p.get("text") or "") for i, p in enumerate(content)
             if isinstance(p, dict) and p.get("type") == "text"]
    return max(texts, key=lambda item: len(item[1]), default=(None, ""))


def _with_text(message: Message, part: int | None, text: str) -> Message:
    if part is None:
        return {**message, "content": text}
    content = list(message["content"])
    content[part] = {**content[part], "text": text}
    return {**message, "content": content}
