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
from nonebot_plugin_marsho.chat.fairuse import Cooldown, FairUse
from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.sql import messages_table
from tests.conftest import SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, error, text
from tests.onebot import SELF_ID, group_message, onebot_bot, reply_call

POKER = 10001
GROUP = 20001
FIXED = "Meow? You poked me! Ask me something with marsho <question>."
EN = Texts("en")


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
    """A bot of the test's own, with no cooldown left over from another test (tests wanting
    other settings nest `configured(...)` inside it)."""
    with configured():
        yield


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


def test_a_cooldown_holds_each_person_in_each_chat_until_it_is_over(marsho) -> None:
    assert marsho.poke_cooldown.seconds == marsho.config.marsho_poke_cooldown == 30
    with configured(marsho_poke_cooldown=5) as other:
        assert other.poke_cooldown.seconds == 5 and other.poke_cooldown is not marsho.poke_cooldown
    now = [0.0]
    cooldown = Cooldown(60, clock=lambda: now[0])
    assert cooldown.ready("group:1", "u") and not cooldown.ready("group:1", "u")
    assert cooldown.ready("group:1", "v") and cooldown.ready("group:2", "u")
    assert cooldown.ready("private:u", "u") and not cooldown.ready("private:u", "u")
    now[0] = 59.9
    assert not cooldown.ready("group:1", "u")
    now[0] = 60
    assert cooldown.ready("group:1", "u")
    no_wait = Cooldown(0)
    assert all(no_wait.ready("group:1", "u") for _ in range(3))


def test_the_fixed_line_is_the_english_text(marsho) -> None:
    assert marsho.texts("poke.fallback", name=marsho.config.marsho_name) == FIXED
    assert EN("poke.fallback", name="marsho") == FIXED


async def test_poking_the_bot_in_a_group_gets_the_models_line_mentioning_the_poker(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("Hey, that tickles!"))
    with configured(marsho_system_prompt="You are Testy, a cat.", marsho_time_prompt=True) as marsho:
        # the time prompt's clock stands still, so the expected system prompt can be rebuilt
        marsho.prompt.now = lambda: datetime(2024, 5, 6, 7, 8, tzinfo=timezone.utc)
        async with app.test_matcher() as ctx:  # every matcher: only the poke one answers
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer("Hey, that tickles!"), result={"message_id": 1})
    [request] = fake.requests
    assert "tools" not in request and "tool_choice" not in request
    assert request["messages"] == [
        {"role": "system", "content": "You are Testy, a cat."},
        {"role": "user", "content": EN("poke.prompt", who=EN("poke.someone")) + "\n\n" + EN(
            "prompt.turn_note", facts="It is now 2024-05-06 07:08 (Monday, time zone UTC+00:00).")},
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
    now = [0.0]
    fake.push(text("one"), text("two"))
    with configured(marsho_poke_cooldown=60) as marsho:
        marsho.poke_cooldown = Cooldown(marsho.config.marsho_poke_cooldown, clock=lambda: now[0])
        async with app.test_matcher(poke.poke) as ctx:  # (its events run when the block ends)
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer("one"), result={"message_id": 1})
            ctx.receive_event(bot, poke_event())  # within the cooldown: no send_msg at all
        now[0] = 59.9
        async with app.test_matcher(poke.poke) as ctx:
            ctx.receive_event(onebot_bot(ctx), poke_event())  # still within it
        assert len(fake.requests) == 1  # and the model was not asked
        now[0] = 60  # the cooldown is over
        async with app.test_matcher(poke.poke) as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer("two"), result={"message_id": 2})
    assert len(fake.requests) == 2


async def test_the_cooldown_runs_out_by_itself(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("one"), text("two"))
    with configured(marsho_poke_cooldown=0.05):
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
    fake.push(text("one"), text("two"))
    with configured(marsho_poke_cooldown=0):
        async with app.test_matcher(poke.poke) as ctx:
            bot = onebot_bot(ctx)
            for line in ("one", "two"):
                ctx.receive_event(bot, poke_event())
                ctx.should_call_api(*group_answer(line), result={"message_id": 1})
    assert len(fake.requests) == 2


async def test_the_cooldown_is_per_person_and_per_chat(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("a"), text("b"), text("c"), text("d"))
    async with app.test_matcher(poke.poke) as ctx:  # the default cooldown, 30 s
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


async def test_fixed_mode_never_asks_the_model(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    with configured(marsho_poke="fixed", marsho_user_rate_limit=1):
        async with app.test_matcher(poke.poke) as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer(FIXED), result={"message_id": 1})
            ctx.receive_event(bot, poke_event(group_id=None))
            ctx.should_call_api(*private_answer(FIXED), result={"message_id": 2})
        # the fixed line costs nothing: the poker's one question is still there
        fake.push(text("asked"))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho hi", user_id=POKER)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, "asked"), result={"message_id": 3})
    assert len(fake.requests) == 1


async def test_off_ignores_pokes(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    with configured(marsho_poke="off"):
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


async def test_no_engine_yet_gets_the_fixed_line(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    with configured() as marsho:
        marsho.services = None  # still starting (this bot's own: the running one keeps its engine)
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
    app: App, fake: FakeOpenAI, plugin_engine,
    setting: str, value: list[str], user_id: int, answered: bool,
) -> None:
    fake.push(text("hi"))
    with configured(**{setting: value}):
        async with app.test_matcher(poke.poke) as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event(user_id=user_id))
            if answered:
                ctx.should_call_api(*group_answer("hi", user_id=user_id), result={"message_id": 1})
            else:
                ctx.should_not_pass_rule()
    assert len(fake.requests) == (1 if answered else 0)


async def test_a_denied_groups_poke_does_not_start_the_cooldown(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_poke_cooldown=60, marsho_denied_groups=[str(GROUP)]) as marsho:
        async with app.test_matcher(poke.poke) as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_not_pass_rule()
        marsho.fair_use = FairUse()  # the group is let in; the same bot, the same cooldowns
        fake.push(text("now I may"))
        async with app.test_matcher(poke.poke) as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer("now I may"), result={"message_id": 1})


async def test_the_pokers_nickname_is_in_the_poke_prompt(
    app: App, fake: FakeOpenAI, plugin_engine, marsho
) -> None:
    assert marsho.nicknames is not None
    await marsho.nicknames.set(f"OneBot V11:{POKER}", "Alice")
    fake.push(text("Hi Alice!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Hi Alice!"), result={"message_id": 1})
    [request] = fake.requests
    assert request["messages"][-1] == {"role": "user", "content": EN("poke.prompt", who="Alice")}
    assert request["messages"][-1]["content"].startswith("Alice just poked you")
    # the nickname is asked for by the poke prompt only: the system prompt is the persona's
    assert "Alice" not in request["messages"][0]["content"]


async def test_someone_elses_nickname_is_not_used(
    app: App, fake: FakeOpenAI, plugin_engine, marsho
) -> None:
    assert marsho.nicknames is not None
    await marsho.nicknames.set("OneBot V11:10002", "Bob")
    fake.push(text("Hi!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Hi!"), result={"message_id": 1})
    assert fake.requests[0]["messages"][-1]["content"] == EN("poke.prompt", who="Someone")


async def test_a_failed_send_is_logged_by_the_plugin(
    app: App, fake: FakeOpenAI, plugin_engine, logged: list[str]
) -> None:
    with configured(marsho_poke="fixed"):
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
    app: App, fake: FakeOpenAI, plugin_engine, marsho, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(user_key: str) -> str | None:
        raise StoreError("cannot read sqlite://: OperationalError: gone")

    assert marsho.nicknames is not None
    monkeypatch.setattr(marsho.nicknames, "get", broken)
    fake.push(text("Still here!"))
    async with app.test_matcher(poke.poke) as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, poke_event())
        ctx.should_call_api(*group_answer("Still here!"), result={"message_id": 1})
    assert fake.requests[0]["messages"][-1]["content"] == EN("poke.prompt", who="Someone")


async def test_a_poke_the_model_answers_counts_against_the_group_limit(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("Nya~"))
    with configured(marsho_group_rate_limit=1):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event(user_id=10001))
            ctx.should_call_api(*group_answer("Nya~", user_id=10001), result={"message_id": 1})
            # another member of the same group: the group's one model answer is spent
            ctx.receive_event(bot, poke_event(user_id=10002))
            ctx.should_call_api(*group_answer(FIXED, user_id=10002), result={"message_id": 2})
    assert len(fake.requests) == 1


async def test_a_poke_and_a_question_share_the_users_limit(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("Nya~"))
    with configured(marsho_user_rate_limit=1, marsho_poke_cooldown=0):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event())
            ctx.should_call_api(*group_answer("Nya~"), result={"message_id": 1})
            # the poker's one model answer is spent: a question waits, a poke gets the fixed line
            event = group_message("marsho hi", user_id=POKER)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, "You are asking a bit fast: try again in 60 s."),
                                result={"message_id": 2})
            ctx.receive_event(bot, poke_event(group_id=None))
            ctx.should_call_api(*private_answer(FIXED), result={"message_id": 3})
    assert len(fake.requests) == 1


async def test_a_superusers_poke_is_answered_by_the_model_even_over_the_group_limit(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    boss = int(SUPERUSER_ID)
    fake.push(text("Hi boss"), text("Hi member"), text("Hi again, boss"))
    with configured(marsho_group_rate_limit=1, marsho_user_rate_limit=1, marsho_poke_cooldown=0):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            ctx.receive_event(bot, poke_event(user_id=boss))
            ctx.should_call_api(*group_answer("Hi boss", user_id=boss), result={"message_id": 1})
            # the superuser's poke was not counted: the group's one model answer is still there
            ctx.receive_event(bot, poke_event(user_id=10001))
            ctx.should_call_api(*group_answer("Hi member", user_id=10001), result={"message_id": 2})
            ctx.receive_event(bot, poke_event(user_id=10002))  # now it is spent
            ctx.should_call_api(*group_answer(FIXED, user_id=10002), result={"message_id": 3})
            # the group's limit spent, the superuser is still answered by the model
            ctx.receive_event(bot, poke_event(user_id=boss))
            ctx.should_call_api(*group_answer("Hi again, boss", user_id=boss), result={"message_id": 4})
    assert len(fake.requests) == 3
