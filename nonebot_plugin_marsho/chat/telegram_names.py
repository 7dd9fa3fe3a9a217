"""Telegram @usernames as the user ids the group tools take (issue 28).

A Telegram `mention` entity carries the text `@bob` and no user id (only a `text_mention`, for a
user without a username, carries one), so "marsho mute @bob" gave the model nothing to fill
`user_id` with. The Bot API cannot look a username up; but every message a group's member sends
says who they are, so the senders seen in each chat since the start (and the senders of the
messages they quote) are kept here, per chat, the newest MAX_NAMES of them, and a mention of one
reads with their id. A username nobody here has seen speak stays a name: the tool then says why.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MAX_NAMES = 20_000
"""(chat, username) pairs kept, the least recently seen dropped first."""

_seen: OrderedDict[tuple[str, str], str] = OrderedDict()


def _keep(chat_id: Any, sender: Any) -> None:
    username = getattr(sender, "username", None)
    user_id = getattr(sender, "id", None)
    if not username or user_id is None or getattr(sender, "is_bot", False):
        return
    key = (str(chat_id), str(username).casefold())
    _seen[key] = str(user_id)
    _seen.move_to_end(key)
    if len(_seen) > MAX_NAMES:
        _seen.popitem(last=False)


def remember(event: Any) -> None:
    """Keep the usernames a Telegram group message shows: its sender's, and its quote's."""
    chat = getattr(event, "chat", None)
    if chat is None or getattr(chat, "type", "private") == "private":
        return
    _keep(chat.id, getattr(event, "from_", None))
    quoted = getattr(event, "reply_to_message", None)
    if quoted is not None:
        _keep(chat.id, getattr(quoted, "from_", None))


def user_of(chat_id: Any, mention: str) -> str | None:
    """The id of `@username` in chat `chat_id`, if they were seen there; else None."""
    if not mention.startswith("@"):
        return None
    return _seen.get((str(chat_id), mention[1:].casefold()))


def forget() -> None:
    """Forget every username (tests)."""
    _seen.clear()
