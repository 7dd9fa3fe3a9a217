"""Who may use which tool, checked in code; preset secrets never leave the bot."""

from __future__ import annotations

import json

import pytest
from nonebug import App

from tests.conftest import SECRET, SUPERUSER_ID
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.onebot import group_message, onebot_bot, private_message, reply_call

PURGE = "owner-kit__purge_cache"
MUTE = "owner-kit__mute_everyone"
LOOKUP = "owner-kit__lookup"


def offered(body: dict) -> set[str]:
    return {tool["function"]["name"] for tool in body.get("tools", [])}


async def ask(app: App, fake: FakeOpenAI, event, answer: str = "ok") -> None:
    fake.push(text(answer))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})


@pytest.mark.parametrize(
    ("role", "user_id", "expected"),
    [
        ("member", 10001, {LOOKUP}),
        ("admin", 10001, {LOOKUP, MUTE}),
        ("owner", 10001, {LOOKUP, MUTE}),
        ("member", int(SUPERUSER_ID), {LOOKUP, MUTE, PURGE}),
    ],
)
async def test_each_role_is_offered_only_the_tools_it_may_use(
    app: App, fake: FakeOpenAI, plugin_engine, role: str, user_id: int, expected: set[str]
) -> None:
    await ask(app, fake, group_message("marsho hi", role=role, user_id=user_id))
    assert offered(fake.requests[-1]) & {LOOKUP, MUTE, PURGE} == expected


async def test_a_members_request_carries_no_superuser_tool(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    await ask(app, fake, group_message("marsho purge the cache please"))
    assert PURGE not in json.dumps(fake.requests[-1]["tools"])


async def test_a_call_to_a_tool_the_asker_may_not_use_is_denied(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    # the model names the tool anyway (it saw it earlier, or guessed): the code still says no
    fake.push(tool_calls((PURGE, {}, "c1")), text("I am not allowed to do that."))
    event = group_message("marsho purge the cache")
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "I am not allowed to do that."),
                            result={"message_id": 1})
    result = fake.requests[-1]["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "c1"
    assert "may only be used by the bot's superusers" in result["content"]
    assert "cache purged" not in result["content"]


async def test_a_superuser_gets_the_tool_with_their_context(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(tool_calls((PURGE, {}, "c1")), text("Done."))
    event = private_message("marsho purge the cache", user_id=int(SUPERUSER_ID))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Done."), result={"message_id": 1})
    result = fake.requests[-1]["messages"][-1]
    assert result["content"] == f"cache purged by {SUPERUSER_ID} (superuser)"


async def test_a_preset_secret_never_reaches_the_endpoint(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(tool_calls((LOOKUP, {"query": "cats", "api_key": "model-made-up"}, "c1")),
              text("Found cats."))
    event = group_message("marsho look up cats")
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Found cats."), result={"message_id": 1})
    lookup = next(t for t in fake.requests[0]["tools"] if t["function"]["name"] == LOOKUP)
    assert "api_key" not in json.dumps(lookup)
    # the tool echoed the key it was given (the preset, not the model's guess): redacted
    assert fake.requests[-1]["messages"][-1]["content"] == "result for cats (key [redacted])"
    for body in fake.requests:
        assert SECRET not in json.dumps(body)


async def test_a_preset_secret_is_not_shown_by_marsho_calls(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(tool_calls((LOOKUP, {"query": "dogs"}, "c1")))
    await ask(app, fake, group_message("marsho look up dogs"), "Found dogs.")
    assert fake.pending == 0
    calls = await plugin_engine.last_calls("OneBot V11:group:20001")
    assert calls[0]["result"] == "result for dogs (key [redacted])"
    assert SECRET not in json.dumps(calls)


async def test_tools_listing_marks_restricted_tools(app: App, plugin_engine) -> None:
    from nonebot_plugin_marsho.chat.render import tools_text
    from nonebot_plugin_marsho.i18n import Texts

    listing = tools_text(Texts("en"), plugin_engine.toolset)
    assert f"{PURGE} [superusers only]" in listing
    assert f"{MUTE} [admins only]" in listing
    assert f"{LOOKUP}:" in listing
