"""One answer to one thought (issue 17 part 3), through the plugin's matchers on OneBot v11
events: a second line while a question is answered restarts it with both (one answer, one
stored turn), a picture just before a question goes with it, another person's line stays
theirs, and a lone question goes to the model at once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from nonebot_plugin_marsho.chat.debounce import MAX_RESTARTS, Debounce
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, held, text
from tests.platforms import PLATFORMS, PNG, Chat, Files, forget_uninfo_sessions
from tests.speakers import label
from tests.test_platforms import pictures_in, question_text, say

ALICE, BOB = "10601", "10602"
_groups = itertools.count(95001)


@pytest.fixture
def chat() -> Iterator[Chat]:
    forget_uninfo_sessions()
    served = Files()
    chat = PLATFORMS["OneBot V11"](served)
    chat.group_id = str(next(_groups))
    chat.files_served = served  # type: ignore[attr-defined]
    yield chat
    served.close()
    forget_uninfo_sessions()


@pytest.fixture
def window(plugin_engine) -> Iterator[Any]:
    """A wide window (a loaded machine never makes a test's follow-up late), pictures seen."""
    with configured(marsho_debounce_seconds=20, marsho_vision_models=["fake-*"],
                    marsho_image_allow_private=True) as app:
        yield app


async def asked(fake: FakeOpenAI, count: int) -> None:
    """Wait until the endpoint has received `count` requests."""
    await asyncio.wait_for(_asked(fake, count), 60)


async def _asked(fake: FakeOpenAI, count: int) -> None:
    while len(fake.requests) < count:
        await asyncio.sleep(0.01)


async def while_answering(fake: FakeOpenAI, chat: Chat, first: Any, *then: Any) -> None:
    """Deliver `first`; once its request reached the endpoint, deliver the others, then send the
    answers held until then (`held(...)`: surely still on their way meanwhile)."""
    async def rest() -> None:
        for number, event in enumerate(then, start=2):
            await asked(fake, number - 1)
            await say(chat, event)
        fake.release()
    await asyncio.gather(say(chat, first), rest())


async def test_a_second_line_restarts_the_question_with_both_and_one_answer(
    fake: FakeOpenAI, window: Any, chat: Chat
) -> None:
    fake.push(held(text("abandoned")), text("Hello, world."))
    await while_answering(fake, chat, chat.group_event("marsho translate this:", user_id=ALICE, name="Alice"),
                          chat.group_event("bonjour le monde", user_id=ALICE, name="Alice"))
    assert chat.sent_texts() == ["Hello, world."]
    assert question_text(fake.requests[-1]["messages"][-1]["content"]) == \
        f"{label('Alice', ALICE)}: translate this:\n┆ bonjour le monde"
    engine = window.require_engine()
    turns, _, _ = await engine.history.stats(f"OneBot V11:group:{chat.group_id}")
    assert turns == 1  # the abandoned request left nothing behind
    history = await engine.history.export(f"OneBot V11:group:{chat.group_id}")
    assert "abandoned" not in str(history) and "bonjour le monde" in str(history)


async def test_a_second_question_with_the_trigger_joins_too(fake: FakeOpenAI, window: Any, chat: Chat) -> None:
    fake.push(held(text("abandoned")), text("Both, then."))
    await while_answering(fake, chat, chat.group_event("marsho what is 2+2", user_id=ALICE, name="Alice"),
                          chat.group_event("marsho and 3+3?", user_id=ALICE, name="Alice"))
    assert chat.sent_texts() == ["Both, then."]
    assert question_text(fake.requests[-1]["messages"][-1]["content"]) == f"{label('Alice', ALICE)}: what is 2+2\n┆ and 3+3?"


async def test_restarts_are_bounded(fake: FakeOpenAI, window: Any, chat: Chat) -> None:
    fake.push(*[held(text(f"abandoned {n}")) for n in range(MAX_RESTARTS)], held(text("Done.")))
    lines = [chat.group_event(f"line {n}", user_id=ALICE, name="Alice") for n in range(MAX_RESTARTS + 1)]
    # the last line comes while the last allowed request runs: it does not restart it
    await while_answering(fake, chat, chat.group_event("marsho start", user_id=ALICE, name="Alice"), *lines)
    assert chat.sent_texts() == ["Done."] and len(fake.requests) == MAX_RESTARTS + 1
    assert question_text(fake.requests[-1]["messages"][-1]["content"]) == f"{label('Alice', ALICE)}: start\n┆ line 0\n┆ line 1"


async def test_another_persons_line_does_not_join(fake: FakeOpenAI, window: Any, chat: Chat) -> None:
    fake.push(held(text("For Alice.")))
    await while_answering(fake, chat, chat.group_event("marsho hi", user_id=ALICE, name="Alice"),
                          chat.group_event("unrelated", user_id=BOB, name="Bob"))
    assert chat.sent_texts() == ["For Alice."] and len(fake.requests) == 1
    assert question_text(fake.requests[0]["messages"][-1]["content"]) == f"{label('Alice', ALICE)}: hi"


async def test_a_picture_then_a_question_are_one_question(fake: FakeOpenAI, window: Any, chat: Chat) -> None:
    files: Files = chat.files_served  # type: ignore[attr-defined]
    await say(chat, chat.group_event("", user_id=ALICE, name="Alice", picture_url=files.add("/cat.png")))
    assert fake.requests == [] and chat.sent_texts() == []
    fake.push(text("A cat."))
    await say(chat, chat.group_event("marsho what is this?", user_id=ALICE, name="Alice"))
    assert chat.sent_texts() == ["A cat."] and len(fake.requests) == 1
    content = fake.requests[0]["messages"][-1]["content"]
    assert pictures_in(content) == [PNG] and question_text(content) == f"{label('Alice', ALICE)}: what is this?"


async def test_a_bare_trigger_after_a_picture_asks_about_it(fake: FakeOpenAI, window: Any, chat: Chat) -> None:
    files: Files = chat.files_served  # type: ignore[attr-defined]
    await say(chat, chat.group_event("", user_id=ALICE, name="Alice", picture_url=files.add("/dog.png")))
    fake.push(text("A dog."))
    await say(chat, chat.group_event("marsho", user_id=ALICE, name="Alice"))
    assert chat.sent_texts() == ["A dog."] and pictures_in(fake.requests[0]["messages"][-1]["content"]) == [PNG]


async def test_with_the_defaults_a_lone_question_is_asked_at_once(
    fake: FakeOpenAI, plugin_engine, marsho, chat: Chat
) -> None:
    assert marsho.config.marsho_debounce_seconds == 1.5
    fake.push(text("Right away."))
    await say(chat, chat.group_event("marsho hi", user_id=ALICE, name="Alice"))
    assert chat.sent_texts() == ["Right away."] and len(fake.requests) == 1


async def test_off_means_two_lines_are_two_things(fake: FakeOpenAI, plugin_engine, chat: Chat) -> None:
    with configured(marsho_debounce_seconds=0):
        fake.push(text("First.", delay=0.5), text("Second."))
        await while_answering(fake, chat, chat.group_event("marsho one", user_id=ALICE, name="Alice"),
                              chat.group_event("marsho two", user_id=ALICE, name="Alice"))
    assert sorted(chat.sent_texts()) == ["First.", "Second."]


def test_a_picture_is_kept_only_for_the_window() -> None:
    now = [100.0]
    debounce = Debounce(1.5, clock=lambda: now[0])
    debounce.keep_picture("k", "picture")  # type: ignore[arg-type]
    now[0] += 2
    assert debounce.picture("k") is None
    debounce.keep_picture("k", "picture")  # type: ignore[arg-type]
    now[0] += 1
    assert debounce.begin("k").before[0].event == "picture"
    assert debounce.picture("k") is None  # taken by that question


async def test_on_discord_a_dm_never_joins_a_question_asked_in_a_channel(
    fake: FakeOpenAI, window: Any
) -> None:
    """Discord's session id is the author alone, in every channel and DM."""
    forget_uninfo_sessions()
    chat = PLATFORMS["Discord"]()
    fake.push(held(text("abandoned?")), text("ok"))
    await while_answering(fake, chat, chat.event("channel", "marsho hi"),
                          chat.event("private", "my secret DM text"))
    assert "my secret DM text" not in str(fake.requests)
    assert chat.sent_texts() == ["abandoned?"]  # the channel's question was not restarted


def test_an_answer_being_stored_is_not_abandoned_for_a_follow_up() -> None:
    """Once the answer is being stored (Engine.chat calls `keep`), a follow-up is a question of
    its own: abandoning the turn then could leave two turns for one thought."""
    debounce = Debounce(20)
    pending = debounce.begin("someone")
    assert pending.commit(None) is True
    assert not debounce.join("someone", object(), "and another thing")  # type: ignore[arg-type]
    assert pending.after == [] and pending.restarts == 0
