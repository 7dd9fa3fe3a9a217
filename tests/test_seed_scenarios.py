"""Seed 000's three example prompts, against its example toolkit copied verbatim."""

from __future__ import annotations

import re

from nonebug import App

from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.onebot import group_message, onebot_bot, reply_call

WEATHER = "marshoai-example__get_weather"
TIME = "marshoai-example__get_current_time"
TIME_PATTERN = r"\d{4}\.\d{2}\.\d{2} \d{2}:\d{2}:\d{2}"


class MessageLike:
    """Equal to a message whose text form matches the pattern (the time is not known ahead)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __eq__(self, other: object) -> bool:
        return re.fullmatch(self.pattern, str(other)) is not None

    def __repr__(self) -> str:
        return f"MessageLike({self.pattern!r})"


def tool_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def test_whats_the_weather_like_in_shenzhen(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(tool_calls((WEATHER, {"location": "Shenzhen"})),
              text("Shenzhen is at 114514℃ right now. Stay cool!"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho What's the weather like in Shenzhen?")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Shenzhen is at 114514℃ right now. Stay cool!"),
                            result={"message_id": 1})
    assert WEATHER in [t["function"]["name"] for t in fake.requests[0]["tools"]]
    weather_schema = next(t for t in fake.requests[0]["tools"] if t["function"]["name"] == WEATHER)
    assert weather_schema["function"]["parameters"]["required"] == ["location"]
    assert [m["content"] for m in tool_messages(fake.requests[1])] == [
        "The temperature of Shenzhen is 114514℃。"
    ]


async def test_weather_in_three_cities_uses_all_three_results(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    cities = ["Shimokitazawa", "Hangzhou", "Suzhou"]
    fake.push(tool_calls(*((WEATHER, {"location": city}) for city in cities)),
              text("All three are at 114514℃."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message(
            "marsho Please tell me the weather in Shimokitazawa, Hangzhou, and Suzhou separately."
        )
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "All three are at 114514℃."), result={"message_id": 1})
    assistant = fake.requests[1]["messages"][-4]
    assert [c["id"] for c in assistant["tool_calls"]] == [
        m["tool_call_id"] for m in tool_messages(fake.requests[1])
    ]
    assert [m["content"] for m in tool_messages(fake.requests[1])] == [
        f"The temperature of {city} is 114514℃。" for city in cities
    ]


async def test_what_time_is_it_now(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.responder = lambda body: text(
        "It is " + tool_messages(body)[0]["content"].removeprefix("Now is ").rstrip("。")
    )
    fake.push(tool_calls((TIME, {})))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho What time is it now?")
        ctx.receive_event(bot, event)
        api, data = reply_call(event, "")
        data["message"] = MessageLike(rf"\[CQ:reply,id={event.message_id}\]It is {TIME_PATTERN}")
        ctx.should_call_api(api, data, result={"message_id": 1})
    result = tool_messages(fake.requests[1])[0]["content"]
    assert re.fullmatch(rf"Now is {TIME_PATTERN}。", result)
