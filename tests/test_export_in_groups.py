"""`marsho.export` in a group posts no content (issue 25): the group reads only that the
conversation was saved; where the file is goes to the superuser privately, or to the log when the
platform will not start a private chat. In a private chat it says where and shows it, as before."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from nonebot.adapters.onebot.v11 import Message
from nonebot.adapters.onebot.v11.exception import ActionFailed
from nonebug import App

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.redaction import logger
from tests.conftest import SUPERUSER_ID
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.onebot import group_message, onebot_bot, private_message, reply_call

SUPERUSER = int(SUPERUSER_ID)
GROUP_KEY = "OneBot V11:group:20001"
WEATHER = "The temperature of Hangzhou is 114514℃。"
"""What the example toolkit's weather tool answers: a tool result, which a group must not read."""


class Said:
    """Stands for a message in `should_call_api`: matches whatever is sent, keeps its text."""

    text = ""

    def __eq__(self, other: object) -> bool:
        self.text = Message(other).extract_plain_text()  # type: ignore[arg-type]
        return True


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


async def asked_the_weather(app: App, fake: FakeOpenAI) -> None:
    fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}, "call_9")),
              text("Hot in Hangzhou"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho weather?", user_id=SUPERUSER)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Hot in Hangzhou"), result={"message_id": 1})


def exported(told: str) -> str:
    """The file a private message names."""
    found = re.fullmatch(rf"4 messages of {re.escape(GROUP_KEY)} exported to (.+?\.json)", told)
    assert found, told
    return Path(found.group(1)).read_text(encoding="utf-8")


async def test_export_in_a_group_says_only_that_it_was_saved_and_tells_the_path_privately(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    await asked_the_weather(app, fake)
    event = group_message("marsho.export", user_id=SUPERUSER)
    privately, in_group = Said(), Said()
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api("send_msg", {"message_type": "private", "user_id": SUPERUSER, "message": privately},
                            result={"message_id": 2})
        api, data = reply_call(event, "")
        ctx.should_call_api(api, {**data, "message": in_group}, result={"message_id": 3})
    assert in_group.text == "4 messages exported; where the file is was sent to you privately."
    data = json.loads(exported(privately.text))
    assert data["session"] == GROUP_KEY
    assert [item["message"]["role"] for item in data["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert data["messages"][2]["message"]["content"] == WEATHER  # the file holds it all


async def test_export_in_a_group_puts_the_path_in_the_log_when_no_private_message_goes(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, logged: list[str]
) -> None:
    await asked_the_weather(app, fake)
    event = group_message("marsho.export", user_id=SUPERUSER)
    in_group = Said()
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api("send_msg", {"message_type": "private", "user_id": SUPERUSER, "message": Said()},
                            exception=ActionFailed(retcode=100, msg="not a friend"))
        api, data = reply_call(event, "")
        ctx.should_call_api(api, {**data, "message": in_group}, result={"message_id": 3})
    assert in_group.text == "4 messages exported; where the file is is in the bot's log."
    [line] = [line for line in logged if "exported to" in line]
    found = re.search(r"exported to (.+?\.json)", line)
    assert found and WEATHER in Path(found.group(1)).read_text(encoding="utf-8")


async def test_export_in_a_private_chat_shows_where_and_what_as_before(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    fake.push(text("hello"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = private_message("marsho hi", user_id=SUPERUSER)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "hello"), result={"message_id": 1})
    event = private_message("marsho.export", user_id=SUPERUSER)
    said = Said()
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        api, data = reply_call(event, "")
        ctx.should_call_api(api, {**data, "message": said}, result={"message_id": 2})
    found = re.match(r"2 messages exported to (.+?\.json)\n", said.text)
    assert found, said.text
    assert json.loads(Path(found.group(1)).read_text(encoding="utf-8"))["session"] in said.text
