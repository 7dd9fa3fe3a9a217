"""Replies without being called (issue 17 part 2), through the plugin's matchers on OneBot v11
events delivered as the adapter delivers them: a group's chance, keywords and the judge model
decide; the guards (itself, other bots, cooldown, hourly ceiling, repeats, quiet hours) hold;
the defaults change nothing."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.judge import verdict
from nonebot_plugin_marsho.chat import matchers
from nonebot_plugin_marsho.chat.active import flagged_bot, in_quiet_hours, quiet_hours
from tests.conftest import configured, llm_client
from tests.fake_openai import FakeOpenAI, text
from tests.platforms import PLATFORMS, Chat, forget_uninfo_sessions
from tests.speakers import label
from tests.test_platforms import say

ADMIN, ALICE, BOB, OTHER_BOT = "10501", "10502", "10503", "10599"
_groups = itertools.count(90001)


@pytest.fixture
def chat() -> Iterator[Chat]:
    """A OneBot v11 bot in a group of this test's own."""
    forget_uninfo_sessions()
    chat = PLATFORMS["OneBot V11"]()
    chat.group_id = str(next(_groups))
    yield chat
    forget_uninfo_sessions()


@pytest.fixture
def active(plugin_engine) -> Iterator[Any]:
    """Handlers use a bot whose unsolicited replies have no cooldown (tests set their own)."""
    with configured(marsho_active_cooldown=0) as app:
        yield app


async def said(app: Any, chat: Chat, words: str, user_id: str = ALICE, name: str = "Alice", **options: Any) -> None:
    """A group message; then wait for the unsolicited reply it may start."""
    await say(chat, chat.group_event(words, user_id=user_id, name=name, **options))
    await app.active.settled()


async def admin(app: Any, chat: Chat, command: str) -> str:
    await say(chat, chat.group_event(command, user_id=ADMIN, name="Ada", role="admin"))
    return chat.sent_texts()[-1]


def quoted(chat: Chat) -> list[bool]:
    """For each message the bot sent: whether it quotes one."""
    return [data["message"][0].type == "reply" for _, data in chat.sent_calls()]


async def test_at_chance_one_an_unaddressed_message_is_answered_without_a_quote(
    fake: FakeOpenAI, active: Any, chat: Chat
) -> None:
    assert (await admin(active, chat, "marsho.active 1")).startswith("Done: I answer a message here")
    fake.push(text("Sunny all week, they say!"))
    await said(active, chat, "what will the weather be like?")
    assert chat.sent_texts()[-1] == "Sunny all week, they say!"
    assert quoted(chat) == [True, False]  # the command's answer quotes; the unsolicited one does not
    question = fake.requests[-1]["messages"][-1]["content"]
    assert question == f"{label('Alice', ALICE)}: what will the weather be like?"  # the group's shared conversation
    shown = await admin(active, chat, "marsho.active")
    assert "chance 1, keywords: none" in shown and "go to the model's provider" in shown


async def test_at_chance_zero_nothing_is_answered(fake: FakeOpenAI, active: Any, chat: Chat) -> None:
    await admin(active, chat, "marsho.active 0")
    await said(active, chat, "anyone here?")
    assert fake.requests == [] and len(chat.sent_texts()) == 1


async def test_off_stops_it(fake: FakeOpenAI, active: Any, chat: Chat) -> None:
    await admin(active, chat, "marsho.active 1")
    assert await admin(active, chat, "marsho.active off") == "Done: I answer in this group only when called."
    await said(active, chat, "anyone here?")
    assert fake.requests == []


async def test_a_keyword_gets_an_answer_and_other_words_do_not(fake: FakeOpenAI, active: Any, chat: Chat) -> None:
    assert await admin(active, chat, "marsho.active keywords cat 猫") == \
        "Done: I answer messages here that mention: cat, 猫."
    await said(active, chat, "my dog barks")
    assert fake.requests == []
    fake.push(text("Cats love boxes."))
    await said(active, chat, "why does my Cat sit in boxes?")
    assert chat.sent_texts()[-1] == "Cats love boxes."
    assert await admin(active, chat, "marsho.active keywords off") == \
        "Done: no keywords make me answer here any more."
    await said(active, chat, "cat again")
    assert len(fake.requests) == 1


async def test_a_member_cannot_turn_it_on_and_the_ceiling_holds(fake: FakeOpenAI, plugin_engine, chat: Chat) -> None:
    with configured(marsho_active_max=0.2) as app:
        await say(chat, chat.group_event("marsho.active 1", user_id=BOB, name="Bob"))
        assert chat.sent_texts()[-1] == \
            "Only group admins and superusers can change when I answer without being called."
        assert await admin(app, chat, "marsho.active 0.5") == \
            "The bot's owner allows a chance of at most 0.2 (MARSHO_ACTIVE_MAX)."
        assert (await admin(app, chat, "marsho.active lots")).startswith("Use marsho.active 0.2")


async def test_the_judge_model_is_asked_without_tools_and_obeyed(fake: FakeOpenAI, active: Any, chat: Chat) -> None:
    active.judge = llm_client(fake, model="judge-model")
    await admin(active, chat, "marsho.active 0")  # no chance, no keywords: the judge alone decides
    verdicts = iter(["yes", "No.", "maybe, I could help"])

    def answer(body: dict[str, Any]) -> Any:
        return text(next(verdicts)) if body["model"] == "judge-model" else text("Try turning it off and on.")
    fake.responder = answer
    await said(active, chat, "my router keeps dropping, any idea?")
    judged = fake.requests[0]
    assert judged["model"] == "judge-model" and "tools" not in judged
    assert judged["messages"][-1]["content"] == "my router keeps dropping, any idea?"
    assert chat.sent_texts()[-1] == "Try turning it off and on."
    assert [r["model"] for r in fake.requests] == ["judge-model", "fake-model"]
    await said(active, chat, "lunch at noon?")  # "No."
    await said(active, chat, "what a day")  # neither yes nor no: a no
    assert [r["model"] for r in fake.requests] == ["judge-model", "fake-model", "judge-model", "judge-model"]
    assert len(chat.sent_texts()) == 2


async def test_a_failing_judge_means_no(fake: FakeOpenAI, active: Any, chat: Chat) -> None:
    active.judge = llm_client("http://127.0.0.1:9/v1", model="judge-model", timeout=1)
    await admin(active, chat, "marsho.active 0")
    await said(active, chat, "hello?")
    assert fake.requests == [] and len(chat.sent_texts()) == 1


def test_the_verdict_is_read_strictly() -> None:
    assert verdict("yes") is True and verdict(" Yes. ") is True and verdict("是") is True
    assert verdict("no") is False and verdict("NO") is False
    assert verdict("yes, because") is None and verdict("") is None and verdict("I think yes") is None


async def test_never_its_own_messages_nor_ignored_accounts(fake: FakeOpenAI, plugin_engine, chat: Chat) -> None:
    with configured(marsho_active_cooldown=0, marsho_ignored_users=[int(OTHER_BOT)]) as app:
        await admin(app, chat, "marsho.active 1")
        await said(app, chat, "beep, I am a bot too", user_id=OTHER_BOT, name="Robo")
        await said(app, chat, "I said this myself", user_id=chat.self_id, name="Marsho")
        assert fake.requests == []
        await said(app, chat, "and I am a person")
        assert len(fake.requests) == 1


def test_platforms_bot_flags_are_read() -> None:
    assert flagged_bot(SimpleNamespace(author=SimpleNamespace(bot=True)))  # Discord
    assert flagged_bot(SimpleNamespace(from_=SimpleNamespace(is_bot=True)))  # Telegram
    assert flagged_bot(SimpleNamespace(user=SimpleNamespace(is_bot=True)))  # Satori
    assert not flagged_bot(SimpleNamespace(author=SimpleNamespace(bot=False), user=SimpleNamespace(is_bot=None)))


async def test_the_cooldown_holds_back_the_next_reply(fake: FakeOpenAI, plugin_engine, chat: Chat) -> None:
    with configured(marsho_active_cooldown=600) as app:
        await admin(app, chat, "marsho.active 1")
        fake.push(text("First."), text("Second."))
        await said(app, chat, "one")
        await said(app, chat, "two")
    assert chat.sent_texts()[1:] == ["First."] and len(fake.requests) == 1


async def test_at_most_so_many_an_hour(fake: FakeOpenAI, plugin_engine, chat: Chat) -> None:
    with configured(marsho_active_cooldown=0, marsho_active_per_hour=2) as app:
        await admin(app, chat, "marsho.active 1")
        fake.push(text("A."), text("B."), text("C."))
        for words in ("one", "two", "three"):
            await said(app, chat, words)
    assert chat.sent_texts()[1:] == ["A.", "B."]


async def test_a_reply_that_repeats_a_recent_one_is_neither_sent_nor_remembered(
    fake: FakeOpenAI, active: Any, chat: Chat, plugin_engine
) -> None:
    await admin(active, chat, "marsho.active 1")
    fake.push(text("Nya!"), text("Nya!"), text("Something new."))
    for words in ("hi", "hello", "hey"):
        await said(active, chat, words)
    assert chat.sent_texts()[1:] == ["Nya!", "Something new."]
    stored = json.dumps(await plugin_engine.history.export(f"OneBot V11:group:{chat.group_id}"))
    assert stored.count("Nya!") == 1 and "hello" not in stored  # the unsent turn is not history


async def test_the_message_answered_unasked_is_not_also_in_the_recent_chat_that_goes_with_it(
    fake: FakeOpenAI, active: Any, chat: Chat
) -> None:
    await admin(active, chat, "marsho.context on")
    await admin(active, chat, "marsho.active keywords cat")
    await said(active, chat, "my dog barks", user_id=BOB, name="Bob")
    fake.push(text("Cats love boxes."))
    await said(active, chat, "why does my cat sit in boxes?")
    question = json.dumps(fake.requests[-1]["messages"][-1]["content"], ensure_ascii=False)
    assert question.count("why does my cat sit in boxes?") == 1, question
    assert "my dog barks" in question  # the rest of the recent chat still goes with it


async def test_quiet_hours_with_a_fake_clock(fake: FakeOpenAI, plugin_engine, chat: Chat) -> None:
    with configured(marsho_active_cooldown=0, marsho_active_quiet_hours="23:00-07:00") as app:
        await admin(app, chat, "marsho.active 1")
        app.active.now = lambda: datetime(2026, 12, 1, 2, 30)
        await said(app, chat, "anyone awake?")
        assert fake.requests == []
        app.active.now = lambda: datetime(2026, 12, 1, 9, 0)
        await said(app, chat, "good morning")
        assert len(fake.requests) == 1


def test_quiet_hours_span_midnight_or_not() -> None:
    night, day = quiet_hours("23:00-07:00"), quiet_hours("12:30-13:30")
    assert in_quiet_hours(datetime(2026, 1, 1, 23, 0), night) and in_quiet_hours(datetime(2026, 1, 1, 6, 59), night)
    assert not in_quiet_hours(datetime(2026, 1, 1, 7, 0), night)
    assert in_quiet_hours(datetime(2026, 1, 1, 13, 0), day) and not in_quiet_hours(datetime(2026, 1, 1, 14, 0), day)
    assert not in_quiet_hours(datetime(2026, 1, 1, 3, 0), quiet_hours(""))


async def test_an_unsolicited_reply_counts_against_the_groups_rate_limit(
    fake: FakeOpenAI, plugin_engine, chat: Chat
) -> None:
    with configured(marsho_active_cooldown=0, marsho_group_rate_limit=1) as app:
        await admin(app, chat, "marsho.active 1")
        fake.push(text("Unasked."))
        await said(app, chat, "chatting")
        await say(chat, chat.group_event("marsho hi", user_id=BOB, name="Bob"))
    assert chat.sent_texts()[-1].startswith("You are asking a bit fast")


async def test_the_defaults_answer_nothing_unasked(fake: FakeOpenAI, plugin_engine, marsho, chat: Chat) -> None:
    assert not marsho.active.on_anywhere()
    await said(marsho, chat, "nobody called you")
    assert fake.requests == [] and chat.sent_texts() == []


async def test_with_no_group_on_a_message_is_not_even_located(
    fake: FakeOpenAI, plugin_engine, marsho, chat: Chat, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every message not for marsho passes here: where nobody turned it on, it costs nothing."""
    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("a message was read for active replies")

    monkeypatch.setattr(matchers, "consider_active", never)
    monkeypatch.setattr(matchers, "where_of", never)
    await said(marsho, chat, "just chatting")
    assert fake.requests == []


async def test_the_choice_is_kept_in_the_database(fake: FakeOpenAI, active: Any, chat: Chat) -> None:
    await admin(active, chat, "marsho.active 0.3")
    await admin(active, chat, "marsho.active keywords tea")
    store = active.active.store
    group = f"OneBot V11:group:{chat.group_id}"
    assert (await store.group_settings("active"))[group] == "0.3"
    assert json.loads((await store.group_settings("active_keywords"))[group]) == ["tea"]


@asynccontextmanager
async def quota_of_100(tmp_path: Any, scope: str = "user") -> AsyncIterator[tuple[Any, Any]]:
    """Handlers use a bot whose members (`scope` group: groups) have 100 tokens a day, billed in
    a database of its own."""
    from nonebot_plugin_marsho.store.sql import SqlStore
    from tests.test_usage import meter_on

    store = SqlStore(f"sqlite:///{tmp_path / 'bill.db'}")
    with configured(marsho_active_cooldown=0, **{f"marsho_{scope}_daily_tokens": 100}) as app:
        engine = app.require_engine()
        saved = app.meter, engine.llm.meter
        app.meter = engine.llm.meter = meter_on(store)
        try:
            yield app, store
        finally:
            await app.meter.close()
            app.meter, engine.llm.meter = saved
            await store.close()


async def test_an_unsolicited_reply_goes_on_the_bill_and_none_comes_once_the_quota_is_used_up(
    fake: FakeOpenAI, plugin_engine: Any, chat: Chat, tmp_path: Any
) -> None:
    from tests.fake_openai import with_usage
    from tests.test_usage import OPENAI_USAGE, stored_rows

    # issue 25: on the group's bill, not on that of Alice, who asked nothing
    async with quota_of_100(tmp_path, "group") as (app, store):
        await admin(app, chat, "marsho.active 1")
        fake.push(with_usage(text("Sunny!"), OPENAI_USAGE))  # 150 tokens: over the group's 100
        await said(app, chat, "nice weather today")
        await app.meter.settled()
        [row] = await stored_rows(store)
        assert row.user_key == "" and row.group_key == f"OneBot V11:{chat.group_id}"
        asked = len(fake.requests)
        await said(app, chat, "and tomorrow?")
        assert len(fake.requests) == asked and chat.sent_texts()[-1] == "Sunny!"


async def test_the_judge_goes_on_the_bill_and_is_not_asked_once_the_quota_is_used_up(
    fake: FakeOpenAI, plugin_engine: Any, chat: Chat, tmp_path: Any
) -> None:
    from tests.fake_openai import with_usage
    from tests.test_usage import OPENAI_USAGE, stored_rows

    # issue 25: on the group's bill, not on that of Alice, who asked nothing
    async with quota_of_100(tmp_path, "group") as (app, store):
        app.judge = llm_client(fake, model="judge-model")
        app.judge.meter = app.meter
        await admin(app, chat, "marsho.active 0")  # the judge alone decides
        fake.push(with_usage(text("no"), OPENAI_USAGE))  # 150 tokens: over the group's 100
        await said(app, chat, "what a day")
        await app.meter.settled()
        [row] = await stored_rows(store)
        assert (row.model, row.questions) == ("judge-model", 0)  # billed, not a question
        assert row.user_key == "" and row.group_key == f"OneBot V11:{chat.group_id}"
        asked = len(fake.requests)
        await said(app, chat, "what a day again")
        assert len(fake.requests) == asked  # over the quota: not even the judge is asked


async def test_a_question_from_an_ignored_account_or_the_bot_itself_is_not_answered(
    fake: FakeOpenAI, plugin_engine: Any, chat: Chat
) -> None:
    """Two bots that quote each other, or answer "marsho ...", would otherwise talk forever."""
    with configured(marsho_ignored_users=[OTHER_BOT]):
        await say(chat, chat.group_event("marsho hi", user_id=OTHER_BOT, name="Other bot"))
        await say(chat, chat.group_event("marsho hi", user_id=chat.self_id, name="Marsho"))
        assert fake.requests == [] and chat.sent_texts() == []
        fake.push(text("Hello!"))
        await say(chat, chat.group_event("marsho hi", user_id=ALICE, name="Alice"))
        assert chat.sent_texts() == ["Hello!"]
