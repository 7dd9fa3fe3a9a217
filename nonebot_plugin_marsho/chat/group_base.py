"""What every platform's group calls share (issue 28): the `GroupPlatform` an adapter's calls
subclass, the errors its calls raise, the id spellings, and a member's standing as the platform
gives it. chat/group_actions.py runs the tools on them; the OneBot v11 and Telegram calls live
there, the other adapters' in chat/group_platforms.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nonebot.adapters import Bot, Event
from nonebot.exception import ActionFailed

from ..agent.group_actions import MAX_MUTE_MINUTES, Action, GroupRole

ALL_ACTIONS: frozenset[Action] = frozenset(("mute", "unmute", "kick", "recall"))

MAX_ID_DIGITS = 19
"""The most digits of a platform id: QQ and Telegram ids are 64-bit integers."""


class BadId(ValueError):
    """An argument that is no id of the platform: `reason` names what one looks like."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Refused(Exception):
    """The platform refused a call (retcode != 0, an error): `reason` in its own words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Elsewhere(Refused):
    """The message is not known to be the group's: the rules refuse it, the platform was not wrong."""


class Unplaced(Elsewhere):
    """The platform names the message's sender but not its chat: refused, though the asker's
    authority over `sender` is told first when it does not reach either."""

    def __init__(self, reason: str, *, sender: str) -> None:
        super().__init__(reason)
        self.sender = sender


def canonical_number(value: str, *, negative: bool = False) -> str | None:
    """`value` as a platform writes a whole-number id (ASCII digits, no leading zero; below
    zero only with `negative`), or None when it is not one: "010099" is "10099", while "²",
    "１" or "١" are no id at all (Python's int() would read the last two as 1)."""
    digits = value.strip()
    sign = "-" if negative and digits.startswith("-") else ""
    digits = digits[len(sign):].lstrip("0")
    if not digits.isascii() or not digits.isdigit() or len(digits) > MAX_ID_DIGITS:
        return None
    return sign + digits if int(digits) < 2**63 else None


@dataclass(frozen=True)
class Standing:
    """A member's standing in a group for one action, as the platform gives it."""

    role: GroupRole = "member"
    rank: int | None = None
    """The platform's own order beyond the roles (Discord's highest role's position), if any."""
    shielded: str = ""
    """Why the platform never does this action to them whoever asks ("" when it may)."""
    lacks: str = ""
    """The permission they would need for the action (when that is why they are a member here)."""


class GroupPlatform:
    """One adapter's group calls; ids as the platform writes them."""

    name = ""
    word = ""
    """What the platform's user ids are called ("a QQ id")."""
    label = ""
    """The platform as people call it ("Kook"; the adapter's name when empty)."""
    negative_message_ids = False
    """Whether message ids may be below zero (go-cqhttp's and Lagrange's are hashes)."""
    actions: frozenset[Action] = ALL_ACTIONS
    """The tools the platform has calls for; the others are not offered there."""
    roles_per_action = False
    """Whether a member's standing depends on the action (Discord's and Kook's permissions)."""
    asker_from_platform = False
    """Whether the asker's standing is asked of the platform too (else the event's role is used,
    as uninfo and OneBot give it)."""
    most_minutes = MAX_MUTE_MINUTES
    limit = ""
    """The platform's longest mute in words, where it is below QQ's 30 days."""

    def acts_in(self, group_id: str) -> bool:
        """Whether the platform has the calls in the shared chat `group_id` (a group, or a guild
        channel as "<guild>/<channel>")."""
        return True

    def acts_in_event(self, event: Event) -> bool:
        """Whether a (shared) chat's message `event` is said where the platform has the calls."""
        return True

    def own_id(self, bot: Bot) -> str:
        """The bot's own user id in the platform's spelling."""
        return canonical_number(str(bot.self_id)) or str(bot.self_id)

    async def standing(self, bot: Bot, group_id: str, user_id: str, action: Action) -> Standing:
        """The member's standing for `action`; Refused when the platform will not say."""
        return Standing(await self.role(bot, group_id, user_id))

    def user_id(self, value: str) -> str:
        """The user id `value` in the platform's one spelling; BadId when it is not one."""
        found = canonical_number(value)
        if found is None:
            raise BadId(f"{shown(value)} is not {self.word}: {self.word} is a positive whole number in "
                        "ASCII digits 0-9, like 12345, without leading zeros (the number in a mention's "
                        "(id:...))")
        return found

    def message_id(self, value: str) -> str:
        """The message id `value` in the platform's one spelling; BadId when it is not one."""
        found = canonical_number(value, negative=self.negative_message_ids)
        if found is None:
            raise BadId(f"{shown(value)} is not a message id here: a message id is a whole number in "
                        "ASCII digits 0-9, like 12345 (the one given with the quoted message)")
        return found

    async def role(self, bot: Bot, group_id: str, user_id: str) -> GroupRole:
        raise NotImplementedError

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        """Who sent message `message_id` of the group (`event`: the question, which may quote it)."""
        raise NotImplementedError

    async def mute(self, bot: Bot, group_id: str, user_id: str, seconds: int) -> None:
        raise NotImplementedError

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        raise NotImplementedError

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        raise NotImplementedError


async def call(bot: Bot, api: str, **params: Any) -> Any:
    """One platform call; a refusal (or a failure) becomes Refused with its words."""
    try:
        return await bot.call_api(api, **params)
    except ActionFailed as error:
        info = getattr(error, "info", None)
        info = info if isinstance(info, dict) else {}
        words = info.get("wording") or info.get("message") or info.get("msg")
        raise Refused(f"{api} failed: {words or error}") from None
    except Exception as error:  # a timeout, a dropped connection
        raise Refused(f"{api} failed: {type(error).__name__}: {error}") from None


def shown(value: str) -> str:
    """An argument quoted in a result, cut short (the model may have been talked into anything)."""
    return repr(value if len(value) <= 40 else value[:40] + "…")


TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""An id written as letters and digits (QQ guild and Kook message ids, Feishu's)."""


def token(value: str, pattern: re.Pattern[str] = TOKEN) -> str | None:
    """`value` as an id of letters, digits, `_` and `-` (ASCII only), or None."""
    found = value.strip()
    return found if found.isascii() and pattern.fullmatch(found) else None


def own_ids(bot: Bot) -> set[str]:
    """Every id the bot's own account goes by: its `self_id`, and the other the platform gives it
    (a QQ bot's user id in guilds, a Feishu bot's open_id; its self_id is the app's id)."""
    ids = {str(bot.self_id)}
    for holder in ("self_info", "bot_info"):
        try:
            info = getattr(bot, holder, None)
        except Exception:  # QQ's self_info before the bot has connected
            continue
        ids |= {str(found) for name in ("id", "open_id") if (found := getattr(info, name, None))}
    return ids


def guild_channel(group_id: str) -> tuple[str, str]:
    """A guild channel's "<guild>/<channel>" as (guild, channel)."""
    guild, _, channel = group_id.partition("/")
    return guild, channel


def field(data: Any, name: str) -> Any:
    """`name` of an adapter's model or of a dict the platform returned (None when absent)."""
    if isinstance(data, dict):
        return data.get(name)
    value = getattr(data, name, None)
    # the Discord adapter's UNSET (a field the platform left out) is a class of its own
    return None if isinstance(value, type) and value.__name__ == "UNSET" else value
