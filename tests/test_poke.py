"""Poke (OneBot v11): poking the bot gets one short in-character line, at most once per cooldown
per person and chat; the model's line when it answers, the fixed line otherwise."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from nonebot.adapters.onebot.v11 import Message, MessageSegment, PokeNotifyEvent
from nonebot.log import logger
from nonebug import App

from nonebot_plugin_marsho.chat import poke
from nonebot_plugin_marsho.chat.matchers import runtime
from nonebot_plugin_marsho.config import plugin_config
from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.i18n import t
from nonebot_plugin_marsho.store.sql import messages_table
from tests.conftest import SUPERUSER_ID
from tests.fake_openai import FakeOpenAI, error, text
from tests.onebot import SELF_ID, onebot_bot

POKER = 10001
GROUP = 20001
FIXED = "Meow? You poked me! Ask me something with marsho <question>."


def poke_event(
    *, user_id: int = POKER, target_id: int = int(SELF_ID), group_id: int | None = GROUP
) -> PokeNotifyEvent:
    """A poke notice as the OneBot adapter would hand it over (no group_id: a private poke)."""
    return PokeNotifyEvent(
        time=int(time.time()), self_id=int(SELF_ID), post_type="notice", notice_type="notify",
        sub_type="poke", user_id=user_id, target_id=target_id, group_id=group_id,
    )


def group_answer(line: str, *, user_id: int = POKER, group_id: int = GROUP) -> tuple[str, dict]:
    """The `send_msg` call answering a group poke: an @ of the poker, then the line."""
    message = MessageSegment.at(user_id) + MessageSegment.text(" " + line)
    return "send_msg", {
        "message_type": "group", "user_id": user_id, "group_id": group_id, "message": message,
    }


def private_answer(line: str, *, user_id: int = POKER) -> tuple[str, dict]:
    """The `send_msg` call answering a private poke: the line alone (the adapter passes the
    notice's empty group_id along)."""
    return "send_msg", {
        "message_type": "private", "user_id": user_id, "group_id": None, "message": Message(line),
    }


@pytest.fixture(autouse=True)
def fresh_cooldown() -> Iterator[None]:
    """No cooldown left over from another test, and the configured length back afterwards."""
    seconds = poke.cooldown.seconds
    poke.cooldown.clear()
    yield
    poke.cooldown.clear()
    poke.cooldown.seconds = seconds


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The time prompt's clock stands still, so the expected system prompt can be rebuilt."""
    monkeypatch.setattr(runtime, "now", lambda: datetime(2024, 5, 6, 7, 8, tzinfo=timezone.utc))


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """The plugin's log lines during the test."""
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}")
    yield lines
    logger.remove(sink)


async def stored_messages(engine) -> int:
    """Every message in the history, whatever its session."""
    async with engine.history.engine.connect() as conn:
        return len((await conn.execute(messages_table.select())).all())


def test_a_cooldown_holds_each_person_in_each_chat_until_cleared() -> None:
    assert poke.cooldown.seconds == plugin_config.marsho_poke_cooldown == 30
    cooldown = poke.Cooldown(60)
    assert cooldown.ready("group:1", "u") and not cooldown.ready("group:1", "u")
    assert cooldown.ready("group:1", "v") and cooldown.ready("group:2", "u")
    assert cooldown.ready("private:u", "u") and not cooldown.ready("private:u", "u")
    cooldown.clear()
    assert cooldown.ready("group:1", "u")
    no_wait = poke.Cooldown(0)
    assert all(no_wait.ready("group:1", "u") for _ in range(3))


def test_the_fixed_line_is_the_english_text() -> None:
    assert t("poke.fallback", name=plugin_config.marsho_name) == FIXED


async def test_poking_the_bot_in_a_group_gets_the_models_line_mentioning_the_poker(
    app: App, fake: FakeOpenAI, plugin_engine, fixed_clock: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_config, "marsho_system_prompt", "You are Testy, a cat.")
    fake.push(text("Hey, that tickles!"))
    async with app.test_matcher() as ctx:  # every matcher: only the poke one answers
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Hey, that tickles!"), result={"message_id": 1})
    [request] = fake.requests
    assert "tools" not in request and "tool_choice" not in request
    assert request["messages"] == [
        {"role": "system", "content": runtime.system_prompt(nickname=None, shared=False)},
        {"role": "user", "content": t("poke.prompt", who=t("poke.someone"))},
    ]
    assert request["messages"][0]["content"].startswith("You are Testy, a cat.")
    assert request["messages"][1]["content"].startswith("Someone just poked you")
    # nothing stored: no turn in the group's, the member's or the private session
    for key in ("OneBot V11:group:20001", "OneBot V11:group:20001:user:10001",
                "OneBot V11:private:10001", "OneBot V11:user:10001"):
        assert await plugin_engine.history.stats(key) == (0, 0, 0)
    assert await stored_messages(plugin_engine) == 0


async def test_a_private_poke_is_answered_in_plain_text(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("Boop back!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event(group_id=None))
        ctx.should_call_api(*private_answer("Boop back!"), result={"message_id": 1})
    assert len(fake.requests) == 1


async def test_a_second_poke_within_the_cooldown_is_ignored_and_answered_after_it(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    poke.cooldown.seconds = 60
    fake.push(text("one"), text("two"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("one"), result={"message_id": 1})
        ctx.receive_event(bot, poke_event())  # within the cooldown: no send_msg at all
    assert len(fake.requests) == 1  # and the model was not asked
    poke.cooldown.clear()  # the cooldown is over
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("two"), result={"message_id": 2})
    assert len(fake.requests) == 2


async def test_the_cooldown_runs_out_by_itself(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    poke.cooldown.seconds = 0.05
    fake.push(text("one"), text("two"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("one"), result={"message_id": 1})
    time.sleep(0.1)
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("two"), result={"message_id": 2})
    assert len(fake.requests) == 2


async def test_a_zero_cooldown_answers_every_poke(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    poke.cooldown.seconds = 0
    fake.push(text("one"), text("two"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        for line in ("one", "two"):
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer(line), result={"message_id": 1})


async def test_the_cooldown_is_per_person_and_per_chat(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    poke.cooldown.seconds = 60
    fake.push(text("a"), text("b"), text("c"), text("d"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("a"), result={"message_id": 1})
        # another person in the same group
        ctx.receive_event(bot, poke_event(user_id=10002))
        ctx.should_call_api(*group_answer("b", user_id=10002), result={"message_id": 2})
        # the same person in another group
        ctx.receive_event(bot, poke_event(group_id=20002))
        ctx.should_call_api(*group_answer("c", group_id=20002), result={"message_id": 3})
        # the same person in a private chat
        ctx.receive_event(bot, poke_event(group_id=None))
        ctx.should_call_api(*private_answer("d"), result={"message_id": 4})
        # and each of them again: all within their cooldowns
        for event in (poke_event(), poke_event(user_id=10002), poke_event(group_id=20002),
                      poke_event(group_id=None)):
            ctx.receive_event(bot, event)
    assert len(fake.requests) == 4


@pytest.mark.parametrize(
    ("user_id", "target_id"),
    [
        pytest.param(POKER, 10002, id="poking-someone-else"),
        pytest.param(int(SELF_ID), int(SELF_ID), id="the-bot-poking-itself"),
        pytest.param(int(SELF_ID), POKER, id="the-bot-poking-someone"),
    ],
)
async def test_pokes_not_by_someone_at_the_bot_are_ignored(
    app: App, fake: FakeOpenAI, plugin_engine, user_id: int, target_id: int
) -> None:
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event(user_id=user_id, target_id=target_id))
        ctx.should_not_pass_rule()
    assert fake.requests == []


async def test_fixed_mode_never_asks_the_model(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_config, "marsho_poke", "fixed")
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer(FIXED), result={"message_id": 1})
        ctx.receive_event(bot, poke_event(group_id=None))
        ctx.should_call_api(*private_answer(FIXED), result={"message_id": 2})
    assert fake.requests == []


async def test_off_ignores_pokes(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin_config, "marsho_poke", "off")
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_not_pass_rule()
    assert fake.requests == []


async def test_an_endpoint_error_gets_the_fixed_line(
    app: App, fake: FakeOpenAI, plugin_engine, logged: list[str]
) -> None:
    fake.push(error(500, "boom"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer(FIXED), result={"message_id": 1})
    assert len(fake.requests) == 1  # asked once, no retry
    assert await stored_messages(plugin_engine) == 0
    assert any("poke answered with the fixed line" in line and "500" in line for line in logged)


async def test_no_engine_yet_gets_the_fixed_line(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "engine", None)
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event(group_id=None))
        ctx.should_call_api(*private_answer(FIXED), result={"message_id": 1})
    assert fake.requests == []


@pytest.mark.parametrize("answer", ["", "   \n "], ids=["empty", "blank"])
async def test_an_empty_model_line_gets_the_fixed_line(
    app: App, fake: FakeOpenAI, plugin_engine, answer: str
) -> None:
    fake.push(text(answer))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer(FIXED), result={"message_id": 1})


async def test_the_models_reasoning_is_not_sent(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("<think>they poked me, be cute</think>\nNyaa~", reasoning="more thoughts"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Nyaa~"), result={"message_id": 1})


async def test_an_overlong_model_line_is_cut(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("meow " * 100))
    cut = ("meow " * 100)[: poke.MAX_POKE_CHARS].rstrip() + "…"
    assert len(cut) <= poke.MAX_POKE_CHARS + 1
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer(cut), result={"message_id": 1})


async def test_a_line_of_exactly_the_limit_is_not_cut(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    line = "m" * poke.MAX_POKE_CHARS
    fake.push(text(line))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event(group_id=None))
        ctx.should_call_api(*private_answer(line), result={"message_id": 1})


@pytest.mark.parametrize(
    ("setting", "value", "user_id", "answered"),
    [
        pytest.param("marsho_denied_groups", [str(GROUP)], POKER, False, id="denied-group"),
        pytest.param("marsho_allowed_groups", ["999"], POKER, False, id="group-not-allowed"),
        pytest.param("marsho_allowed_groups", [str(GROUP)], POKER, True, id="allowed-group"),
        pytest.param("marsho_denied_users", [str(POKER)], POKER, False, id="denied-user"),
        pytest.param("marsho_allowed_users", ["6"], POKER, False, id="user-not-allowed"),
        pytest.param("marsho_allowed_users", ["6"], int(SUPERUSER_ID), True, id="superuser"),
    ],
)
async def test_allow_and_deny_lists_apply_to_pokes(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch,
    setting: str, value: list[str], user_id: int, answered: bool,
) -> None:
    monkeypatch.setattr(plugin_config, setting, value)
    fake.push(text("hi"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event(user_id=user_id))
        if answered:
            ctx.should_call_api(*group_answer("hi", user_id=user_id), result={"message_id": 1})
        else:
            ctx.should_not_pass_rule()
    assert len(fake.requests) == (1 if answered else 0)


async def test_a_denied_groups_poke_does_not_start_the_cooldown(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    poke.cooldown.seconds = 60
    monkeypatch.setattr(plugin_config, "marsho_denied_groups", [str(GROUP)])
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_not_pass_rule()
    monkeypatch.setattr(plugin_config, "marsho_denied_groups", [])
    fake.push(text("now I may"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("now I may"), result={"message_id": 1})


async def test_the_pokers_nickname_is_in_the_poke_prompt(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    assert runtime.nicknames is not None
    await runtime.nicknames.set(f"OneBot V11:{POKER}", "Alice")
    fake.push(text("Hi Alice!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Hi Alice!"), result={"message_id": 1})
    [request] = fake.requests
    assert request["messages"][-1] == {"role": "user", "content": t("poke.prompt", who="Alice")}
    assert request["messages"][-1]["content"].startswith("Alice just poked you")
    # the nickname is asked for by the poke prompt only: the system prompt is the persona's
    assert "Alice" not in request["messages"][0]["content"]


async def test_someone_elses_nickname_is_not_used(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    assert runtime.nicknames is not None
    await runtime.nicknames.set("OneBot V11:10002", "Bob")
    fake.push(text("Hi!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Hi!"), result={"message_id": 1})
    assert fake.requests[0]["messages"][-1]["content"] == t("poke.prompt", who="Someone")


async def test_a_failed_send_is_logged_by_the_plugin(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch, logged: list[str]
) -> None:
    monkeypatch.setattr(plugin_config, "marsho_poke", "fixed")
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer(FIXED), exception=RuntimeError("network down"))
    assert any(line.startswith("marsho: could not answer a poke: network down") for line in logged)


async def test_the_models_line_is_sent_as_text_not_as_cq_codes(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("[CQ:at,qq=all] wake up!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("[CQ:at,qq=all] wake up!"), result={"message_id": 1})


async def test_a_broken_nickname_store_still_pokes_back(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(user_key: str) -> str | None:
        raise StoreError("cannot read sqlite://: OperationalError: gone")

    assert runtime.nicknames is not None
    monkeypatch.setattr(runtime.nicknames, "get", broken)
    fake.push(text("Still here!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Still here!"), result={"message_id": 1})
    assert fake.requests[0]["messages"][-1]["content"] == t("poke.prompt", who="Someone")


async def test_a_poke_the_model_answers_counts_against_the_rate_limits(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.chat import matchers
    from nonebot_plugin_marsho.chat.fairuse import RateLimiter

    monkeypatch.setattr(matchers, "group_limits", RateLimiter(1, 60))
    fake.push(text("Nya~"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event(user_id=10001))
        ctx.should_call_api(*group_answer("Nya~", user_id=10001), result={"message_id": 1})
        # another member of the same group: the group's one model answer is spent
        ctx.receive_event(bot, poke_event(user_id=10002))
        ctx.should_call_api(*group_answer(FIXED, user_id=10002), result={"message_id": 2})
    assert len(fake.requests) == 1
