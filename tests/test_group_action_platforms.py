"""The group tools (issue 28) on Discord, the QQ official API's guilds, Kook and Feishu, through
each adapter's own events and Bot (tests/platforms.py records every API call and answers the
member, role and permission calls): the role table on each, the exact call that acts, nothing
that acts when refused, the tools a platform lacks not offered, and ids in the platform's own
spelling. The asker's context is built as a turn builds it (where_of, asker_role, _tool_context).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from nonebot.adapters import Event

from nonebot_plugin_marsho.agent.group_actions import Action, Party, refusal
from nonebot_plugin_marsho.chat.ask import _tool_context
from nonebot_plugin_marsho.chat.group_actions import GroupActions, shows_ids
from nonebot_plugin_marsho.chat.incoming import Limits, read_question
from nonebot_plugin_marsho.chat.matchers import asker_role
from nonebot_plugin_marsho.chat.where import where_of
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools.model import ToolContext, ToolResponse
from tests.platforms import GUILD_ROLE_CHATS, Chat, DiscordGuildChat, forget_uninfo_sessions

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Platform:
    """How one adapter's chat is driven here."""

    name: str
    where: str
    """The scene the group tools act in: "channel" (a guild channel) or "group"."""
    tools: tuple[Action, ...]
    user: Callable[[int], str]
    """The n-th person's id, as the platform spells it."""
    bot_id: Callable[[Chat], str]
    acting: Callable[[Call], bool]
    """Whether a recorded call acts (mutes, kicks, recalls)."""
    top_bot: str | None
    """The role that puts the bot above an admin here (None: one the bot cannot hold beside an
    owner who asks)."""
    bad_id: str
    """An id that is not the platform's, and the words the refusal names its form with."""
    form: str


def _named(*apis: str) -> Callable[[Call], bool]:
    return lambda call: call[0] in apis


PLATFORMS = {p.name: p for p in (
    Platform("Discord", "channel", ("mute", "unmute", "kick", "recall"),
             lambda n: f"14000000000000001{n:02d}", lambda chat: chat.self_id,
             _named("modify_guild_member", "remove_guild_member", "delete_message"),
             "admin", "@Bob", "is not a Discord id"),
    Platform("QQ", "channel", ("mute", "unmute", "kick", "recall"),
             lambda n: f"1441152186775633{n:02d}", lambda chat: chat.bot._self_info.id,
             _named("patch_guild_member_mute", "delete_member", "delete_message"),
             "owner", "１２３", "is not a QQ guild member id"),
    Platform("Kaiheila", "channel", ("kick", "recall"),
             lambda n: f"22000{n:02d}", lambda chat: chat.self_id,
             _named("guild_kickout", "message_delete"), None, "22 00", "is not a Kook id"),
    Platform("Feishu", "group", ("kick", "recall"),
             lambda n: f"ou_{n:032d}", lambda chat: chat.bot_open_id,
             lambda call: call[1].get("method") == "DELETE", None, "12345", "starts with ou_"),
)}
ASKER, TARGET = 1, 2


@pytest.fixture(autouse=True)
def _fresh_uninfo() -> Iterator[None]:
    forget_uninfo_sessions()
    yield
    forget_uninfo_sessions()


@pytest.fixture
async def store() -> Any:
    sql = SqlStore("sqlite+aiosqlite://")
    await sql.start()
    yield sql
    await sql.close()


def chat_of(name: str) -> Chat:
    return GUILD_ROLE_CHATS[name]()


async def asked(chat: Chat, platform: Platform, roles: dict[str, str], **options: Any) -> tuple[Event, ToolContext]:
    """A message of the asker (`roles`: asker, target and bot by their ids) and the tools' context
    for it, as a turn builds it."""
    asker = platform.user(ASKER)
    event = chat.event(platform.where, "marsho please", user_id=asker, **options)
    chat.roles.update(roles)
    where = await where_of(chat.bot, event)
    role = await asker_role(chat.bot, event, where)
    return event, _tool_context(chat.bot, event, where, "k", role, personal=True)


def acted(chat: Chat, platform: Platform) -> list[Call]:
    return [call for call in chat.calls if platform.acting(call)]


def expected_call(chat: Chat, platform: Platform, action: Action, subject: str, seconds: int = 0) -> Call:
    """The one call `action` on `subject` makes on the platform (Discord's mute: checked apart)."""
    guild, channel, group = chat.guild_id, chat.channel_id, chat.group_id
    if platform.name == "Discord":
        return {"kick": ("remove_guild_member", {"guild_id": int(guild), "user_id": int(subject)}),
                "recall": ("delete_message", {"channel_id": int(channel), "message_id": int(subject)})}[action]
    if platform.name == "QQ":
        return {"unmute": ("patch_guild_member_mute", {"guild_id": guild, "user_id": subject,
                                                       "mute_end_timestamp": 0, "mute_seconds": 0}),
                "kick": ("delete_member", {"guild_id": guild, "user_id": subject}),
                "recall": ("delete_message", {"channel_id": channel, "message_id": subject})}[action]
    if platform.name == "Kaiheila":
        return {"kick": ("guild_kickout", {"guild_id": guild, "target_id": subject}),
                "recall": ("message_delete", {"msg_id": subject})}[action]
    return {"kick": (f"im/v1/chats/{group}/members", {
        "method": "DELETE", "query": {"member_id_type": "open_id"}, "body": {"id_list": [subject]}}),
            "recall": (f"im/v1/messages/{subject}", {"method": "DELETE"})}[action]


async def run(actions: GroupActions, context: ToolContext, action: Action, subject: str) -> ToolResponse:
    return await actions.run(context, action, subject, minutes=2 if action == "mute" else 0)


def person_actions(platform: Platform) -> list[Action]:
    """The platform's tools that act on a person."""
    return [a for a in platform.tools if a != "recall"]


CELLS = [(name, action) for name, p in PLATFORMS.items() for action in person_actions(p)]


def _at(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, timezone.utc)


def assert_acted(chat: Chat, platform: Platform, action: Action, subject: str, seconds: int = 0,
                 since: float = 0.0) -> None:
    """The one call made; a mute's end counted from `since` (taken before the run) to now."""
    made, now = acted(chat, platform), time.time()
    if platform.name == "Discord" and action in ("mute", "unmute"):
        [(api, params)] = made
        until = params.pop("communication_disabled_until")
        assert (api, params) == ("modify_guild_member", {"guild_id": int(chat.guild_id), "user_id": int(subject)})
        if action == "unmute":
            assert until is None
        else:
            assert isinstance(until, datetime)
            assert _at(since + seconds) <= until <= _at(now + seconds)
        return
    if platform.name == "QQ" and action == "mute":
        [(api, params)] = made
        until = params.pop("mute_end_timestamp")
        assert (api, params) == ("patch_guild_member_mute", {"guild_id": chat.guild_id, "user_id": subject,
                                                             "mute_seconds": seconds})
        assert int(since) + seconds <= until <= now + seconds
        return
    assert made == [expected_call(chat, platform, action, subject, seconds)]


# --- the role table ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "action"), CELLS)
async def test_an_admin_acts_on_a_member_with_the_platforms_own_call(store: SqlStore, name: str, action: Action) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    target = platform.user(TARGET)
    _, context = await asked(chat, platform, {platform.user(ASKER): "admin", target: "member",
                                              platform.bot_id(chat): "admin"})
    since = time.time()
    result = await run(GroupActions(store, kick=True), context, action, target)
    assert result.status == "success", result.content
    assert_acted(chat, platform, action, target, seconds=120, since=since)


@pytest.mark.parametrize(("name", "action"), CELLS)
@pytest.mark.parametrize(("asker", "target", "said"), [
    ("member", "member", "The person asking"),
    ("admin", "admin", "The "),
    ("admin", "owner", "they are the group's owner"),
])
async def test_nobody_acts_on_their_equal_or_above(store: SqlStore, name: str, action: Action, asker: str,
                                                   target: str, said: str) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    _, context = await asked(chat, platform, {platform.user(ASKER): asker, platform.user(TARGET): target,
                                              platform.bot_id(chat): "admin"})
    result = await run(GroupActions(store, kick=True), context, action, platform.user(TARGET))
    assert result.status == "error" and said in result.content, result.content
    assert acted(chat, platform) == []


@pytest.mark.parametrize(("name", "action"), CELLS)
async def test_the_owner_acts_on_an_admin_where_the_bot_is_above_them(
        store: SqlStore, name: str, action: Action) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    target, bot_id = platform.user(TARGET), platform.bot_id(chat)
    if isinstance(chat, DiscordGuildChat):
        chat.positions[bot_id] = 50
    _, context = await asked(chat, platform, {platform.user(ASKER): "owner", target: "admin",
                                              bot_id: platform.top_bot or "admin"})
    since = time.time()
    result = await run(GroupActions(store, kick=True), context, action, target)
    if platform.top_bot is None:  # the owner may; the bot, a manager, may not act on one
        assert result.status == "error" and "I cannot" in result.content, result.content
        assert acted(chat, platform) == []
    else:
        assert result.status == "success", result.content
        assert_acted(chat, platform, action, target, seconds=120, since=since)


@pytest.mark.parametrize(("name", "action"), CELLS)
async def test_a_bot_without_the_permission_does_nothing_and_says_why(
        store: SqlStore, name: str, action: Action) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    _, context = await asked(chat, platform, {platform.user(ASKER): "admin", platform.user(TARGET): "member",
                                              platform.bot_id(chat): "member"})
    result = await run(GroupActions(store, kick=True), context, action, platform.user(TARGET))
    assert result.status == "error" and result.content.startswith("I cannot"), result.content
    assert acted(chat, platform) == []
    if name in ("Discord", "Kaiheila"):  # roles by permission: the one missing is named
        assert "permission" in result.content, result.content


@pytest.mark.parametrize("name", PLATFORMS)
async def test_a_tool_the_platform_lacks_is_not_offered(store: SqlStore, name: str) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    _, context = await asked(chat, platform, {platform.user(ASKER): "admin"})
    tools = {tool.name.removeprefix("group__"): tool for tool in GroupActions(store, kick=True).toolkit().tools}
    assert {action for action, tool in tools.items() if context.may_use(tool)} == set(platform.tools)
    for action in set(tools) - set(platform.tools):
        result = await run(GroupActions(store, kick=True), context, action, platform.user(TARGET))  # type: ignore[arg-type]
        assert result.status == "error" and f"has no way for a bot to {action}" in result.content
    assert acted(chat, platform) == []


@pytest.mark.parametrize("name", PLATFORMS)
@pytest.mark.parametrize("kick", [True, False])
def test_marsho_actions_names_the_tools_this_platform_has(store: SqlStore, name: str, kick: bool) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    listed = GroupActions(store, kick=kick).actions_on(chat.bot)
    assert listed == [action for action in platform.tools if kick or action != "kick"]


@pytest.mark.parametrize("name", PLATFORMS)
async def test_an_id_not_in_the_platforms_spelling_is_refused_naming_its_form(store: SqlStore, name: str) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    _, context = await asked(chat, platform, {platform.user(ASKER): "admin", platform.bot_id(chat): "admin"})
    before = len(chat.calls)
    result = await run(GroupActions(store, kick=True), context, "kick", platform.bad_id)
    assert result.status == "error" and platform.form in result.content, result.content
    assert chat.calls[before:] == []


# --- recalls: the quoted message's id as the question shows it ------------------------------------


async def preprocessed(chat: Chat, event: Event) -> Event:
    """`event` after its adapter's own preprocessing of a quote (QQ and Feishu fetch the quoted
    message in Bot.handle_event, before any matcher)."""
    import importlib

    check = getattr(importlib.import_module(type(chat.bot).__mro__[2].__module__), "_check_reply", None)
    if check is not None:
        await check(chat.bot, event)
    return event


async def question_text(chat: Chat, event: Event, actions: GroupActions) -> str:
    """The question as the model reads it, where the group tools may run."""
    assert shows_ids(actions, chat.bot, event)
    await preprocessed(chat, event)
    question = await read_question(chat.bot, event, "marsho please", vision=False, model="m", limits=Limits(),
                                   marsho_name="Marsho", t=Texts("en"), ids=True)
    return "\n".join(part["text"] for part in question.parts if part["type"] == "text")


QUOTED_ID = re.compile(r"\(message id: ([^)]+)\) from [^\n]*\(id:([^)]+)\)")


@pytest.mark.parametrize("name", PLATFORMS)
@pytest.mark.parametrize(("asker", "acts"), [("admin", True), ("member", False)])
async def test_the_quoted_message_is_recalled_by_the_id_the_question_shows(
        store: SqlStore, name: str, asker: str, acts: bool) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    actions = GroupActions(store)
    event, context = await asked(chat, platform, {platform.user(ASKER): asker, platform.bot_id(chat): "admin"},
                                 quote="spam spam")
    found = QUOTED_ID.search(await question_text(chat, event, actions))
    assert found is not None, await question_text(chat, event, actions)
    message_id, sender = found.groups()
    chat.roles.setdefault(sender, "member")
    result = await actions.run(context, "recall", message_id)
    assert (result.status == "success") is acts, result.content
    if acts:
        assert acted(chat, platform) == [expected_call(chat, platform, "recall", message_id)]
        assert sender in result.content
    else:
        assert acted(chat, platform) == []


@pytest.mark.parametrize("name", PLATFORMS)
async def test_questions_outside_a_place_with_the_tools_show_no_ids(store: SqlStore, name: str) -> None:
    chat = chat_of(name)
    assert not shows_ids(GroupActions(store), chat.bot, chat.private_event("marsho hi"))
    if name == "QQ":  # a QQ group (not a guild) has no member roles to ask: no tools there
        group_event = chat.group_event("marsho hi")
        assert not shows_ids(GroupActions(store), chat.bot, group_event)


@pytest.mark.parametrize(("name", "options"), [("QQ", {}), ("Feishu", {"at_bot": True})])
async def test_a_mention_of_the_bot_by_its_other_id_is_no_target(store: SqlStore, name: str,
                                                                 options: dict[str, Any]) -> None:
    """A QQ guild message @s the bot by its user id (not its app id, self_id), a Feishu one by
    its open_id: neither is shown as someone to act on."""
    platform, chat = PLATFORMS[name], chat_of(name)
    event, _ = await asked(chat, platform, {platform.user(ASKER): "admin"}, **options)
    asked_text = await question_text(chat, event, GroupActions(store))
    assert "(id:" not in asked_text, asked_text


# --- what is each platform's own ---------------------------------------------------------------------


async def discord_asked(store: SqlStore, asker: str = "admin", target: str = "member",
                        **options: Any) -> tuple[DiscordGuildChat, ToolContext]:
    platform = PLATFORMS["Discord"]
    chat = DiscordGuildChat()
    _, context = await asked(chat, platform, {platform.user(ASKER): asker, platform.user(TARGET): target,
                                              chat.self_id: "admin"}, **options)
    chat.positions[chat.self_id] = 50
    return chat, context


@pytest.mark.parametrize(("asker_position", "acts"), [(9, True), (5, False), (3, False)])
async def test_on_discord_an_admin_times_out_an_admin_only_from_a_higher_role(
        store: SqlStore, asker_position: int, acts: bool) -> None:
    chat, context = await discord_asked(store, target="admin")
    chat.positions[PLATFORMS["Discord"].user(ASKER)] = asker_position
    result = await GroupActions(store).run(context, "mute", PLATFORMS["Discord"].user(TARGET), minutes=5)
    assert (result.status == "success") is acts, result.content
    assert bool(acted(chat, PLATFORMS["Discord"])) is acts
    if not acts:
        assert "highest role" in result.content


async def test_on_discord_the_bots_role_must_be_above_the_targets(store: SqlStore) -> None:
    chat, context = await discord_asked(store, asker="owner", target="admin")
    chat.positions[chat.self_id] = 4
    result = await GroupActions(store).run(context, "mute", PLATFORMS["Discord"].user(TARGET), minutes=5)
    assert result.status == "error" and "my highest role here is not above theirs" in result.content
    assert acted(chat, PLATFORMS["Discord"]) == []


async def test_on_discord_an_administrator_is_never_timed_out(store: SqlStore) -> None:
    chat, context = await discord_asked(store, asker="owner", target="admin")
    chat.administrators.add(PLATFORMS["Discord"].user(TARGET))
    result = await GroupActions(store).run(context, "mute", PLATFORMS["Discord"].user(TARGET), minutes=5)
    assert result.status == "error" and "Administrator permission" in result.content, result.content
    assert acted(chat, PLATFORMS["Discord"]) == []


async def test_on_discord_a_timeout_past_28_days_is_refused_naming_the_limit(store: SqlStore) -> None:
    chat, context = await discord_asked(store)
    target = PLATFORMS["Discord"].user(TARGET)
    result = await GroupActions(store).run(context, "mute", target, minutes=28 * 24 * 60 + 1)
    assert result.status == "error" and "28 days" in result.content and "40320" in result.content
    assert chat.calls[-1][0] != "modify_guild_member" and acted(chat, PLATFORMS["Discord"]) == []
    result = await GroupActions(store).run(context, "mute", target, minutes=28 * 24 * 60)
    assert result.status == "success", result.content


async def test_on_discord_a_channel_that_denies_manage_messages_stops_a_recall(store: SqlStore) -> None:
    chat, context = await discord_asked(store, quote="spam")
    quoted = next(iter(chat.messages))
    chat.roles[chat.messages[quoted]["author"]["id"]] = "member"
    chat.overwrites = [{"id": DiscordGuildChat.MOD_ROLE, "type": 0, "allow": "0", "deny": str(1 << 13)}]
    result = await GroupActions(store).run(context, "recall", quoted)
    assert result.status == "error" and "Manage Messages" in result.content, result.content
    assert acted(chat, PLATFORMS["Discord"]) == []
    assert "The person asking does not have" in result.content  # theirs is told first
    allowed = [{"id": who, "type": 1, "allow": str(1 << 13), "deny": "0"}
               for who in (PLATFORMS["Discord"].user(ASKER), chat.self_id)]  # a member's own wins
    chat.overwrites = [*allowed, {"id": DiscordGuildChat.MOD_ROLE, "type": 0, "allow": "0", "deny": str(1 << 13)}]
    other = await discord_asked(store, quote="spam")  # a fresh chat: the roles are cached a minute
    other[0].overwrites = chat.overwrites
    other[0].roles[chat.messages[quoted]["author"]["id"]] = "member"
    result = await GroupActions(store).run(other[1], "recall", next(iter(other[0].messages)))
    assert result.status == "success", result.content


@pytest.mark.parametrize(("action", "acts"), [("recall", True), ("mute", False)])
async def test_a_qq_channel_admin_recalls_in_their_channel_but_mutes_nobody(
        store: SqlStore, action: Action, acts: bool) -> None:
    platform = PLATFORMS["QQ"]
    chat = GUILD_ROLE_CHATS["QQ"]()
    event, context = await asked(chat, platform, {platform.bot_id(chat): "admin"}, quote="spam")
    chat.channel_admins.add(platform.user(ASKER))  # type: ignore[attr-defined]
    await preprocessed(chat, event)
    quoted = str(event.message_reference.message_id)  # type: ignore[attr-defined]
    subject = quoted if action == "recall" else platform.user(TARGET)
    result = await run(GroupActions(store), context, action, subject)
    assert (result.status == "success") is acts, result.content
    assert bool(acted(chat, platform)) is acts


async def test_the_tools_are_not_offered_in_a_qq_group(store: SqlStore) -> None:
    chat = GUILD_ROLE_CHATS["QQ"]()
    event = chat.group_event("marsho mute someone", role="admin")
    where = await where_of(chat.bot, event)
    context = _tool_context(chat.bot, event, where, "k", await asker_role(chat.bot, event, where), personal=True)
    assert not any(context.may_use(tool) for tool in GroupActions(store, kick=True).toolkit().tools)
    result = await GroupActions(store).run(context, "mute", PLATFORMS["QQ"].user(TARGET), minutes=1)
    assert result.status == "error" and "nothing was done" in result.content
    assert [api for api, _ in chat.calls if api in ("patch_guild_member_mute", "get_member")] == []


async def test_a_feishu_message_of_another_chat_is_not_recalled(store: SqlStore) -> None:
    platform, chat = PLATFORMS["Feishu"], GUILD_ROLE_CHATS["Feishu"]()
    _, context = await asked(chat, platform, {platform.user(ASKER): "admin", platform.bot_id(chat): "admin"},
                             quote="spam")
    quoted = next(iter(chat.messages))
    chat.messages[quoted]["chat_id"] = "oc_another"
    result = await GroupActions(store).run(context, "recall", quoted)
    assert result.status == "error" and "not sent in this group" in result.content, result.content
    assert acted(chat, platform) == []


@pytest.mark.parametrize(("name", "written"), [("Discord", "<@{id}>"), ("QQ", "<@!{id}>")])
async def test_a_mention_shows_the_id_the_tools_take(store: SqlStore, name: str, written: str) -> None:
    platform, chat = PLATFORMS[name], chat_of(name)
    target = platform.user(TARGET)
    event = chat.event(platform.where, "marsho mute " + written.format(id=target), user_id=platform.user(ASKER))
    asked_text = await question_text(chat, event, GroupActions(store))
    assert f"(id:{target})" in asked_text, asked_text


# --- the rule with ranks, apart from any platform -------------------------------------------------


@pytest.mark.parametrize(("asker", "target", "bot", "allowed"), [
    (Party("1", "admin", rank=9), Party("2", "admin", rank=5), Party("b", "admin", rank=20, is_bot=True), True),
    (Party("1", "admin", rank=5), Party("2", "admin", rank=5), Party("b", "admin", rank=20, is_bot=True), False),
    (Party("1", "admin", rank=9), Party("2", "member", rank=12), Party("b", "admin", rank=20, is_bot=True), False),
    (Party("1", "member", rank=30), Party("2", "member", rank=0), Party("b", "admin", rank=20, is_bot=True), False),
    (Party("1", "admin", rank=30), Party("2", "owner"), Party("b", "admin", rank=40, is_bot=True), False),
    (Party("1", "owner"), Party("2", "admin", rank=25), Party("b", "admin", rank=20, is_bot=True), False),
    (Party("1", "owner"), Party("2", "admin", rank=5), Party("b", "admin", rank=20, is_bot=True), True),
    (Party("1", "admin"), Party("2", "admin"), Party("b", "owner", is_bot=True), False),  # no ranks: the roles
])
def test_between_ranked_admins_the_higher_rank_decides(asker: Party, target: Party, bot: Party, allowed: bool) -> None:
    assert (refusal("kick", asker, target, bot) is None) is allowed


# --- Telegram's @usernames ------------------------------------------------------------------------


def _telegram_mention(chat: Chat, text: str, mention: str, *, user_id: str) -> Event:
    """A Telegram group message whose `mention` entity is `mention` (`@name`, no user id in it)."""
    from nonebot.adapters.telegram.event import Event as TelegramEvent

    message = {"message_id": int(time.time() * 1000) % 2**31, "date": int(time.time()),
               "chat": {"id": int(chat.group_id), "title": "Test group", "type": "supergroup"},
               "from": {"id": int(user_id), "is_bot": False, "first_name": "Ann", "username": f"u{user_id}"},
               "text": f"{text} {mention}",
               "entities": [{"type": "mention", "offset": len(text) + 1, "length": len(mention)}]}
    return TelegramEvent.parse_event({"update_id": 1, "message": message})


async def test_a_telegram_username_reads_as_the_id_of_who_wrote_under_it(store: SqlStore) -> None:
    from nonebot_plugin_marsho.chat import telegram_names
    from tests.platforms import PLATFORMS as CHATS

    telegram_names.forget()
    chat = CHATS["Telegram"]()
    target = "5550042"
    unseen = _telegram_mention(chat, "marsho mute", f"@u{target}", user_id=chat.user_id)
    assert f"(id:@u{target})" in await question_text(chat, unseen, GroupActions(store))
    telegram_names.remember(chat.group_event("hello all", user_id=target))  # they write once
    seen = _telegram_mention(chat, "marsho mute", f"@U{target}", user_id=chat.user_id)
    assert f"(id:{target})" in await question_text(chat, seen, GroupActions(store))


def test_a_telegram_username_nobody_was_seen_under_is_refused_saying_why() -> None:
    from nonebot_plugin_marsho.chat.group_actions import PLATFORMS as GROUP_PLATFORMS
    from nonebot_plugin_marsho.chat.group_actions import BadId

    with pytest.raises(BadId) as refused:
        GROUP_PLATFORMS["Telegram"].user_id("@bob")
    assert "'@bob' is a username, not a Telegram id" in str(refused.value)
    assert "quote one of their messages" in str(refused.value)
