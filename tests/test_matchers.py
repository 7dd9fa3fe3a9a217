"""What a group member sees: triggers, commands and replies, through nonebug."""

from __future__ import annotations

import json

import pytest
from nonebug import App

from nonebot_plugin_marsho.agent.llm import split_reasoning
from nonebot_plugin_marsho.chat import matchers
from nonebot_plugin_marsho.chat.matchers import Request, parse_request
from nonebot_plugin_marsho.config import plugin_config
from tests.fake_openai import FakeOpenAI, error, text, tool_calls
from tests.onebot import group_message, onebot_bot, private_message, reply_call

NAMES = ["marsho", "小棉"]


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
        ("marsho.unknown thing", None),
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
    assert fake.requests[-1]["messages"][-1] == {"role": "user", "content": "user10001: hi"}


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
        api, data = reply_call(event, matchers.usage_text(plugin_config.trigger_names, False))
        ctx.should_call_api(api, data, result={"message_id": 1})
    assert fake.requests == []


async def test_mentions_are_answered_only_when_marsho_at_is_on(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with app.test_matcher(matchers.marsho) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, group_message("what is up", to_me=True))
        ctx.should_not_pass_rule()
    monkeypatch.setattr(plugin_config, "marsho_at", True)
    fake.push(text("Not much"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("what is up", to_me=True)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Not much"), result={"message_id": 1})
    assert fake.requests[-1]["messages"][-1]["content"] == "user10001: what is up"


async def test_reset_forgets_the_conversation(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("first"), text("fresh"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for message, answer in [("marsho one", "first"),
                                ("marsho.reset", "Done: I forgot this conversation (1 turns)."),
                                ("marsho two", "fresh")]:
            event = group_message(message, role="admin")  # a shared group: admins may reset
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert fake.requests[-1]["messages"][-1:] == [{"role": "user", "content": "user10001: two"}]
    assert all(m["role"] != "assistant" for m in fake.requests[-1]["messages"])


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
        "user10001: in two"]


async def test_tools_lists_loaded_tools_and_failed_toolkits(app: App, plugin_engine) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho.tools")
        ctx.receive_event(bot, event)
        listing = matchers.tools_text(plugin_engine.toolset)
        ctx.should_call_api(*reply_call(event, listing), result={"message_id": 1})
    assert "marshoai-example__get_weather" in listing
    assert "clock__now" in listing
    assert "broken-kit" in listing and "invalid JSON at line 3, column 3" in listing


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
    fake.push(text("kept"), error(401, "bad key"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho first")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "kept"), result={"message_id": 1})
        event = group_message("marsho second")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(
            event, "Sorry, I could not get an answer: The endpoint rejected the API key "
            "(401: bad key). Check MARSHO_API_KEY."), result={"message_id": 2})
    turns, _, _ = await plugin_engine.history.stats(matchers.session_key(
        "OneBot V11", group_id="20001", user_id="10001"))
    assert turns == 1


async def test_a_bad_setting_is_reported_to_the_chat(
    app: App, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = "invalid settings in .env: MARSHO_TIMEOUT='soon': Input should be a valid number"
    monkeypatch.setattr(matchers, "config_error", problem)
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho hi")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(
            event, f"marsho is not configured correctly: {problem}. Fix .env and restart the bot."),
            result={"message_id": 1})
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
