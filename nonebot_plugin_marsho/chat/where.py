"""Where a message was said and who said it, on every adapter: the scene (a group, a guild
channel, a private chat), its id and parent guild, the sender's id, display name and role.

nonebot-plugin-uninfo knows this for every platform NoneBot serves (reading `group_id` off the
event, as marsho once did, takes a Telegram group, a Discord channel or a Feishu chat for the
sender's private chat, and every Kook DM for one shared chat). One exception, for speed and
quiet: a OneBot v11 message carries its group, sender card, nickname and role itself, while
uninfo's v11 reader asks the implementation for the group's name and the member's join time
(`get_group_info`, `get_group_member_info(no_cache=True)`: a round trip to QQ's servers) on every
new sender, none of which marsho needs; so v11 events are read directly, with uninfo's meaning.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from nonebot.adapters import Bot, Event
from nonebot.typing import T_State
from nonebot_plugin_uninfo import Session, get_session
from nonebot_plugin_uninfo.adapters import INFO_FETCHER_MAPPING

from ..redaction import logger
from .lookup import attribute

Kind = Literal["group", "channel", "private"]
PlatformRole = Literal["owner", "admin", "member"]
WHERE_KEY = "marsho_where"
"""The state key where the rule leaves the message's Where for the handler."""

OWNER_ROLES = frozenset({"OWNER"})
ADMIN_ROLES = frozenset({"ADMINISTRATOR"})
"""uninfo's role ids for each platform's owner and administrators. Not CHANNEL_ADMINISTRATOR:
uninfo gives it to a Discord or Kook role that may manage channels (a moderator), and on the QQ
guild API to any custom role whose permissions it reads the wrong way round."""
PRIVATE_EVENT_WORDS = ("Private", "Direct", "C2C", "Friend")
"""Words in the class names of private-chat message events on every adapter (PrivateMessageEvent,
Discord's and QQ's DirectMessageCreateEvent, QQ's C2CMessageCreateEvent...)."""


def looks_private(event: Event) -> bool:
    """Whether the event's own class says it is a private chat (no API call)."""
    name = type(event).__name__
    if any(word in name for word in PRIVATE_EVENT_WORDS):
        return True
    kind = getattr(attribute(event, "channel"), "type", None)  # a Satori event not yet converted
    return getattr(kind, "name", None) == "DIRECT"


@dataclass(frozen=True)
class Where:
    """One message's place and person."""

    platform: str
    """Whose ids these are: the adapter's name ("OneBot V11", "Telegram"...), with the platform
    behind a Satori server ("Satori/discord"), so two platforms' ids never meet."""
    kind: Kind
    chat_id: str
    """The group's id, "<guild>/<channel>" for a guild channel, the user's id in a private chat."""
    user_id: str
    name: str = ""
    """The sender's display name here (group card, nickname, account name), "" if unknown."""
    role: PlatformRole = "member"
    """The sender's role in the group or guild as the platform reports it."""
    guild_id: str | None = None
    channel_id: str | None = None
    guessed: bool = False
    """uninfo could not tell (an API call failed): the chat was read off the event's own ids."""
    anonymous: bool = False
    """The sender hid who they are (a OneBot v11 anonymous group message: every anonymous member
    has the same id), so nothing is remembered about, or recalled for, "them"."""

    @property
    def shared(self) -> bool:
        """A group or a channel: several people, one chat."""
        return self.kind != "private"

    @property
    def group_id(self) -> str | None:
        """The chat's id where several people talk (a group, "<guild>/<channel>"), else None."""
        return self.chat_id if self.shared else None

    @property
    def person(self) -> str:
        """The sender, for rate limits and queues: ids of two platforms never meet."""
        return f"{self.platform}:{self.user_id}"

    @property
    def chat(self) -> str | None:
        """The shared chat, for its rate limit: ids of two platforms never meet; None in private."""
        return f"{self.platform}:{self.chat_id}" if self.shared else None

    @property
    def names(self) -> tuple[str, ...]:
        """The ids an owner may write in MARSHO_ALLOWED_GROUPS/DENIED_GROUPS for this chat: the
        group's; a channel's own, its guild's, or both as "<guild>/<channel>"."""
        if self.kind == "channel":
            return tuple(n for n in (self.chat_id, self.channel_id, self.guild_id) if n)
        return (self.chat_id,) if self.shared else ()


def platform_name(bot: Bot) -> str:
    """The adapter's name; a Satori server fronts several platforms, so theirs is added."""
    name = bot.adapter.get_name()
    if name == "Satori":
        platform = getattr(bot, "platform", None)
        if platform:
            return f"Satori/{platform}"
    return name


def _onebot_v11(bot: Bot, event: Event) -> Where:
    # a temporary chat started from a group (NapCat, LLOneBot: message_type "private", sub_type
    # "group") carries that group's id, and is a private chat all the same
    group_id = None if looks_private(event) else attribute(event, "group_id")
    user_id = str(getattr(event, "user_id", "") or "")
    sender = getattr(event, "sender", None)
    name = str(getattr(sender, "card", None) or getattr(sender, "nickname", None) or "")
    role = getattr(sender, "role", None) if group_id is not None else None
    return Where(
        platform=platform_name(bot),
        kind="group" if group_id is not None else "private",
        chat_id=str(group_id) if group_id is not None else user_id,
        user_id=user_id,
        name=name,
        role=role if role in ("owner", "admin") else "member",
        anonymous=attribute(event, "anonymous") is not None,
    )


def _role(session: Session) -> PlatformRole:
    roles = {role.id for role in session.member.roles} if session.member else set()
    if roles & OWNER_ROLES:
        return "owner"
    if roles & ADMIN_ROLES:
        return "admin"
    return "member"


def from_session(bot: Bot, event: Event, session: Session) -> Where:
    """The Where of an uninfo session."""
    scene, user = session.scene, session.user
    member_nick = session.member.nick if session.member else None
    name = member_nick or user.nick or user.name or ""
    platform, user_id = platform_name(bot), str(user.id)
    if scene.is_private or looks_private(event):
        # (uninfo takes a Satori DM for a group where the server announces `guild.plain`)
        return Where(platform, "private", user_id, user_id, str(name))
    if scene.is_group:
        return Where(platform, "group", str(scene.id), user_id, str(name), _role(session))
    # a guild channel (or a guild itself, or a Telegram forum topic under its group)
    parent = str(scene.parent.id) if scene.parent else None
    chat_id = f"{parent}/{scene.id}" if parent else str(scene.id)
    return Where(platform, "channel", chat_id, user_id, str(name), _role(session), guild_id=parent,
                 channel_id=str(scene.id))


def _id_of(event: Event, *names: str) -> str | None:
    for name in names:
        value = attribute(event, name)
        value = getattr(value, "id", value)
        if value is not None and not callable(value) and str(value):
            return str(value)
    return None


def _guess(bot: Bot, event: Event) -> Where:
    """When uninfo cannot tell (an adapter it does not know, an API call that failed): the
    event's class and its own chat ids, never a private chat unless the class says so. What
    this reads is marked `guessed`: allow- and deny-lists do not trust it."""
    try:
        user_id = event.get_user_id()
    except Exception:
        user_id = ""
    platform = platform_name(bot)
    if looks_private(event):
        return Where(platform, "private", user_id, user_id, guessed=True)
    guild, channel = _id_of(event, "guild_id", "guild"), _id_of(event, "channel_id", "channel")
    if guild and channel:
        return Where(platform, "channel", f"{guild}/{channel}", user_id, guild_id=guild, channel_id=channel,
                     guessed=True)
    chat = _id_of(event, "group_id", "chat", "channel_id", "channel", "guild_id", "guild")
    if chat is None:
        try:
            chat = event.get_session_id()  # a chat of its own, apart from every private chat
        except Exception:
            chat = f"unknown:{user_id}"
    return Where(platform, "group", chat, user_id, guessed=True)


def sender_in_chat(bot: Bot, event: Event) -> tuple[str, ...] | None:
    """One sender in one chat, read off the event for free (no API call): the platform, the bot,
    whether it is private, the adapter's session id and the chat ids the event carries (on
    Discord the session id is the author alone, in every channel and DM); None for an event
    without a sender."""
    try:
        session_id, user_id = event.get_session_id(), event.get_user_id()
    except Exception:
        return None
    return (platform_name(bot), str(bot.self_id), str(looks_private(event)), session_id, user_id,
            *(hint or "" for hint in scene_hint(event)))


def scene_hint(event: Event) -> tuple[str | None, ...]:
    """The ids an event carries about its chat, whichever names the adapter uses for them."""
    hints: list[str | None] = []
    for name in ("channel_id", "guild_id", "group_id", "chat", "channel", "guild"):
        value = attribute(event, name)
        value = getattr(value, "id", value)
        hints.append(None if value is None else str(value))
    return tuple(hints)


class Remembered:
    """Where each recent sender spoke, so a busy chat asks the platform's API once per sender
    per CACHE_SECONDS, not per message. uninfo keeps a cache too, but keyed by the adapter's
    session id, which on Discord is the author alone: a member's DM would be served the
    session of the guild channel they spoke in before (and the other way round), so marsho
    keys its own by the event's kind, chat ids and sender, and never takes uninfo's."""

    CACHE_SECONDS = 60.0
    """A role taken away reaches marsho within this; the platform's API is asked at most once per
    sender and chat in it."""
    MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self._entries: dict[tuple, tuple[float, Where]] = {}

    def get(self, key: tuple) -> Where | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def clear(self) -> None:
        self._entries.clear()

    def put(self, key: tuple, where: Where) -> None:
        if len(self._entries) >= self.MAX_ENTRIES:  # the oldest half goes
            for old in list(self._entries)[: self.MAX_ENTRIES // 2]:
                del self._entries[old]
        self._entries[key] = (time.monotonic() + self.CACHE_SECONDS, where)


remembered = Remembered()


def _forget_uninfo_cache(bot: Bot, event: Event) -> None:
    fetcher = INFO_FETCHER_MAPPING.get(bot.adapter.get_name())
    if fetcher is None:
        return
    try:
        fetcher.session_cache.pop(fetcher.get_session_id(event), None)
    except Exception:  # an event without a session id: uninfo caches nothing for it
        pass


async def where_of(bot: Bot, event: Event, state: T_State | None = None) -> Where:
    """The message's Where (kept in `state` for the rest of the event's handling)."""
    if state is not None and WHERE_KEY in state:
        return state[WHERE_KEY]
    if bot.adapter.get_name() == "OneBot V11":
        where = _onebot_v11(bot, event)
    else:
        key = sender_in_chat(bot, event)
        known = remembered.get(key) if key is not None else None
        if known is not None:
            where = known
        else:
            _forget_uninfo_cache(bot, event)
            try:
                session = await get_session(bot, event)
            except Exception as error:  # an API call of the adapter failed
                said = f"marsho: could not tell where a message came from: {error}"
                logger.opt(exception=error).warning(said)
                session = None
            where = from_session(bot, event, session) if session is not None else _guess(bot, event)
            if session is not None and key is not None:
                remembered.put(key, where)
    if state is not None:
        state[WHERE_KEY] = where
    return where
