"""A bot whose `.env` has a bad value answers in the language MARSHO_LANG asks for when that
setting itself is fine (the rest of the config is then the defaults, zh-CN among them), and
its log says what the chats really get."""

from __future__ import annotations

import dataclasses

import pytest
from nonebot import get_driver
from nonebug import App

from nonebot_plugin_marsho.chat.app import Marsho, running
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.redaction import logger
from tests.fake_openai import FakeOpenAI
from tests.onebot import group_message, onebot_bot, reply_call

PROBLEM = "invalid settings in .env: MARSHO_TIMEOUT='soon': Input should be a valid number"


@pytest.fixture(autouse=True)
def _english(monkeypatch: pytest.MonkeyPatch) -> None:
    """What .env says, as conftest sets it (MARSHO_LANG=en), whatever a test before changed."""
    settings = get_driver().config.__pydantic_extra__
    assert settings is not None
    monkeypatch.setitem(settings, "marsho_lang", "en")


def broken(marsho: Marsho) -> Marsho:
    """The bot as plugin.py builds it when a setting is bad: the defaults, and the problem."""
    return dataclasses.replace(marsho, config=Config(), config_error=PROBLEM)


async def test_a_member_is_told_in_the_language_asked_for(app: App, fake: FakeOpenAI, marsho) -> None:
    assert get_driver().config.marsho_lang == "en"  # conftest's, as in .env
    with running.using(broken(marsho)):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho hi")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(
                event, "Sorry, I could not answer: I am not configured correctly. The bot's owner has "
                "the details in the log."), result={"message_id": 1})
    assert fake.requests == []


@pytest.mark.parametrize(("written", "language"), [("en", "en"), ("zh_CN", "zh-CN"), ("en-US", "en"),
                                                   ("fr", "zh-CN"), (None, "zh-CN")])
def test_the_language_is_read_on_its_own(
    monkeypatch: pytest.MonkeyPatch, marsho, written: str | None, language: str
) -> None:
    settings = get_driver().config.__pydantic_extra__  # what .env says (setitem restores it)
    assert settings is not None
    if written is None:
        monkeypatch.delitem(settings, "marsho_lang", raising=False)
    else:
        monkeypatch.setitem(settings, "marsho_lang", written)
    assert broken(marsho).texts.language == language


async def test_the_log_says_what_the_chats_get(marsho) -> None:
    errors: list[str] = []
    sink = logger.add(lambda message: errors.append(str(message).rstrip("\n")), level="ERROR",
                      format="{message}")
    try:
        await broken(marsho).start()
    finally:
        logger.remove(sink)
    assert errors == [
        f"marsho: {PROBLEM}. Fix .env and restart; until then marsho answers every question and command "
        "(marsho.help aside) with this message for superusers, and for everyone else with: Sorry, I could "
        "not answer: I am not configured correctly. The bot's owner has the details in the log."]
