"""Marsho on every adapter it supports (issue 14): where a message was said and who said it come
from nonebot-plugin-uninfo, so each platform's groups, guild channels and private chats get their
own sessions, answers go out through the adapter's own send API, and roles, quotes and pictures
are read the platform's way.

Each test sends real events of the adapter (built by its own parsing, tests/platforms.py) through
the adapter's Bot.handle_event (its own preprocessing: @-mentions, reply lookup), with a bot that
records every API call and answers the ones uninfo and alconna make.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from nonebot import require
from nonebot.adapters import Event

from tests.conftest import SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.platforms import PLATFORMS, PNG, Chat, Files, carries_png, forget_uninfo_sessions

require("nonebot_plugin_uninfo")

SHARED = "This conversation is shared by the whole group: only group admins and superusers can reset it."
CELLS = [pytest.param(name, where, id=f"{name}-{where}")
         for name, chat in PLATFORMS.items() for where in chat.wheres]
SHARED_CELLS = [pytest.param(name, where, id=f"{name}-{where}")
                for name, chat in PLATFORMS.items() for where in chat.wheres if where in ("group", "channel")]
ROLE_CELLS = [pytest.param(name, where, role, id=f"{name}-{where}-{role}")
              for name, chat in PLATFORMS.items() for where in chat.wheres if where in ("group", "channel")
              for role in chat.roles_from_platform]
PAIRS = [pytest.param(name, shared, private, id=f"{name}-{shared}-{private}")
         for name, chat in PLATFORMS.items()
         for shared, private in (("group", "private"), ("channel", "private"), ("channel", "dms"))
         if shared in chat.wheres and private in chat.wheres]
QUOTE_CELLS = [pytest.param(name, where, id=f"{name}-{where}")
               for name, chat in PLATFORMS.items() for where in chat.wheres
               if name not in ("Console", "OneBot V12")]
"""The console has no quotes; a OneBot v12 reply segment names the quoted message without its
content (and v12 has no API to fetch one), so there is nothing to read."""
FILE_ID_PICTURES = [pytest.param(name, where, id=f"{name}-{where}")
                    for name in ("Telegram", "Feishu", "OneBot V12") for where in PLATFORMS[name].wheres]
URL_PICTURES = [pytest.param(name, where, id=f"{name}-{where}")
                for name in ("QQ", "Discord", "Satori", "OneBot V11") for where in PLATFORMS[name].wheres]
"""A Kook picture is a message of its own (type 2, no text): Kook asks about one by quoting it."""


@pytest.fixture(autouse=True)
def _fresh_uninfo() -> Iterator[None]:
    forget_uninfo_sessions()
    yield
    forget_uninfo_sessions()


@pytest.fixture
def files() -> Iterator[Files]:
    served = Files()
    yield served
    served.close()


async def say(chat: Chat, event: Event) -> None:
    """Deliver `event` as the adapter would: its Bot's own handle_event, then NoneBot's."""
    await chat.bot.handle_event(event)


def last_question(fake: FakeOpenAI) -> Any:
    """The user's message of the last request the endpoint received."""
    return fake.requests[-1]["messages"][-1]["content"]


def request_text(request: dict[str, Any]) -> str:
    return json.dumps(request["messages"], ensure_ascii=False)


def question_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


def pictures_in(content: Any) -> list[bytes]:
    if isinstance(content, str):
        return []
    found = []
    for part in content:
        if part.get("type") == "image_url":
            url = part["image_url"]["url"]
            assert url.startswith("data:image/png;base64,"), url[:40]
            found.append(base64.b64decode(url.split(",", 1)[1]))
    return found


# --- the plugin says which adapters it serves ---------------------------------------------------------


def test_the_metadata_lists_exactly_the_supported_adapters() -> None:
    from nonebot_plugin_marsho.plugin import __plugin_meta__

    assert __plugin_meta__.supported_adapters == {
        "~onebot.v11", "~onebot.v12", "~qq", "~telegram", "~discord", "~kaiheila", "~feishu", "~satori",
        "~console"}


def test_every_platform_is_in_the_matrix_with_its_scenes() -> None:
    """The matrix itself: every supported adapter, with each kind of chat it has."""
    assert {name: chat.wheres for name, chat in PLATFORMS.items()} == {
        "QQ": ("group", "private", "channel", "dms"), "Telegram": ("group", "private"),
        "Discord": ("channel", "private"), "Kaiheila": ("channel", "private"), "Feishu": ("group", "private"),
        "Satori": ("group", "channel", "private"), "OneBot V11": ("group", "private"),
        "OneBot V12": ("group", "channel", "private"), "Console": ("private",)}


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_uninfo_reads_each_scene_the_platform_way(app, name: str, where: str) -> None:
    from nonebot_plugin_uninfo import SceneType, get_session

    chat = PLATFORMS[name]()
    event = chat.event(where, "marsho hi")
    session = await get_session(chat.bot, event)
    assert session is not None
    expected = {"group": SceneType.GROUP, "channel": SceneType.CHANNEL_TEXT, "private": SceneType.PRIVATE,
                "dms": SceneType.PRIVATE}[where]
    assert session.scene.type == expected
    assert session.user.id == event.get_user_id()


# --- a question, its answer and its session, everywhere -----------------------------------------------


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_a_question_is_answered_through_the_adapters_send_api(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("Hello from Marsho"))
    event = chat.event(where, "marsho hi")
    await say(chat, event)
    assert len(fake.requests) == 1
    assert question_text(last_question(fake)).endswith("hi")
    assert chat.sent_texts() and chat.sent_texts()[-1].endswith("Hello from Marsho"), chat.calls
    assert chat.sent_targets() == [chat.expected_target(where, event)]


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_the_slash_trigger_works_everywhere(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("Slash answered"))
    await say(chat, chat.event(where, "/marsho hi there"))
    assert question_text(last_question(fake)).endswith("hi there")
    assert chat.sent_texts()[-1].endswith("Slash answered")


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_each_scene_has_the_session_key_of_the_contract(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("Noted"))
    event = chat.event(where, "marsho remember 2718")
    await say(chat, event)
    stored = await plugin_engine.history.export(chat.expected_key(where, event))
    assert "2718" in json.dumps(stored, ensure_ascii=False), (chat.expected_key(where, event), stored)


@pytest.mark.parametrize("scope", ["user_in_group", "user"])
@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_the_session_scope_names_the_member(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str, scope: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("Noted"))
    event = chat.event(where, "marsho remember 1618")
    with configured(marsho_session_scope=scope):
        await say(chat, event)
    key = chat.expected_key(where, event, scope)
    assert "1618" in json.dumps(await plugin_engine.history.export(key), ensure_ascii=False), key


@pytest.mark.parametrize(("name", "shared", "private"), PAIRS)
async def test_a_group_and_a_private_chat_of_the_same_person_never_share_history(
    app, fake: FakeOpenAI, plugin_engine, name: str, shared: str, private: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("I will keep it in the group"), text("I know no secret here"))
    await say(chat, chat.event(shared, "marsho my group secret is 4711"))
    await say(chat, chat.event(private, "marsho what is my secret?"))
    assert len(fake.requests) == 2
    assert "4711" in request_text(fake.requests[0])
    assert "4711" not in request_text(fake.requests[1])
    # and the other way round
    fake.push(text("I will keep it private"), text("No private secret here"))
    await say(chat, chat.event(private, "marsho my private secret is 8123"))
    await say(chat, chat.event(shared, "marsho what is my private secret?"))
    assert "8123" in request_text(fake.requests[2])
    assert "8123" not in request_text(fake.requests[3])
    assert "4711" in request_text(fake.requests[3])  # the group still has its own


@pytest.mark.parametrize("scope", ["group", "user_in_group", "user"])
@pytest.mark.parametrize(("name", "shared", "private"), PAIRS)
async def test_no_session_scope_lets_a_private_chat_read_a_group(
    app, fake: FakeOpenAI, plugin_engine, name: str, shared: str, private: str, scope: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("kept"), text("nothing"))
    with configured(marsho_session_scope=scope):
        await say(chat, chat.event(shared, "marsho my group secret is 4711"))
        await say(chat, chat.event(private, "marsho what is my secret?"))
    assert "4711" not in request_text(fake.requests[1])


@pytest.mark.parametrize("name", ["OneBot V11", "OneBot V12", "Satori"])
async def test_a_group_whose_id_is_a_members_id_is_not_that_members_private_chat(
    app, fake: FakeOpenAI, plugin_engine, name: str
) -> None:
    """QQ numbers name groups and people alike: group 10001 is not user 10001's private chat."""
    chat = PLATFORMS[name]()
    chat.group_id = chat.user_id
    fake.push(text("kept"), text("nothing"))
    group = chat.group_event("marsho my group secret is 4711")
    await say(chat, group)
    private = chat.private_event("marsho what is my secret?")
    await say(chat, private)
    assert "4711" not in request_text(fake.requests[1])
    assert chat.expected_key("group", group) != chat.expected_key("private", private)


async def test_kook_direct_messages_of_two_users_are_two_sessions(app, fake: FakeOpenAI, plugin_engine) -> None:
    """Kook's adapter sets group_id to the bot's id for every DM: that must not merge users."""
    chat = PLATFORMS["Kaiheila"]()
    fake.push(text("kept"), text("nothing"))
    first = chat.private_event("marsho my secret is 4711", user_id="2200001")
    await say(chat, first)
    second = chat.private_event("marsho what is the secret?", user_id="2200002")
    await say(chat, second)
    assert "4711" not in request_text(fake.requests[1])
    assert chat.expected_key("private", first) != chat.expected_key("private", second)
    assert await plugin_engine.history.export(chat.expected_key("private", second))
    assert chat.sent_targets() == ["directMessage_create:2200001", "directMessage_create:2200002"]


async def test_two_discord_channels_of_one_member_are_two_sessions(app, fake: FakeOpenAI, plugin_engine) -> None:
    """Discord's events name their session by the author alone (uninfo caches by that name)."""
    chat = PLATFORMS["Discord"]()
    fake.push(text("kept"), text("nothing"))
    await say(chat, chat.channel_event("marsho the secret of this channel is 4711"))
    chat.channel_id = "1300000000000000002"
    await say(chat, chat.channel_event("marsho what is the secret?"))
    assert "4711" not in request_text(fake.requests[1])
    assert chat.sent_targets() == ["channel:1300000000000000001", "channel:1300000000000000002"]


# --- commands and roles ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_a_member_cannot_reset_a_shared_conversation(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("first"))
    event = chat.event(where, "marsho one")
    await say(chat, event)
    await say(chat, chat.event(where, "marsho.reset"))
    assert chat.sent_texts()[-1].endswith(SHARED)
    assert (await plugin_engine.history.stats(chat.expected_key(where, event)))[0] == 1


@pytest.mark.parametrize(("name", "where", "role"), ROLE_CELLS)
async def test_the_platforms_owner_and_admins_may_reset_a_shared_conversation(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str, role: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("first"))
    event = chat.event(where, "marsho one")
    await say(chat, event)
    await say(chat, chat.event(where, "marsho.reset", user_id="99887766", role=role))
    assert chat.sent_texts()[-1].endswith("Done: I forgot this conversation (1 turn).")
    assert (await plugin_engine.history.stats(chat.expected_key(where, event)))[0] == 0


@pytest.mark.parametrize(("name", "where", "role"), ROLE_CELLS)
async def test_a_member_speaking_after_an_admin_is_still_a_member(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str, role: str
) -> None:
    """uninfo caches a session by the event's session id for 5 minutes, and some adapters' ids
    leave out the sender (Satori's names the channel only): the next speaker is not the last."""
    chat = PLATFORMS[name]()
    fake.push(text("first"))
    await say(chat, chat.event(where, "marsho one", user_id="99887766", role=role))
    await say(chat, chat.event(where, "marsho.reset", user_id="55443322"))
    assert chat.sent_texts()[-1].endswith(SHARED)


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_each_speaker_in_a_shared_chat_is_named_as_themselves(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("hi Alice"), text("hi Bob"))
    await say(chat, chat.event(where, "marsho I am here", user_id="99887766", name="Alice"))
    await say(chat, chat.event(where, "marsho me too", user_id="55443322", name="Bob"))
    label = question_text(last_question(fake)).split(":", 1)[0]
    assert "Alice" not in label and "99887766" not in label, label
    assert "Bob" in label or "55443322" in label, label


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_a_superuser_may_reset_a_shared_conversation(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("first"))
    event = chat.event(where, "marsho one")
    await say(chat, event)
    await say(chat, chat.event(where, "marsho.reset", user_id=SUPERUSER_ID))
    assert chat.sent_texts()[-1].endswith("Done: I forgot this conversation (1 turn).")


@pytest.mark.parametrize(("name", "where"), [c for c in CELLS if c.values[1] in ("private", "dms")])
async def test_anyone_may_reset_their_private_conversation(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("first"))
    event = chat.event(where, "marsho one")
    await say(chat, event)
    await say(chat, chat.event(where, "marsho.reset"))
    assert chat.sent_texts()[-1].endswith("Done: I forgot this conversation (1 turn).")
    assert (await plugin_engine.history.stats(chat.expected_key(where, event)))[0] == 0


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_tools_lists_the_toolkits_everywhere(app, plugin_engine, name: str, where: str) -> None:
    chat = PLATFORMS[name]()
    await say(chat, chat.event(where, "marsho.tools"))
    listing = chat.sent_texts()[-1]
    assert "Loaded toolkits (" in listing and "owner-kit__lookup" in listing, listing
    # a member is told which toolkit failed, not why
    assert "(The bot's owner sees why, with marsho.tools, and in the log.)" in listing


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_the_superusers_tools_listing_has_the_details(app, plugin_engine, name: str, where: str) -> None:
    chat = PLATFORMS[name]()
    await say(chat, chat.event(where, "marsho.tools", user_id=SUPERUSER_ID))
    assert "broken-kit/tools.json: invalid JSON" in chat.sent_texts()[-1]


# --- allow and deny lists ---------------------------------------------------------------------------


def _list_names(chat: Chat, where: str) -> list[str]:
    """The ids an owner may list for the chat: a group's; a channel's own or its guild's."""
    return [chat.group_id] if where == "group" else [chat.channel_id, chat.guild_id]


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_a_denied_group_or_channel_is_not_answered(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    for denied in _list_names(chat, where):
        with configured(marsho_denied_groups=[denied]):
            await say(chat, chat.event(where, "marsho hi"))
    assert fake.requests == [] and chat.sent_calls() == []


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_an_allowed_group_or_channel_is_answered_and_no_other(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    for allowed in _list_names(chat, where):
        with configured(marsho_allowed_groups=[allowed]):
            await say(chat, chat.event(where, "marsho hi"))
    assert len(fake.requests) == len(_list_names(chat, where))
    with configured(marsho_allowed_groups=["some-other-group"]):
        await say(chat, chat.event(where, "marsho hi"))
    assert len(fake.requests) == len(_list_names(chat, where))


# --- platform triggers -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["group", "private"])
async def test_telegram_commands_addressed_to_the_bot_ask_the_rest(
    app, fake: FakeOpenAI, plugin_engine, where: str
) -> None:
    chat = PLATFORMS["Telegram"]()
    fake.push(text("answered"))
    await say(chat, chat.event(where, f"/marsho@{chat.username} hi"))
    assert question_text(last_question(fake)).endswith("hi")
    assert "@" not in question_text(last_question(fake))
    assert chat.sent_texts() == ["answered"]


async def test_feishu_rich_text_mentioning_the_bot_first_triggers(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Feishu"]()
    fake.push(text("answered"))
    await say(chat, chat.group_event("marsho what is up", at_bot=True))
    assert question_text(last_question(fake)).endswith("what is up")
    assert chat.sent_texts() == ["answered"]


async def test_a_qq_group_at_message_is_answered_without_marsho_at(app, fake: FakeOpenAI, plugin_engine) -> None:
    """QQ delivers only @-messages to a bot in a group, with the mention taken out: "hi" is a
    question to Marsho."""
    chat = PLATFORMS["QQ"]()
    fake.push(text("answered"))
    await say(chat, chat.group_event("hi"))
    assert question_text(last_question(fake)).endswith("hi")
    assert chat.sent_texts() == ["answered"]


async def test_a_qq_guild_at_message_is_answered_with_marsho_at(app, fake: FakeOpenAI, plugin_engine) -> None:
    """A guild channel message that @s the bot (the mention taken out by the adapter) asks with
    MARSHO_AT."""
    chat = PLATFORMS["QQ"]()
    fake.push(text("answered"))
    with configured(marsho_at=True):
        await say(chat, chat.channel_event("what is up"))
    assert question_text(last_question(fake)).endswith("what is up")
    assert chat.sent_texts() == ["answered"]


async def test_the_console_is_a_private_chat_with_its_user(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Console"]()
    fake.push(text("hello console"))
    event = chat.private_event("marsho hi")
    await say(chat, event)
    assert last_question(fake) == "hi"  # no speaker label: a private chat
    assert await plugin_engine.history.export("Console:private:console-user")


# --- quotes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "where"), QUOTE_CELLS)
async def test_quoted_text_reaches_the_model(app, fake: FakeOpenAI, plugin_engine, name: str, where: str) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("It means pi"))
    await say(chat, chat.event(where, "marsho what does this mean?", quote="the quoted words 3141"))
    question = question_text(last_question(fake))
    assert "the quoted words 3141" in question, question
    assert question.rstrip().endswith("what does this mean?")
    assert chat.sent_texts()[-1].endswith("It means pi")


# --- pictures -----------------------------------------------------------------------------------------


@pytest.fixture
def vision(plugin_engine) -> Iterator[None]:
    with configured(marsho_vision_models=["fake-*"], marsho_image_allow_private=True):
        yield


def _picture(chat: Chat, files: Files, name: str) -> dict[str, str]:
    """A picture option of the platform's kind: a file id, or a URL on the loopback host."""
    if chat.adapter_name in ("Telegram", "Feishu", "OneBot V12"):
        return {"picture_id": f"pic_{name}"}
    return {"picture_url": files.add(f"/{name}.png")}


@pytest.mark.parametrize(("name", "where"), FILE_ID_PICTURES)
async def test_a_picture_given_by_file_id_is_fetched_through_the_adapter(
    app, fake: FakeOpenAI, files: Files, vision: None, name: str, where: str
) -> None:
    chat = PLATFORMS[name](files)
    fake.push(text("A pixel."))
    await say(chat, chat.event(where, "marsho what is this?", picture_id="pic_own"))
    assert pictures_in(last_question(fake)) == [PNG]
    assert question_text(last_question(fake)).endswith("what is this?")
    assert chat.sent_texts()[-1].endswith("A pixel.")


@pytest.mark.parametrize(("name", "where"), URL_PICTURES)
async def test_a_picture_given_by_url_is_downloaded(
    app, fake: FakeOpenAI, files: Files, vision: None, name: str, where: str
) -> None:
    chat = PLATFORMS[name](files)
    fake.push(text("A pixel."))
    await say(chat, chat.event(where, "marsho what is this?", picture_url=files.add("/own.png")))
    assert pictures_in(last_question(fake)) == [PNG]
    assert files.hits == ["/own.png"]


@pytest.mark.parametrize(("name", "where"), QUOTE_CELLS)
async def test_a_picture_in_the_quoted_message_reaches_a_vision_model(
    app, fake: FakeOpenAI, files: Files, vision: None, name: str, where: str
) -> None:
    chat = PLATFORMS[name](files)
    quoted = _picture(chat, files, "quoted")
    option = quoted.get("picture_id") or quoted["picture_url"]
    # a Kook picture message is the picture alone (type 2): no text beside it
    words = None if name == "Kaiheila" else "look 2024"
    fake.push(text("A pixel."))
    await say(chat, chat.event(where, "marsho what is in it?", quote=words, quote_picture=option))
    assert pictures_in(last_question(fake)) == [PNG]
    assert question_text(last_question(fake)).rstrip().endswith("what is in it?")
    if words:
        assert words in question_text(last_question(fake))


@pytest.mark.parametrize(("name", "where"), FILE_ID_PICTURES)
async def test_a_picture_over_the_byte_cap_is_left_out(
    app, fake: FakeOpenAI, files: Files, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name](files)
    fake.push(text("Only text."))
    with configured(marsho_vision_models=["fake-*"], marsho_image_max_bytes=10_000):
        await say(chat, chat.event(where, "marsho what is this?", picture_id="pic_big"))
    assert pictures_in(last_question(fake)) == []
    assert "Only text." in chat.sent_texts()[-1]


# --- pictures in answers --------------------------------------------------------------------------------


async def test_satori_answer_pictures_are_img_elements_with_a_type(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Satori"]()
    fake.push(tool_calls(("owner-kit__draw_pixel", {}, "c1")), text("Here is your pixel."))
    await say(chat, chat.group_event("marsho draw me a pixel"))
    sent = "".join(data["content"] for _, data in chat.sent_calls())
    assert "Here is your pixel." in sent
    assert "[image]" not in sent
    assert "<img" in sent and "image/png" in sent, sent


@pytest.mark.parametrize(("name", "where"), [c for c in CELLS if c.values[0] != "Console"])
async def test_answer_pictures_go_out_as_pictures(
    app, fake: FakeOpenAI, plugin_engine, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(tool_calls(("owner-kit__draw_pixel", {}, "c1")), text("Here is your pixel."))
    await say(chat, chat.event(where, "marsho draw me a pixel"))
    assert any("Here is your pixel." in t for t in chat.sent_texts())
    assert not any("[image]" in t for t in chat.sent_texts()), chat.sent_texts()
    assert any(carries_png(data) for _, data in chat.calls), [api for api, _ in chat.calls]


# --- when uninfo cannot tell, and what it tells wrongly -------------------------------------------


class _DiscordWithoutGuildApi(PLATFORMS["Discord"]):  # type: ignore[misc, valid-type]
    """Discord's API refusing the calls uninfo makes to read a guild channel (a 429 under load)."""

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api.startswith(("get_guild", "get_channel")):
            return RuntimeError(f"{api}: 429 Too Many Requests")
        return super().answer(api, data)


async def test_a_guild_message_uninfo_cannot_read_is_not_taken_for_the_senders_private_chat(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = _DiscordWithoutGuildApi()
    fake.push(text("kept"), text("no secret here"))
    await say(chat, chat.event("private", "marsho my DM secret is 4711"))
    await say(chat, chat.event("channel", "marsho what is my secret?"))
    assert len(fake.requests) == 2
    assert "4711" not in request_text(fake.requests[1])
    stored = await plugin_engine.history.export(f"Discord:channel:{chat.guild_id}/{chat.channel_id}")
    assert "what is my secret?" in json.dumps(stored)


async def test_a_chat_uninfo_cannot_read_is_not_answered_where_group_lists_are_set(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = _DiscordWithoutGuildApi()
    with configured(marsho_denied_groups=[chat.guild_id]):
        await say(chat, chat.event("channel", "marsho hi"))
    assert fake.requests == []
    assert chat.sent_texts() == []


class _GuildPlainSatori(PLATFORMS["Satori"]):  # type: ignore[misc, valid-type]
    features = ("guild.plain",)


async def test_a_satori_server_with_plain_guilds_keeps_a_private_chat_private(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    """uninfo takes a DM for a group where the server announces `guild.plain` (Chronocat,
    LLOneBot); with MARSHO_SESSION_SCOPE=user that merged a person's DM with their groups."""
    chat = _GuildPlainSatori()
    fake.push(text("kept"), text("no secret here"))
    with configured(marsho_session_scope="user"):
        await say(chat, chat.event("group", "marsho my group secret is 4711"))
        await say(chat, chat.event("private", "marsho what is my secret?"))
    assert "4711" not in request_text(fake.requests[1])
    stored = await plugin_engine.history.export(f"Satori/chronocat:private:{chat.user_id}")
    assert "what is my secret?" in json.dumps(stored)


def test_a_channel_moderator_role_is_not_an_admin() -> None:
    """uninfo names a Discord/Kook role that may manage channels, and (reading QQ's permissions
    the wrong way round) any custom QQ guild role, CHANNEL_ADMINISTRATOR."""
    from nonebot_plugin_uninfo import Member, Role, Scene, SceneType, Session, User

    from nonebot_plugin_marsho.chat.where import from_session

    def role_of(*roles: Role) -> str:
        user = User(id="1")
        session = Session(self_id="bot", adapter="QQ", scope="QQAPI", user=user,
                          scene=Scene(id="c", type=SceneType.CHANNEL_TEXT, parent=Scene(id="g", type=SceneType.GUILD)),
                          member=Member(user=user, roles=list(roles)))
        chat = PLATFORMS["QQ"]()
        return from_session(chat.bot, chat.channel_event("hi"), session).role

    assert role_of(Role("CHANNEL_ADMINISTRATOR", 9), Role("10001", 1)) == "member"
    assert role_of(Role("ADMINISTRATOR", 10)) == "admin"
    assert role_of(Role("OWNER", 640)) == "owner"


async def test_a_long_answer_goes_in_parts_where_there_are_no_forward_messages_and_is_cut_at_the_cap(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = PLATFORMS["Telegram"]()
    paragraphs = [f"Paragraph {i}: " + "word " * 30 for i in range(12)]
    fake.push(text("\n\n".join(paragraphs)))
    with configured(marsho_split_chars=200, marsho_max_forward_nodes=4):
        await say(chat, chat.event("group", "marsho tell me a long story"))
    sent = chat.sent_texts()
    assert len(sent) == 4, sent  # not 12 messages into a Telegram group
    assert sent[0].startswith("Paragraph 0")
    assert "only the first 4 fit" in sent[-1]


async def test_telegram_senders_are_known_by_username_only_while_the_group_tools_are_on(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    from nonebot_plugin_marsho.chat import telegram_names
    from nonebot_plugin_marsho.chat.group_actions import GroupActions

    telegram_names.forget()
    chat = PLATFORMS["Telegram"]()
    with configured(marsho_group_actions=True) as marsho:
        saved = marsho.group_actions  # (the running bot was built with them off)
        marsho.group_actions = GroupActions(plugin_engine.history)
        try:
            await say(chat, chat.group_event("hello all", user_id="5550077"))
        finally:
            marsho.group_actions = saved
    assert telegram_names.user_of(chat.group_id, "@u5550077") == "5550077"
    await say(chat, chat.group_event("hello again", user_id="5550078"))
    assert telegram_names.user_of(chat.group_id, "@u5550078") is None
    telegram_names.forget()
