"""The group calls of Discord, the QQ official API's guilds, Kook and Feishu (issue 28), each with
its own roles mapped to owner > admin > member and its own id spelling.

Every call goes through the adapter's `call_api` with the adapter's own API names, so nothing
here imports an adapter: an owner without one installed still imports us.

- Discord: timeout (modify guild member `communication_disabled_until`, at most 28 days), kick
  (remove guild member), delete message. The owner is the guild's `owner_id`; an admin is a
  member whose roles grant ADMINISTRATOR or the permission the action takes (MODERATE_MEMBERS,
  KICK_MEMBERS, MANAGE_MESSAGES in the channel, its overwrites applied); between two admins the
  highest role's position decides, as Discord does (not for deleting a message, where Discord
  has no hierarchy: there the roles decide, which refuses more than Discord would). Discord never
  times out a member with ADMINISTRATOR.
- QQ (guild channels only; QQ groups have no role of the target to ask): mute (mute_seconds),
  kick (delete guild member), recall (delete channel message). Roles 4 owner, 2 admin; 5, a
  channel admin, is an admin for a recall in a channel they manage, a member for the guild-wide
  mute and kick.
- Kook: kick (guild/kickout), recall (message/delete); its guild mute is voice only, so no mute.
  The owner is the guild's master (`user_id`); an admin has a role with the administrator bit or
  the action's permission (kick users, manage messages).
- Feishu: kick (remove chat members), recall (delete message); no per-user mute. The owner is
  the chat's `owner_id`, its managers (`user_manager_id_list`, `bot_manager_id_list`) admins.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from nonebot.adapters import Bot, Event

from ..agent.group_actions import Action, GroupRole
from .group_base import (
    BadId,
    Elsewhere,
    GroupPlatform,
    Refused,
    Standing,
    call,
    field,
    guild_channel,
    shown,
    token,
)

__all__ = ["Discord", "Feishu", "Kook", "QQGuild"]


class GuildPlatform(GroupPlatform):
    """A platform whose shared chats are guild channels ("<guild>/<channel>")."""

    roles_per_action = True
    asker_from_platform = True

    def acts_in(self, group_id: str) -> bool:
        return "/" in group_id

    def acts_in_event(self, event: Event) -> bool:
        """A message of a guild channel (the event names its guild)."""
        return bool(getattr(event, "guild_id", None))


def _bits(value: Any) -> int:
    """A permission bit set as the platform writes it (a decimal string, a number)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


# --- Discord --------------------------------------------------------------------------------------

DISCORD_ADMINISTRATOR = 1 << 3
DISCORD_NEEDS: dict[str, tuple[int, str]] = {
    "mute": (1 << 40, "Discord's Moderate Members permission"),
    "unmute": (1 << 40, "Discord's Moderate Members permission"),
    "kick": (1 << 1, "Discord's Kick Members permission"),
    "recall": (1 << 13, "Discord's Manage Messages permission in this channel"),
}
DISCORD_MOST_MINUTES = 28 * 24 * 60


class Discord(GuildPlatform):
    name = "Discord"
    word = "a Discord id"
    most_minutes = DISCORD_MOST_MINUTES
    limit = "Discord's longest timeout, 28 days"

    async def standing(self, bot: Bot, group_id: str, user_id: str, action: Action) -> Standing:
        guild_id, channel_id = guild_channel(group_id)
        guild = await call(bot, "get_guild", guild_id=int(guild_id))
        if str(field(guild, "owner_id")) == user_id:
            return Standing("owner")
        member = await call(bot, "get_guild_member", guild_id=int(guild_id), user_id=int(user_id))
        mine = {str(role) for role in field(member, "roles") or ()}
        roles = await call(bot, "get_guild_roles", guild_id=int(guild_id))
        granted, rank = 0, 0
        for each in roles or ():
            role_id = str(field(each, "id"))
            if role_id == guild_id or role_id in mine:  # @everyone's id is the guild's
                granted |= _bits(field(each, "permissions"))
                if role_id in mine:
                    rank = max(rank, int(field(each, "position") or 0))
        administrator = bool(granted & DISCORD_ADMINISTRATOR)
        need, named = DISCORD_NEEDS[action]
        if action == "recall":
            if not administrator:
                granted = await self._in_channel(bot, guild_id, channel_id, user_id, mine, granted)
            return Standing("admin" if administrator or granted & need else "member", lacks=named)
        shielded = ("Discord never times out a member with the Administrator permission"
                    if administrator and action in ("mute", "unmute") else "")
        role: GroupRole = "admin" if administrator or granted & need else "member"
        return Standing(role, rank=rank, shielded=shielded, lacks=named)

    async def _in_channel(self, bot: Bot, guild_id: str, channel_id: str, user_id: str, mine: set[str],
                          granted: int) -> int:
        """The guild's permissions with the channel's overwrites applied, as Discord does:
        @everyone's, then the member's roles' together, then the member's own."""
        channel = await call(bot, "get_channel", channel_id=int(channel_id))
        overwrites = field(channel, "permission_overwrites") or ()
        by_id = {str(field(o, "id")): (_bits(field(o, "allow")), _bits(field(o, "deny"))) for o in overwrites}
        allow, deny = by_id.get(guild_id, (0, 0))
        granted = (granted & ~deny) | allow
        roles_allow = roles_deny = 0
        for role_id in mine:
            allow, deny = by_id.get(role_id, (0, 0))
            roles_allow, roles_deny = roles_allow | allow, roles_deny | deny
        granted = (granted & ~roles_deny) | roles_allow
        allow, deny = by_id.get(user_id, (0, 0))
        return (granted & ~deny) | allow

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        """The author of the message, asked of this channel (a message of another is not found)."""
        _, channel_id = guild_channel(group_id)
        message = await call(bot, "get_channel_message", channel_id=int(channel_id),
                             message_id=int(message_id))
        author = field(message, "author")
        if author is None or field(author, "id") is None:
            raise Refused(f"Discord does not say who sent message {message_id}")
        return str(field(author, "id"))

    async def mute(self, bot: Bot, group_id: str, user_id: str, seconds: int) -> None:
        guild_id, _ = guild_channel(group_id)
        until = datetime.now(timezone.utc) + timedelta(seconds=seconds) if seconds else None
        await call(bot, "modify_guild_member", guild_id=int(guild_id), user_id=int(user_id),
                   communication_disabled_until=until)

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        guild_id, _ = guild_channel(group_id)
        await call(bot, "remove_guild_member", guild_id=int(guild_id), user_id=int(user_id))

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        _, channel_id = guild_channel(group_id)
        await call(bot, "delete_message", channel_id=int(channel_id), message_id=int(message_id))


# --- QQ (the official API's guilds) ---------------------------------------------------------------

QQ_OWNER, QQ_ADMIN, QQ_CHANNEL_ADMIN = "4", "2", "5"
QQ_MANAGES_CHANNEL = 1 << 1
"""A channel permission bit: the member manages the channel."""


def _message_token(value: str) -> str:
    found = token(value)
    if found is None:
        raise BadId(f"{shown(value)} is not a message id here: a message id is letters and digits "
                    "(the one given with the quoted message)")
    return found


class QQGuild(GuildPlatform):
    """The QQ official API in guild channels; QQ groups and direct messages are not offered."""

    name = "QQ"
    word = "a QQ guild member id"

    def acts_in_event(self, event: Event) -> bool:
        """A guild channel's message (a QQ group's names no guild)."""
        return bool(getattr(event, "guild_id", None) and getattr(event, "channel_id", None))

    def own_id(self, bot: Bot) -> str:
        """The bot's user id in guilds (its app id, `self_id`, is another)."""
        try:
            info = getattr(bot, "self_info", None)
        except RuntimeError:  # not connected yet
            info = None
        return str(getattr(info, "id", None) or bot.self_id)

    def message_id(self, value: str) -> str:
        return _message_token(value)

    async def standing(self, bot: Bot, group_id: str, user_id: str, action: Action) -> Standing:
        guild_id, channel_id = guild_channel(group_id)
        member = await call(bot, "get_member", guild_id=guild_id, user_id=user_id)
        roles = {str(role) for role in field(member, "roles") or ()}
        if QQ_OWNER in roles:
            return Standing("owner")
        if QQ_ADMIN in roles:
            return Standing("admin")
        if QQ_CHANNEL_ADMIN in roles and action == "recall":
            found = await call(bot, "get_channel_permissions", channel_id=channel_id, user_id=user_id)
            if _bits(field(found, "permissions")) & QQ_MANAGES_CHANNEL:
                return Standing("admin")
        return Standing("member")

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        _, channel_id = guild_channel(group_id)
        message = await call(bot, "get_message_of_id", channel_id=channel_id, message_id=message_id)
        message = field(message, "message") or message  # the API wraps it; the adapter's model may not
        if field(message, "channel_id") is not None and str(field(message, "channel_id")) != channel_id:
            raise Elsewhere(f"Message {message_id} was not sent in this channel: only this channel's "
                            "messages are recalled here")
        author = field(message, "author")
        if author is None or field(author, "id") is None:
            raise Refused(f"QQ does not say who sent message {message_id}")
        return str(field(author, "id"))

    async def mute(self, bot: Bot, group_id: str, user_id: str, seconds: int) -> None:
        """Both fields set: the adapter sends the one left out as the text "None", and QQ reads
        mute_end_timestamp first (0 in both lifts a mute)."""
        guild_id, _ = guild_channel(group_id)
        until = int(time.time()) + seconds if seconds else 0
        await call(bot, "patch_guild_member_mute", guild_id=guild_id, user_id=user_id,
                   mute_end_timestamp=until, mute_seconds=seconds)

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        guild_id, _ = guild_channel(group_id)
        await call(bot, "delete_member", guild_id=guild_id, user_id=user_id)

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        _, channel_id = guild_channel(group_id)
        await call(bot, "delete_message", channel_id=channel_id, message_id=message_id)


# --- Kook (kaiheila) ------------------------------------------------------------------------------

KOOK_ADMINISTRATOR = 1 << 0
KOOK_NEEDS: dict[str, tuple[int, str]] = {
    "kick": (1 << 6, "Kook's kick users permission"),
    "recall": (1 << 13, "Kook's manage messages permission"),
}


class Kook(GuildPlatform):
    """Kook: no text mute (its guild mute is the microphone and headset only)."""

    name = "Kaiheila"
    label = "Kook (its guild mute is for voice only)"
    word = "a Kook id"
    actions = frozenset(("kick", "recall"))

    def acts_in_event(self, event: Event) -> bool:
        """A guild channel's message (Kook's channel_type GROUP)."""
        return getattr(event, "channel_type", None) == "GROUP"

    def message_id(self, value: str) -> str:
        return _message_token(value)

    async def standing(self, bot: Bot, group_id: str, user_id: str, action: Action) -> Standing:
        guild_id, _ = guild_channel(group_id)
        guild = await call(bot, "guild_view", guild_id=guild_id)
        if str(field(guild, "user_id") or field(guild, "master_id")) == user_id:
            return Standing("owner")
        user = await call(bot, "user_view", user_id=user_id, guild_id=guild_id)
        mine = {str(role) for role in field(user, "roles") or ()}
        listed = await call(bot, "guildRole_list", guild_id=guild_id)
        granted = 0
        for role in field(listed, "roles") or field(listed, "items") or ():
            if str(field(role, "role_id")) in mine:
                granted |= _bits(field(role, "permissions"))
        need, named = KOOK_NEEDS.get(action, (0, ""))
        admin = granted & KOOK_ADMINISTRATOR or granted & need
        return Standing("admin" if admin else "member", lacks=named)

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        """The sender of the message the question quotes (Kook tells the quote with the question's
        own message; a quote is of the same channel)."""
        asked = await call(bot, "message_view", msg_id=str(getattr(event, "msg_id", "")))
        quote = field(asked, "quote")
        quoted_id = field(quote, "id_") or field(quote, "id")
        author = field(quote, "author")
        if quote is None or str(quoted_id) != message_id or author is None:
            raise Refused(f"message {message_id} is not the one the question quotes (Kook tells the "
                          "sender of that one only)")
        return str(field(author, "id_") or field(author, "id"))

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        guild_id, _ = guild_channel(group_id)
        await call(bot, "guild_kickout", guild_id=guild_id, target_id=user_id)

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        await call(bot, "message_delete", msg_id=message_id)


# --- Feishu ---------------------------------------------------------------------------------------

FEISHU_USER = re.compile(r"ou_[A-Za-z0-9]{1,64}")
FEISHU_MESSAGE = re.compile(r"om_[A-Za-z0-9_]{1,96}")


async def _feishu(bot: Bot, api: str, **params: Any) -> dict[str, Any]:
    """A Feishu call's `data`; a reply whose `code` is not 0 is a refusal."""
    found = await call(bot, api, **params)
    if not isinstance(found, dict):
        return {}
    if found.get("code") not in (0, None):
        raise Refused(f"{api} failed: {found.get('msg') or found.get('code')}")
    data = found.get("data")
    return data if isinstance(data, dict) else {}


class Feishu(GroupPlatform):
    """Feishu (Lark) group chats: no per-user mute."""

    name = "Feishu"
    label = "Feishu"
    word = "a Feishu open_id"
    actions = frozenset(("kick", "recall"))
    asker_from_platform = True

    def own_id(self, bot: Bot) -> str:
        info = getattr(bot, "bot_info", None)
        return str(getattr(info, "open_id", None) or bot.self_id)

    def user_id(self, value: str) -> str:
        found = token(value, FEISHU_USER)
        if found is None:
            raise BadId(f"{shown(value)} is not {self.word}: a Feishu open_id starts with ou_ and goes on "
                        "in letters and digits, like ou_7d8a6e6df7621556 (the id in a mention's (id:...))")
        return found

    def message_id(self, value: str) -> str:
        found = token(value, FEISHU_MESSAGE)
        if found is None:
            raise BadId(f"{shown(value)} is not a message id here: a Feishu message id starts with om_ "
                        "(the one given with the quoted message)")
        return found

    async def role(self, bot: Bot, group_id: str, user_id: str) -> GroupRole:
        chat = await _feishu(bot, f"im/v1/chats/{group_id}", method="GET", query={"user_id_type": "open_id"})
        names = {user_id} | ({str(bot.self_id)} if user_id == self.own_id(bot) else set())
        if str(chat.get("owner_id")) in names:
            return "owner"
        listed = (chat.get("user_manager_id_list") or []) + (chat.get("bot_manager_id_list") or [])
        managers = {str(manager) for manager in listed}
        return "admin" if names & managers else "member"

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        data = await _feishu(bot, f"im/v1/messages/{message_id}", method="GET")
        items = data.get("items") or []
        message = items[0] if items and isinstance(items[0], dict) else {}
        if message.get("chat_id") != group_id:
            raise Elsewhere(f"Message {message_id} was not sent in this group: only this group's messages "
                            "are recalled here")
        sender = message.get("sender") or {}
        sender_id = sender.get("id") if isinstance(sender, dict) else None
        if not sender_id:
            raise Refused(f"Feishu does not say who sent message {message_id}")
        return self.own_id(bot) if sender_id == str(bot.self_id) else str(sender_id)

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        await _feishu(bot, f"im/v1/chats/{group_id}/members", method="DELETE",
                      query={"member_id_type": "open_id"}, body={"id_list": [user_id]})

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        await _feishu(bot, f"im/v1/messages/{message_id}", method="DELETE")
