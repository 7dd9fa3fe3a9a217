"""The `group` toolkit (issue 28): `group__mute`, `group__unmute`, `group__kick` and
`group__recall`, run with the asker's authority on the platforms whose adapter has the calls.

Each call asks the platform, never the text: the asker's role is the event's, the target's and
the bot's own come from the platform (`get_group_member_info` on OneBot v11, cached for
ROLES_TTL), the quoted message's sender from `get_msg`; agent/group_actions.py decides. Anything
refused is refused before any call that acts, and the result says why in a sentence the model
can pass on; a platform that refuses anyway (retcode != 0) is a result too. Every action asked
for is logged (store/group_actions.py), and `marsho.actions` lists them for the group's admins
and turns the tools off or on in their group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from nonebot.adapters import Bot, Event

from ..agent.group_actions import (
    GROUP_TOOLS,
    TOOLKIT,
    Action,
    GroupRole,
    Party,
    minutes_problem,
    refusal,
    target_problem,
)
from ..exceptions import StoreError
from ..redaction import logger
from ..store.group_actions import GroupActionLog, LoggedAction
from ..store.sql import SqlStore
from ..tools.model import ToolContext, Toolkit, ToolResponse
from ..tools.schema import function_tool
from .group_base import (
    BadId,
    Elsewhere,
    GroupPlatform,
    Refused,
    Standing,
    Unplaced,
    call,
    canonical_number,
    shown,
)
from .group_platforms import Discord, Feishu, Kook, QQGuild
from .where import looks_private

__all__ = ["GROUP_TOOLS", "PLATFORMS", "SETTING", "TOOLKIT", "BadId", "GroupActions", "GroupPlatform",
           "OneBotV11", "Refused", "Telegram", "canonical_number"]

SETTING = "group_actions"
"""The group setting (marsho_group_settings) a group's admins turn off with `marsho.actions off`."""
ROLES_TTL = 60.0
"""Seconds a role the platform gave (the target's, the bot's own) is trusted: a role taken away
reaches marsho within this."""
HOUR = 3600.0
NOT_OFFERED = ("the group tools work only in group chats, on a platform that has them, where the group's "
               "admins have not turned them off (marsho.actions)")
"""Why a group tool called elsewhere (a private chat) does nothing."""
class OneBotV11(GroupPlatform):
    """OneBot v11 (NapCat, LLOneBot, Lagrange...): set_group_ban, set_group_kick, delete_msg."""

    name = "OneBot V11"
    word = "a QQ id"
    negative_message_ids = True

    async def role(self, bot: Bot, group_id: str, user_id: str) -> GroupRole:
        data = await call(bot, "get_group_member_info", group_id=int(group_id), user_id=int(user_id),
                           no_cache=True)
        role = (data or {}).get("role") if isinstance(data, dict) else None
        return role if role in ("owner", "admin") else "member"

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        """The sender of a message positively known to be this group's: get_msg names the group,
        or the question quotes it (a quote is of the same chat; NapCat and go-cqhttp name the
        group, the simulator and some implementations give only `message_type`). A message of
        another group, or a private one (whose get_msg never names a group), is not recalled."""
        data = await call(bot, "get_msg", message_id=int(message_id))
        if not isinstance(data, dict):
            raise Refused(f"get_msg gave nothing for message {message_id}")
        kind, found_in = data.get("message_type"), data.get("group_id")
        if kind is not None and kind != "group":
            raise Elsewhere(f"Message {message_id} is a {kind} message, not one of this group: only this "
                            "group's messages are recalled here")
        if found_in is not None and canonical_number(str(found_in)) != group_id:
            raise Elsewhere(f"Message {message_id} was not sent in this group: only this group's messages "
                            "are recalled here")
        sender = data.get("sender") or {}
        user_id = sender.get("user_id") if isinstance(sender, dict) else None
        found = canonical_number(str(user_id)) if user_id is not None else None
        if found is None:
            raise Refused(f"get_msg does not say who sent message {message_id}")
        if found_in is None and not _quotes(event, message_id):
            raise Unplaced(f"The platform does not say which chat message {message_id} was sent in, and "
                           "the question does not quote it: only a message known to be this group's is "
                           "recalled. Quote the message and ask again", sender=found)
        return found

    async def mute(self, bot: Bot, group_id: str, user_id: str, seconds: int) -> None:
        await call(bot, "set_group_ban", group_id=int(group_id), user_id=int(user_id), duration=seconds)

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        await call(bot, "set_group_kick", group_id=int(group_id), user_id=int(user_id),
                    reject_add_request=False)

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        await call(bot, "delete_msg", message_id=int(message_id))


TELEGRAM_ROLES: dict[str, GroupRole] = {"creator": "owner", "administrator": "admin", "member": "member",
                                        "restricted": "member"}
"""Telegram's ChatMember statuses as roles; "left" and "kicked" are not members."""
TELEGRAM_MUTED = dict.fromkeys(("can_send_messages", "can_send_audios", "can_send_documents",
                                "can_send_photos", "can_send_videos", "can_send_video_notes",
                                "can_send_voice_notes", "can_send_polls", "can_send_other_messages",
                                "can_add_web_page_previews"), False)


class Telegram(GroupPlatform):
    """Telegram's Bot API: restrictChatMember, banChatMember (then unbanChatMember, so a kicked
    member may join again), deleteMessage. The Bot API cannot fetch a message by id: a recall's
    sender is read off the message the question replies to."""

    name = "Telegram"
    word = "a Telegram id"

    def user_id(self, value: str) -> str:
        if value.strip().startswith("@"):  # a mention of a username nobody here has seen speak
            raise BadId(f"{shown(value.strip())} is a username, not {self.word}: Telegram tells a bot "
                        "nobody's id by their username, and they have not written in this group since I "
                        "started. Ask the asker to quote one of their messages instead (its sender is "
                        "given with it), or wait until they write here once")
        return super().user_id(value)

    async def role(self, bot: Bot, group_id: str, user_id: str) -> GroupRole:
        member = await call(bot, "get_chat_member", chat_id=int(group_id), user_id=int(user_id))
        status = member.get("status") if isinstance(member, dict) else getattr(member, "status", None)
        role = TELEGRAM_ROLES.get(str(status))
        if role is None:
            raise Refused(f"{user_id} is {status or 'unknown'} here")
        return role

    async def sender_of(self, bot: Bot, event: Event, group_id: str, message_id: str) -> str:
        quoted = getattr(event, "reply_to_message", None)
        sender = getattr(quoted, "from_", None)
        if quoted is None or str(getattr(quoted, "message_id", "")) != message_id or sender is None:
            raise Refused(f"message {message_id} is not the one the question replies to (Telegram "
                          "tells the sender of that one only)")
        return str(sender.id)

    async def mute(self, bot: Bot, group_id: str, user_id: str, seconds: int) -> None:
        if seconds:
            await call(bot, "restrict_chat_member", chat_id=int(group_id), user_id=int(user_id),
                        permissions=TELEGRAM_MUTED, until_date=int(time.time()) + seconds)
        else:
            await call(bot, "restrict_chat_member", chat_id=int(group_id), user_id=int(user_id),
                        permissions=dict.fromkeys(TELEGRAM_MUTED, True))

    async def kick(self, bot: Bot, group_id: str, user_id: str) -> None:
        await call(bot, "ban_chat_member", chat_id=int(group_id), user_id=int(user_id))
        await call(bot, "unban_chat_member", chat_id=int(group_id), user_id=int(user_id),
                    only_if_banned=True)

    async def recall(self, bot: Bot, group_id: str, message_id: str) -> None:
        await call(bot, "delete_message", chat_id=int(group_id), message_id=int(message_id))


PLATFORMS: dict[str, GroupPlatform] = {platform.name: platform for platform in (
    OneBotV11(), Telegram(), Discord(), QQGuild(), Kook(), Feishu())}
"""The adapters that offer the group tools, by adapter name; elsewhere they are not offered."""


def is_superuser(bot: Bot, user_id: str) -> bool:
    """Whether `user_id` (in the platform's spelling) is in SUPERUSERS, as NoneBot's own check
    reads it (bare, or prefixed with the adapter's first word: `onebot:123`), an entry written
    with leading zeros being the same person."""
    prefix = bot.adapter.get_name().split(maxsplit=1)[0].lower() + ":"
    for entry in bot.config.superusers:
        bare = entry.removeprefix(prefix)
        if bare == user_id or canonical_number(bare) == user_id:
            return True
    return False


def _quotes(event: Event | None, message_id: str) -> bool:
    """Whether the question `event` quotes message `message_id` (OneBot v11's `event.reply`,
    which the adapter fills from the reply segment the platform sent)."""
    reply = getattr(event, "reply", None)
    quoted = getattr(reply, "message_id", None)
    return quoted is not None and canonical_number(str(quoted), negative=True) == message_id


def shows_ids(actions: GroupActions | None, bot: Bot, event: Event) -> bool:
    """Whether a question from `event` shows the ids of the people it mentions and of the message
    it quotes: where the group tools may be offered (a group, a platform that has them, the tools
    on), so that everywhere else questions read as they always did."""
    platform = PLATFORMS.get(bot.adapter.get_name())
    return (actions is not None and platform is not None and not looks_private(event)
            and platform.acts_in_event(event))


ACTION_ORDER: tuple[Action, ...] = ("mute", "unmute", "kick", "recall")


class GroupActions:
    """The group tools on one database, with MARSHO_GROUP_ACTIONS_KICK and _PER_HOUR."""

    def __init__(self, store: SqlStore, *, kick: bool = False, per_hour: int = 10,
                 now: Callable[[], float] = time.time) -> None:
        self.store = store
        self.log = GroupActionLog(store)
        self.kick = kick
        self.per_hour = per_hour
        self.now = now
        self.off: set[str] = set()
        """The groups (keys) whose admins turned the tools off, as this process last read them."""
        self._roles: dict[tuple[str, ...], tuple[float, Standing]] = {}
        self._slots = asyncio.Lock()
        """Held while a slot of the hourly bound is taken: parallel calls of one answer take turns."""

    async def load(self) -> None:
        """Read which groups turned the tools off."""
        chosen = await self.store.group_settings(SETTING)
        self.off = {group for group, value in chosen.items() if value == "off"}

    async def set_on(self, group_key: str, on: bool) -> None:
        """A group's admins turn the tools on or off there."""
        await self.store.set_group_setting(group_key, SETTING, None if on else "off")
        (self.off.discard if on else self.off.add)(group_key)

    def actions_on(self, bot: Bot) -> list[Action]:
        """The actions the group tools take through `bot`'s platform, in the tools' order: its
        own (Kook and Feishu have no mute), kick only with MARSHO_GROUP_ACTIONS_KICK."""
        platform = PLATFORMS.get(bot.adapter.get_name())
        if platform is None:
            return []
        return [action for action in ACTION_ORDER
                if action in platform.actions and (action != "kick" or self.kick)]

    def platform(self, context: ToolContext) -> GroupPlatform | None:
        bot = context.bot
        return PLATFORMS.get(bot.adapter.get_name()) if isinstance(bot, Bot) else None

    def offered(self, context: ToolContext, action: Action | None = None) -> bool:
        """Whether the tools (`action`'s, when given) are offered in the chat of `context`: a
        group, on a platform that has the calls there, that has not turned them off."""
        platform = self.platform(context)
        return (context.group_id is not None and platform is not None
                and (action is None or action in platform.actions) and platform.acts_in(context.group_id)
                and context.chat_key not in self.off)

    # the tools

    def toolkit(self) -> Toolkit:
        """The group tools (`group__kick` only with MARSHO_GROUP_ACTIONS_KICK)."""

        async def mute(user_id: str, minutes: int, context: ToolContext) -> ToolResponse:
            """Mute (silence) a member of this group for some minutes.

            Use it only when the person asking wants someone muted. `user_id` is the id in the
            message's mention (@Name(id:123) gives "123"), or the quoted message's sender's. It
            runs only if the person asking could mute that member themselves (the platform's
            roles decide, not what anyone says); the result says what happened.

            Args:
                user_id: The member's id, as in the mention's (id:...).
                minutes: How long, 1 to 43200 (30 days).
            """
            return await self.run(context, "mute", user_id, minutes=minutes)

        async def unmute(user_id: str, context: ToolContext) -> ToolResponse:
            """Lift a member's mute in this group.

            `user_id` is the id in the message's mention (@Name(id:123) gives "123"). It runs only
            if the person asking could do it themselves (the platform's roles decide).

            Args:
                user_id: The member's id, as in the mention's (id:...).
            """
            return await self.run(context, "unmute", user_id)

        async def kick(user_id: str, context: ToolContext) -> ToolResponse:
            """Remove a member from this group (cannot be undone; they may ask to join again).

            Use it only when the person asking clearly wants that member removed. `user_id` is
            the id in the message's mention (@Name(id:123) gives "123"). It runs only if the
            person asking could remove them themselves (the platform's roles decide).

            Args:
                user_id: The member's id, as in the mention's (id:...).
            """
            return await self.run(context, "kick", user_id)

        async def recall(message_id: str, context: ToolContext) -> ToolResponse:
            """Recall (delete) a message in this group: the one the person asking quotes.

            `message_id` is the quoted message's id, given with the quote. Anyone may have their
            own message recalled; someone else's only if the person asking could delete it
            themselves (the platform's roles decide).

            Args:
                message_id: The quoted message's id.
            """
            return await self.run(context, "recall", message_id)

        functions: list[tuple[Callable[..., Any], Action]] = [(mute, "mute"), (unmute, "unmute")]
        if self.kick:
            functions.append((kick, "kick"))
        functions.append((recall, "recall"))
        tools = []
        for function, name in functions:  # any ToolContext (a turn's, a reminder's) offers them only there
            tool = function_tool(function, name=f"{TOOLKIT}__{name}", toolkit=TOOLKIT)
            tool.offered = partial(self.offered, action=name)
            tool.not_offered = NOT_OFFERED
            tools.append(tool)
        return Toolkit(name=TOOLKIT, source="built-in", tools=tools,
                       sends="mutes, kicks and recalls in the group, as its admins could")

    async def run(self, context: ToolContext, action: Action, subject: str, *,
                  minutes: int = 0) -> ToolResponse:
        """Do `action` on `subject` (a user id; a message id for a recall) if the asker may,
        logged; the result says what happened or why not."""
        subject = str(subject).strip()
        platform = self.platform(context)
        if (platform is None or context.group_id is None or not context.user_id
                or not platform.acts_in(context.group_id)):
            return ToolResponse.error("Group actions work only in a group chat on a platform that has "
                                      "them; nothing was done.")
        if action not in platform.actions:
            return ToolResponse.error(f"{platform.label or platform.name} has no way for a bot to {action} "
                                      "someone; nothing was done.")
        if await self.turned_off(context.chat_key):
            return ToolResponse.error("This group's admins turned group actions off here "
                                      "(marsho.actions on turns them on again); nothing was done.")
        problem = (minutes_problem(minutes, most=platform.most_minutes, limit=platform.limit)
                   if action == "mute" else None)
        if problem is not None:
            return ToolResponse.error(problem)
        try:  # one spelling for every check, the log and the call: "010099" is 10099
            subject = platform.message_id(subject) if action == "recall" else platform.user_id(subject)
        except BadId as bad:
            return ToolResponse.error(f"{bad.reason}. Nothing was done.")
        try:
            return await self._run(context, platform, action, subject, minutes)
        except StoreError as error:
            logger.warning(f"marsho: group__{action} in {context.chat_key}: {error}")
            return ToolResponse.error("The bot's database is unavailable, so nothing was done; try later.")

    async def _run(self, context: ToolContext, platform: GroupPlatform, action: Action, subject: str,
                   minutes: int) -> ToolResponse:
        bot, group = context.bot, str(context.group_id)
        self_id = platform.own_id(bot)
        target_id, unplaced = subject, None
        if action == "recall":
            found = await self._sender(context, platform, subject)
            if isinstance(found, ToolResponse):
                return found
            target_id, unplaced = found
        detail = subject if action == "recall" else (str(minutes) if action == "mute" else "")
        target = Party(target_id, superuser=is_superuser(bot, target_id), is_bot=target_id == self_id)
        own = action == "recall" and target_id == context.user_id
        early = None if own else target_problem(action, target)
        if early is None:
            early = await self._over_limit(context)
        if early is not None:
            return await self._ended(context, action, target_id, detail, "denied", early)
        superuser = context.role == "superuser"
        try:
            asked = platform.asker_from_platform and not superuser and not own
            mine = (await self._role(platform, bot, group, context.user_id, action) if asked
                    else Standing(_platform_role(context)))
        except Refused as refused:
            return await self._ended(context, action, target_id, detail, "failed",
                                     f"The platform would not say the role of the person asking "
                                     f"({refused.reason}); nothing was done.")
        asker = Party(context.user_id, role=mine.role, superuser=superuser, rank=mine.rank)
        try:
            theirs = (Standing() if target.is_bot
                      else await self._role(platform, bot, group, target_id, action))
            target = Party(target_id, role=theirs.role, superuser=target.superuser, is_bot=target.is_bot,
                           rank=theirs.rank)
            bots = await self._role(platform, bot, group, self_id, action)
            me = Party(self_id, role=bots.role, is_bot=True, rank=bots.rank)
        except Refused as refused:
            return await self._ended(context, action, target_id, detail, "failed",
                                     f"{target_id} is not a member of this group, or the platform would "
                                     f"not say ({refused.reason}); nothing was done.")
        why = _why_not(action, asker, target, me, (mine, theirs, bots)) or unplaced
        if why is not None:
            return await self._ended(context, action, target_id, detail, "denied", why)
        row, over = await self._reserve(context, action, target_id, detail)
        if over is not None:
            return self._told(context, action, target_id, "denied", over)
        try:
            await self._act(platform, bot, group, action, subject, minutes)
        except Refused as refused:
            return await self._ended(context, action, target_id, detail, "failed",
                                     f"The platform refused: {refused.reason}. Nothing was done.", row=row)
        done = _done(action, target_id, subject, minutes)
        return await self._ended(context, action, target_id, detail, "done", done, row=row)

    async def _sender(self, context: ToolContext, platform: GroupPlatform,
                      message_id: str) -> tuple[str, str | None] | ToolResponse:
        """Who sent the message to recall, and why it is not recalled from here whatever the
        roles (None: it may be); the ended result when it cannot be recalled at all."""
        group = str(context.group_id)
        try:
            return await platform.sender_of(context.bot, context.event, group, message_id), None
        except Unplaced as unplaced:
            return unplaced.sender, f"{unplaced.reason}. Nothing was done."
        except Elsewhere as elsewhere:
            return await self._ended(context, "recall", message_id, message_id, "denied",
                                     f"{elsewhere.reason}. Nothing was done.")
        except Refused as refused:
            return await self._ended(context, "recall", message_id, message_id, "failed",
                                     f"Could not find message {message_id} here ({refused.reason}); "
                                     "nothing was done.")

    async def _act(self, platform: GroupPlatform, bot: Bot, group: str, action: Action, subject: str,
                   minutes: int) -> None:
        if action == "mute":
            await platform.mute(bot, group, subject, minutes * 60)
        elif action == "unmute":
            await platform.mute(bot, group, subject, 0)
        elif action == "kick":
            await platform.kick(bot, group, subject)
        else:
            await platform.recall(bot, group, subject)

    async def turned_off(self, group_key: str) -> bool:
        """Whether the group turned the tools off (read again: another bot process may have)."""
        try:
            off = await self.store.get_group_setting(group_key, SETTING) == "off"
        except StoreError:
            return group_key in self.off
        (self.off.add if off else self.off.discard)(group_key)
        return off

    async def _over_limit(self, context: ToolContext, *, mine: int = 0) -> str | None:
        """Why the asker may have no more actions this hour (done or under way, `mine` of them
        this call's own), None while they may."""
        done = await self.log.done_since(_person(context), self.now() - HOUR) - mine
        if done >= self.per_hour:
            return (f"The person asking has had {done} group actions done in the last hour, the most "
                    f"allowed (MARSHO_GROUP_ACTIONS_PER_HOUR={self.per_hour}); nothing was done. "
                    "Try again later, or ask an admin to do it.")
        return None

    async def _reserve(self, context: ToolContext, action: Action, target: str,
                       detail: str) -> tuple[int, str | None]:
        """Take a slot of the asker's hourly bound before acting: the pending row first, then the
        count that includes it, so that parallel calls (in this process they take turns; across
        processes the later count sees both rows) never act past the bound. The row, and why
        not when over the bound (the row then denied)."""
        async with self._slots:
            row = await self.log.add(LoggedAction(
                at=self.now(), group_key=context.chat_key, asker=_person(context), action=action,
                target=target, detail=detail, outcome="pending"))
            over = await self._over_limit(context, mine=1)
            if over is not None:
                await self.log.settle(row, "denied", over)
        return row, over

    async def _role(self, platform: GroupPlatform, bot: Bot, group: str, user_id: str,
                    action: Action) -> Standing:
        """The member's standing as the platform says (for `action`, where it depends on it),
        asked at most once per ROLES_TTL."""
        key = (platform.name, str(bot.self_id), group, user_id, action if platform.roles_per_action else "")
        cached = self._roles.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        role = await platform.standing(bot, group, user_id, action)
        if len(self._roles) > 4096:
            self._roles.clear()
        self._roles[key] = (time.monotonic() + ROLES_TTL, role)
        return role

    async def _ended(self, context: ToolContext, action: Action, target: str, detail: str, outcome: str,
                     sentence: str, *, row: int | None = None) -> ToolResponse:
        """Log how an action ended (settling its pending `row`, when it took one), and the result
        for the model."""
        reason = "" if outcome == "done" else sentence
        try:
            if row is not None:
                await self.log.settle(row, outcome, reason)
            else:
                await self.log.add(LoggedAction(at=self.now(), group_key=context.chat_key,
                                                asker=_person(context), action=action, target=target,
                                                detail=detail, outcome=outcome, reason=reason))
        except StoreError as error:
            if outcome != "done":
                raise
            # done on the platform: say so; the row stays pending, which still counts this hour
            logger.warning(f"marsho: group__{action} in {context.chat_key} was done but not logged: {error}")
        return self._told(context, action, target, outcome, sentence)

    def _told(self, context: ToolContext, action: Action, target: str, outcome: str,
              sentence: str) -> ToolResponse:
        logger.info(f"marsho: group__{action} asked by {context.user_id} in {context.chat_key} "
                    f"on {target}: {outcome}")
        return ToolResponse.success(sentence) if outcome == "done" else ToolResponse.error(sentence)


def _why_not(action: Action, asker: Party, target: Party, me: Party,
             standings: tuple[Standing, Standing, Standing]) -> str | None:
    """Why the action may not run (agent/group_actions.py's rules), told with the permission the
    platform would want where that is what is missing, and the platform's own shield."""
    why = refusal(action, asker, target, me)
    mine, theirs, bots = standings
    if why is None:
        if theirs.shielded and not target.is_bot:
            return f"{theirs.shielded}: nothing was done."
        return None
    what = f"{action} {target.user_id}" if action != "recall" else f"recall a message of {target.user_id}"
    if (asker.role == "member" and mine.lacks and not asker.superuser
            and target_problem(action, target) is None):
        return (f"The person asking does not have {mine.lacks}, which it takes to {what}: only those "
                "who could do it themselves can have me do it. Nothing was done.")
    if me.role == "member" and bots.lacks and refusal(action, asker, target, Party(me.user_id, role="owner",
                                                                                   is_bot=True)) is None:
        return (f"I cannot {what}: I do not have {bots.lacks}. Nothing was done; a group admin can do it, "
                "or give me that permission.")
    return why


def _platform_role(context: ToolContext) -> GroupRole:
    """The asker's role in the group as the event gave it (a superuser's is not needed: they act
    with the bot's authority)."""
    role = context.role
    return role if role in ("owner", "admin") else "member"


def _person(context: ToolContext) -> str:
    return f"{context.platform}:{context.user_id}"


def _done(action: Action, target: str, subject: str, minutes: int) -> str:
    if action == "mute":
        return f"Muted {target} for {minutes} minute{'s' if minutes != 1 else ''}."
    if action == "unmute":
        return f"Lifted the mute of {target}."
    if action == "kick":
        return f"Removed {target} from the group."
    return f"Recalled message {subject} (sent by {target})."
