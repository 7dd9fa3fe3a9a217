"""What a group member sees: triggers, commands and replies, through nonebug."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import GroupMessageEvent, MessageSegment
from nonebug import App

from nonebot_plugin_marsho.agent.llm import split_reasoning
from nonebot_plugin_marsho.chat import matchers
from nonebot_plugin_marsho.chat.app import running
from nonebot_plugin_marsho.chat.matchers import Request, parse_request
from tests.conftest import SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, error, text, tool_calls
from tests.onebot import group_message, onebot_bot, private_message, reply_call
from tests.speakers import label

NAMES = ["marsho", "小棉"]


class AnyTextReply:
    """Equal to any text reply to `event` (nonebug compares expected == actual), whose text it
    keeps: for a reply too long to spell out whole."""

    def __init__(self, event: GroupMessageEvent) -> None:
        self.quote = MessageSegment.reply(event.message_id)
        self.text = ""

    def __eq__(self, message: Any) -> bool:
        segments = list(message)
        if len(segments) != 2 or segments[0] != self.quote or segments[1].type != "text":
            return False
        self.text = segments[1].data["text"]
        return True


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("marsho hi", Request("chat", "hi")),
        ("/marsho hi", Request("chat", "hi")),
        ("Marsho hi", Request("chat", "hi")),
        ("MARSHO, how are you?", Request("chat", "how are you?")),
        ("  marsho   spaced  ", Request("chat", "spaced")),
        ("小棉 你好", Request("chat", "你好")),
        ("小棉你好", Request("chat", "你好")),
        ("marsho你好", Request("chat", "你好")),
        ("marsho", Request("chat", "")),
        ("marsho.reset", Request("reset", "")),
        ("/Marsho.Tools", Request("tools", "")),
        ("小棉.calls", Request("calls", "")),
        ("marsho.help", Request("help", "")),
        ("marsho.unknown thing", Request("unknown", "unknown")),
        # typed with a Chinese or Japanese input method: full-width dot and letters, an
        # ideographic space, the ideographic full stop before a command's name
        ("marsho.memory\u3000forget 3", Request("memory", "forget 3")),
        ("ｍａｒｓｈｏ．ｍｅｍｏｒｙ\u3000forget ３", Request("memory", "forget 3")),
        ("Ｍａｒｓｈｏ 你好", Request("chat", "你好")),
        ("marsho．ｍｅｍｏｒｙ\u3000forget ３", Request("memory", "forget 3")),
        ("小棉。reset", Request("reset", "")),
        ("小棉．ｆｏｏ", Request("unknown", "foo")),
        ("小棉。hello there", Request("chat", "hello there")),
        ("小棉。Help me translate this", Request("chat", "Help me translate this")),  # 。 ends a sentence
        ("小棉。forget it", Request("chat", "forget it")),
        ("ｍａｒｓｈｏ．ｎｉｃｋｎａｍｅ\u3000ｒｅｓｅｔ", Request("nickname", "reset")),  # arguments too
        ("ｍａｒｓｈｏｍａｌｌｏｗ", None),  # glued to a word, as marshomallow
        ("marsho.\u3000你好", Request("chat", "你好")),
        ("小棉。你好", Request("chat", "你好")),
        ("marsho．", Request("chat", "")),
        ("marshomallow is tasty", None),
        ("hi marsho", None),
        ("", None),
    ],
)
def test_trigger_words_are_recognised(message: str, expected: Request | None) -> None:
    assert parse_request(message, NAMES, {"/"}) == expected


def test_any_command_start_is_accepted() -> None:
    assert parse_request("#marsho hi", NAMES, {"#", ""}) == Request("chat", "hi")
    assert parse_request("marsho hi", NAMES, {"!"}) == Request("chat", "hi")


def test_think_blocks_are_taken_out_of_answers() -> None:
    assert split_reasoning("<think>plan\nsteps</think>\nAnswer") == ("plan\nsteps", "Answer")
    assert split_reasoning("reasoning without opening</think>Answer") == (
        "reasoning without opening", "Answer")
    assert split_reasoning("Answer<think>unfinished") == ("unfinished", "Answer")
    assert split_reasoning("plain") == ("", "plain")


@pytest.mark.parametrize("message", ["marsho hi", "/marsho hi", "Marsho hi", "小棉 hi"])
async def test_a_question_is_answered_quoting_the_message(
    app: App, fake: FakeOpenAI, plugin_engine, message: str
) -> None:
    fake.push(text("Hello!"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message(message)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Hello!"), result={"message_id": 1})
    # a group shares one conversation: the speaker is named
    assert fake.requests[-1]["messages"][-1] == {"role": "user", "content": f"{label('user10001', 10001)}: hi"}


async def test_private_chats_are_answered(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("Hi in private"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = private_message("marsho hello")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Hi in private"), result={"message_id": 1})


async def test_other_messages_are_left_alone(app: App, fake: FakeOpenAI) -> None:
    async with app.test_matcher(matchers.marsho) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, group_message("marshomallow is tasty"))
        ctx.should_not_pass_rule()
    assert fake.requests == []


async def test_the_name_alone_answers_with_usage(app: App, fake: FakeOpenAI) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, (
            "Ask me anything: marsho <question>\n"
            "Trigger words: marsho, 小棉 (any case, with or without a command prefix)\n"
            "Reply to a message while asking me, and I read the quoted message too.\n"
            "marsho.reset  forget this conversation\n"
            "marsho.tools  list the tools I can use\n"
            "marsho.calls  show the tool calls of my last answer\n"
            "marsho.history  how much of this conversation I keep\n"
            "marsho.nickname [name]  tell me what to call you (reset: forget it)\n"
            "marsho.memory [forget <number>|all]  what I remember about you, and forgetting it (group: this "
            "group's; group admins may delete them)\n"
            "marsho.reminders [group|cancel <number>|resume <number>]  your reminders in this chat (in "
            "private: your paused ones everywhere too), cancelling one, resuming a paused one (group "
            "admins: the group's)\n"
            "marsho.context [on|off]  whether this group's recent chat goes to the model (group admins: on or off)\n"
            "marsho.forget  forget this group's recent chat (group admins)\n"
            "marsho.persona [text]  my persona in this group (group admins: set it; reset)\n"
            "marsho.active [0..1|off|keywords ...]  whether I join this group's chat unasked (group admins: "
            "set it)\n"
            "marsho.help   show this help\n"
            "marsho.usage [all]  how much you used: tokens, cache, cost, a chart (admins: the group; superusers: all)\n"
            "marsho.model [name]  show or switch the model (superusers)\n"
            "marsho.export  save this conversation as JSON (superusers)\n"
            "marsho.status  the model endpoints and keys: state, errors, latency (superusers)\n"
            "marsho.quota [user|group <id> <tokens|off|default>]  daily token quotas (superusers)\n"
            "marsho.actions [on|off]  the mutes, kicks and recalls I was asked for in this group; on or off "
            "turns my group tools on or off here (group admins)\n"
            "marsho.resume  answer again in this chat after a pause for too many answers, and forget who was "
            "taken for a bot here (superusers)\n"
            "marsho.kb [add|remove <number>]  this chat's documents, which I read before answering: add one by "
            "quoting a file (group admins), or remove one"
        )), result={"message_id": 1})
    assert fake.requests == []


async def test_mentions_are_answered_only_when_marsho_at_is_on(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    async with app.test_matcher(matchers.marsho) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, group_message("what is up", to_me=True))
        ctx.should_not_pass_rule()
    fake.push(text("Not much"))
    with configured(marsho_at=True):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("what is up", to_me=True)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, "Not much"), result={"message_id": 1})
    assert fake.requests[-1]["messages"][-1]["content"] == f"{label('user10001', 10001)}: what is up"


async def test_reset_forgets_the_conversation(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("first"), text("fresh"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for message, answer in [("marsho one", "first"),
                                ("marsho.reset", "Done: I forgot this conversation (1 turn)."),
                                ("marsho two", "fresh")]:
            event = group_message(message, role="admin")  # a shared group: admins may reset
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert fake.requests[-1]["messages"][-1:] == [{"role": "user", "content": f"{label('user10001', 10001)}: two"}]
    assert all(m["role"] != "assistant" for m in fake.requests[-1]["messages"])


async def test_a_command_typed_full_width_by_an_input_method_is_run(
        app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("first"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for message, answer in [("小棉 one", "first"),
                                ("ｍａｒｓｈｏ。ｒｅｓｅｔ", "Done: I forgot this conversation (1 turn).")]:
            event = group_message(message, role="admin")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert len(fake.requests) == 1  # the command asked no model


async def test_a_member_cannot_reset_a_shared_group_conversation(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("first"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho one")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "first"), result={"message_id": 1})
        event = group_message("marsho.reset")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(
            event, "This conversation is shared by the whole group: only group admins and "
            "superusers can reset it."), result={"message_id": 2})
    assert (await plugin_engine.history.stats("OneBot V11:group:20001"))[0] == 1


async def test_sessions_are_per_group(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("a"), text("b"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for group, message, answer in [(1, "marsho in one", "a"), (2, "marsho in two", "b")]:
            event = group_message(message, group_id=group)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert [m["content"] for m in fake.requests[-1]["messages"] if m["role"] != "system"] == [
        f"{label('user10001', 10001)}: in two"]


async def test_tools_lists_loaded_tools_and_failed_toolkits(app: App, plugin_engine) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho.tools", user_id=int(SUPERUSER_ID))
        ctx.receive_event(bot, event)
        api, data = reply_call(event, "")
        data["message"] = reply = AnyTextReply(event)
        ctx.should_call_api(api, data, result={"message_id": 1})
    listing = reply.text
    # the built-in toolkits first (their summaries are theirs to change), then the test toolset's
    header = re.match(r"Loaded toolkits \((\d+), (\d+) tools\):\n", listing)
    assert header is not None, listing
    assert "\n• clock (built-in)\n  - clock__now: Get the current date" in listing
    assert (
        "\n• marshoai-example (MARSHO_TOOLKIT_DIRS)\n"
        "  - marshoai-example__get_weather: Get the weather of a specified locatin.\n"
        "  - marshoai-example__get_current_time: Get time\n"
        "• owner-kit (MARSHO_TOOLKIT_DIRS)\n"
        "  - owner-kit__lookup: Look something up in a paid service.\n"
        "  - owner-kit__purge_cache [superusers only]: Empty the bot's cache.\n"
        "  - owner-kit__mute_everyone [admins only]: Mute the whole group.\n"
        "  - owner-kit__draw_pixel: Draw a picture of one pixel.\n"
        "Off until enabled (MARSHO_ENABLED_TOOLKITS): "
    ) in listing
    assert listing.endswith(
        "\nFailed to load (1):\n"
        "✗ broken-kit\n"
        "  - broken-kit/tools.json: invalid JSON at line 3, column 3: Expecting ',' delimiter"
    )
    # the header counts what is listed
    loaded = listing.split("\nOff until enabled")[0]
    assert (int(header[1]), int(header[2])) == (loaded.count("\n• "), loaded.count("\n  - "))


async def test_a_member_sees_which_toolkit_failed_but_not_why(app: App, plugin_engine) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho.tools")
        ctx.receive_event(bot, event)
        api, data = reply_call(event, "")
        data["message"] = reply = AnyTextReply(event)
        ctx.should_call_api(api, data, result={"message_id": 1})
    assert reply.text.endswith("\nFailed to load (1):\n✗ broken-kit\n"
                               "(The bot's owner sees why, with marsho.tools, and in the log.)"), reply.text
    assert "tools.json" not in reply.text


async def test_calls_shows_the_last_turns_tool_calls_with_results(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}, "call_7")),
              text("Hot in Hangzhou"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho weather in Hangzhou?")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Hot in Hangzhou"), result={"message_id": 1})
        event = group_message("marsho.calls")
        ctx.receive_event(bot, event)
        expected = [{
            "id": "call_7", "type": "function",
            "function": {"name": "marshoai-example__get_weather",
                         "arguments": json.dumps({"location": "Hangzhou"})},
            "result": "The temperature of Hangzhou is 114514℃。",
        }]
        ctx.should_call_api(*reply_call(event, json.dumps(expected, ensure_ascii=False, indent=1)),
                            result={"message_id": 2})


async def test_calls_without_tool_calls_says_so(app: App, plugin_engine) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho.calls")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "No tool calls in this conversation's last answer."),
                            result={"message_id": 1})


async def test_an_endpoint_failure_is_explained_and_history_is_kept(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("kept"), error(401, "bad key"), error(401, "bad key"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho first")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "kept"), result={"message_id": 1})
        # a member: what happened, in one sentence; the owner: the endpoint's words and the fix
        event = group_message("marsho second")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(
            event, "Sorry, I could not answer: the model's service refused the bot's key. "
            "The bot's owner has the details in the log."), result={"message_id": 2})
        event = group_message("marsho second", user_id=int(SUPERUSER_ID))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(
            event, "Sorry, I could not get an answer: The endpoint rejected the API key "
            "(401: bad key). Check MARSHO_API_KEY / MARSHO_API_KEYS."), result={"message_id": 3})
    turns, _, _ = await plugin_engine.history.stats(matchers.session_key(
        "OneBot V11", group_id="20001", user_id="10001"))
    assert turns == 1


async def test_a_bad_setting_is_reported_to_the_chat(app: App, fake: FakeOpenAI, marsho) -> None:
    problem = "invalid settings in .env: MARSHO_TIMEOUT='soon': Input should be a valid number"
    with running.using(dataclasses.replace(marsho, config_error=problem)):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho hi")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(
                event, "Sorry, I could not answer: I am not configured correctly. The bot's owner has "
                "the details in the log."), result={"message_id": 1})
            event = group_message("marsho hi", user_id=int(SUPERUSER_ID))
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(
                event, f"marsho is not configured correctly: {problem}. Fix .env and restart the bot."),
                result={"message_id": 2})
    assert fake.requests == []


async def test_pictures_a_tool_makes_are_sent_after_the_answer(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    from nonebot.adapters.onebot.v11 import MessageSegment

    pixel = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
        "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
    fake.push(tool_calls(("owner-kit__draw_pixel", {}, "c1")), text("Here is your pixel."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho draw me a pixel")
        ctx.receive_event(bot, event)
        api, data = reply_call(event, "Here is your pixel.")
        data["message"] = data["message"] + MessageSegment.image(pixel)
        ctx.should_call_api(api, data, result={"message_id": 1})
    # the model read the text, never the picture's bytes
    assert fake.requests[-1]["messages"][-1]["content"] == "drew one transparent pixel"
