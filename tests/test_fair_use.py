"""Fair use: rate limits with a clear 'try again in N s', allow- and deny-lists, superusers exempt."""

from __future__ import annotations

import pytest
from nonebug import App

from nonebot_plugin_marsho.chat import matchers
from nonebot_plugin_marsho.chat.fairuse import FairUse, RateLimiter, admitted, seconds_text
from nonebot_plugin_marsho.i18n import Texts
from tests.conftest import SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, text
from tests.onebot import group_message, onebot_bot, reply_call


def test_the_window_slides() -> None:
    now = [0.0]
    limiter = RateLimiter(2, 60, clock=lambda: now[0])
    assert limiter.wait("u") == 0
    limiter.take("u")
    limiter.take("u")
    assert limiter.wait("u") == 60
    now[0] = 30
    assert limiter.wait("u") == 30 and limiter.wait("other") == 0
    now[0] = 60.5
    assert limiter.wait("u") == 0
    assert RateLimiter(0, 60).wait("u") == 0  # no limit


def test_lists_deny_first_and_an_empty_allow_list_allows_all() -> None:
    assert admitted("1", [], [])
    assert not admitted("1", [], ["1"])
    assert not admitted("1", ["1"], ["1"])
    assert admitted("1", ["1", "2"], []) and not admitted("3", ["1", "2"], [])
    assert admitted(None, ["1"], [])  # a private chat has no group to check
    assert seconds_text(Texts("en"), 0.2) == "1 s" and seconds_text(Texts("en"), 12.1) == "13 s"


def test_one_check_counts_a_question_and_exempts_superusers() -> None:
    fair_use = FairUse(user_limit=1, group_limit=5, window=60)
    assert fair_use.charge("u", "g", superuser=False) == 0
    assert 59 < fair_use.charge("u", "g", superuser=False) <= 60
    assert fair_use.charge("u", "g", superuser=True) == 0  # a superuser is never held back
    assert fair_use.charge("v", None, superuser=False) == 0  # a private chat counts the user only


@pytest.fixture
def limits():
    with configured(marsho_user_rate_limit=2, marsho_group_rate_limit=3, marsho_rate_window=60) as marsho:
        # a clock that stands still: "try again in 60 s" whatever a loaded machine takes
        marsho.fair_use = FairUse(user_limit=2, group_limit=3, window=60,
                                  user_queue=marsho.config.marsho_user_queue, clock=lambda: 1000.0)
        yield marsho


async def test_a_user_asking_too_fast_is_told_when_to_try_again(
    app: App, fake: FakeOpenAI, plugin_engine, limits: None
) -> None:
    fake.push(text("one"), text("two"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for answer in ("one", "two"):
            event = group_message("marsho hi")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
        event = group_message("marsho hi again")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "You are asking a bit fast: try again in 60 s."),
                            result={"message_id": 2})
    assert len(fake.requests) == 2  # the third question cost nothing


async def test_a_group_limit_counts_everyone_and_superusers_are_exempt(
    app: App, fake: FakeOpenAI, plugin_engine, limits: None
) -> None:
    fake.push(*(text(f"a{i}") for i in range(5)))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for i, user in enumerate((1, 2, 3)):
            event = group_message("marsho hi", user_id=user, group_id=555)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, f"a{i}"), result={"message_id": 1})
        event = group_message("marsho hi", user_id=4, group_id=555)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "You are asking a bit fast: try again in 60 s."),
                            result={"message_id": 2})
        event = group_message("marsho hi", user_id=int(SUPERUSER_ID), group_id=555)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "a3"), result={"message_id": 3})


@pytest.mark.parametrize(
    ("setting", "value", "user", "group", "answered"),
    [
        ("marsho_denied_groups", ["777"], 1, 777, False),
        ("marsho_allowed_groups", ["888"], 1, 777, False),
        ("marsho_allowed_groups", ["777"], 1, 777, True),
        ("marsho_denied_users", ["5"], 5, 777, False),
        ("marsho_allowed_users", ["6"], 5, 777, False),
        ("marsho_allowed_users", ["6"], int(SUPERUSER_ID), 777, True),
    ],
)
async def test_allow_and_deny_lists(
    app: App, fake: FakeOpenAI, plugin_engine, setting: str, value: list[str], user: int, group: int,
    answered: bool,
) -> None:
    fake.push(text("hello"))
    with configured(**{setting: value}):
        await _ask_in_group(app, user, group, answered)
    assert len(fake.requests) == (1 if answered else 0)


async def _ask_in_group(app: App, user: int, group: int, answered: bool) -> None:
    async with app.test_matcher(matchers.marsho) as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho hi", user_id=user, group_id=group)
        ctx.receive_event(bot, event)
        if answered:
            ctx.should_call_api(*reply_call(event, "hello"), result={"message_id": 1})
        else:
            ctx.should_not_pass_rule()
