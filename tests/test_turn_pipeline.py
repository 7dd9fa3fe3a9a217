"""One turn, built below the chat layer (agent/turn.py) from the facts its asker gathers: the
system prompt, the question with the group's recent chat, the note beside it; the same request
whoever asks (the bot, the CLI, a Conversation). No NoneBot event anywhere."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nonebot_plugin_marsho import Conversation
from nonebot_plugin_marsho.agent.chatlog import Observed
from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.memory import MemoryBook
from nonebot_plugin_marsho.agent.persona import Prompt
from nonebot_plugin_marsho.agent.turn import TurnFacts, ask, build_request
from nonebot_plugin_marsho.i18n import EN
from nonebot_plugin_marsho.store.memory import MemoryStore
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools.model import ToolContext, Toolset
from nonebot_plugin_marsho.tools.runner import ToolRunner
from tests.conftest import llm_client
from tests.fake_openai import FakeOpenAI, text

SHANGHAI = ZoneInfo("Asia/Shanghai")
NINE = datetime(2026, 2, 17, 9, 5, 42, tzinfo=SHANGHAI)
TIME_FACT = "It is now 2026-02-17 09:05 (Tuesday, time zone CST, UTC+08:00)."
KEY = "OneBot V11:group:20001"


def prompt(**options: Any) -> Prompt:
    return Prompt(**{"persona": "You are Marsho.", "language": "en", "now": lambda: NINE, **options})


def engine(fake: FakeOpenAI) -> Engine:
    toolset = Toolset()
    return Engine(llm_client(fake), toolset, SqlStore("sqlite://"), ToolRunner(toolset, timeout=5))


def note_of(*facts: str) -> str:
    return EN["prompt.turn_note"].format(facts=" ".join(facts))


class Recalling(MemoryBook):
    """A memory that recalls one fixed line for any words, and records what it was asked."""

    def __init__(self) -> None:
        super().__init__(MemoryStore(SqlStore("sqlite://")), language="en")
        self.asked: list[tuple[ToolContext, str]] = []

    async def note(self, context: ToolContext, question: str) -> str:
        self.asked.append((context, question))
        return "[remembered: likes tea]"


async def test_a_shared_turn_names_the_speaker_and_says_how_speakers_are_named() -> None:
    request = await build_request(TurnFacts.asking("what now?", speaker="Alice"), prompt(time_prompt=False))
    assert request.content == "Alice: what now?"
    assert request.system_prompt == "You are Marsho.\n\n" + EN["prompt.speaker_names"]


async def test_a_private_turn_is_not_named_and_its_system_prompt_is_the_base() -> None:
    request = await build_request(TurnFacts.asking("what now?"), prompt(time_prompt=False))
    assert request.content == "what now?"
    assert request.system_prompt == "You are Marsho."


async def test_the_recent_chat_goes_with_the_question_and_not_into_the_system_prompt() -> None:
    said = [Observed("Bob", "lunch at noon?", NINE.timestamp()), Observed("Carol", "yes!", NINE.timestamp())]
    facts = TurnFacts.asking("where?", speaker="Alice", recent=said)
    request = await build_request(facts, prompt())
    assert request.content == "\n".join([EN["context.label"], "| Bob (09:05): lunch at noon?",
                                         "| Carol (09:05): yes!", EN["context.end"], "Alice: where?"])
    assert request.system_prompt is not None and "lunch" not in request.system_prompt
    assert "lunch" not in request.note


async def test_the_recent_chat_goes_before_a_question_with_pictures_as_a_part_of_its_own() -> None:
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    facts = TurnFacts([{"type": "text", "text": "Alice: this?"}, picture], words="this?", shared=True,
                      recent=[Observed("Bob", "look", NINE.timestamp())])
    request = await build_request(facts, prompt())
    assert request.content == [{"type": "text", "text": "\n".join([EN["context.label"], "| Bob (09:05): look",
                                                                   EN["context.end"]])},
                               {"type": "text", "text": "Alice: this?"}, picture]


async def test_the_nickname_is_told_in_a_private_turn_and_is_the_label_in_a_shared_one() -> None:
    private = await build_request(TurnFacts.asking("hi", nickname="Ally"), prompt())
    nickname = EN["prompt.nickname"].format(nickname="Ally")
    assert private.note == note_of(TIME_FACT, nickname)
    shared = await build_request(TurnFacts.asking("hi", speaker="Ally", nickname="Ally"), prompt())
    assert shared.note == note_of(TIME_FACT)


async def test_the_group_persona_is_in_the_system_prompt() -> None:
    facts = TurnFacts.asking("hi", speaker="Alice", group_persona="a pirate")
    request = await build_request(facts, prompt(time_prompt=False))
    assert request.system_prompt == "\n\n".join(["You are Marsho.", EN["prompt.group_persona"].format(
        persona="a pirate"), EN["prompt.speaker_names"]])


async def test_the_memories_recalled_for_the_askers_words_follow_the_time_in_the_note() -> None:
    memories = Recalling()
    context = ToolContext(session_key=KEY, user_id="10001", platform="OneBot V11", chat_key=KEY)
    facts = TurnFacts.asking("tea or coffee?", speaker="Alice")
    request = await build_request(facts, prompt(), context=context, memories=memories)
    assert request.note == note_of(TIME_FACT) + "\n[remembered: likes tea]"
    assert memories.asked == [(context, "tea or coffee?")]  # the words, not the label
    await memories.store.store.close()


async def test_without_a_prompt_only_the_question_goes() -> None:
    request = await build_request(TurnFacts.asking("hi", nickname="Ally"), None)
    assert (request.system_prompt, request.content, request.note) == (None, "hi", "")


async def test_the_note_goes_beside_the_question_and_is_never_stored(fake: FakeOpenAI) -> None:
    model = engine(fake)
    fake.push(text("first"), text("second"))
    await ask(model, KEY, TurnFacts.asking("hi", nickname="Ally"), prompt())
    await ask(model, KEY, TurnFacts.asking("again", nickname="Ally"), prompt())
    first, second = fake.requests
    note = note_of(TIME_FACT, EN["prompt.nickname"].format(nickname="Ally"))
    assert first["messages"][-1] == {"role": "user", "content": f"hi\n\n{note}"}
    # the next request starts as this one did, with the question as history keeps it
    assert second["messages"][:-1] == [*first["messages"][:-1], {"role": "user", "content": "hi"},
                                       {"role": "assistant", "content": "first"}]
    stored = await model.history.recent_turns(KEY, max_messages=100, max_tokens=10**6)
    assert not any(note in str(turn.messages) for turn in stored)
    await model.history.close()


async def test_conversation_and_the_bot_send_the_same_request_for_the_same_facts(fake: FakeOpenAI) -> None:
    the_prompt = prompt()
    fake.push(text("hi Alice"), text("hi Alice"), text("again"), text("again"))
    model = engine(fake)
    conversation = Conversation(llm=llm_client(fake), prompt=the_prompt, speaker="Alice", nickname="Ally",
                                group_persona="a pirate")
    for question in ("hello", "and now?"):
        await ask(model, KEY, TurnFacts.asking(question, speaker="Alice", nickname="Ally",
                                               group_persona="a pirate"), the_prompt)
        await conversation.chat(question)
    bot_first, conversation_first, bot_second, conversation_second = fake.requests
    assert conversation_first["messages"] == bot_first["messages"]
    assert conversation_second["messages"] == bot_second["messages"]
    assert bot_first["messages"][0]["content"].startswith("You are Marsho.")
    assert bot_first["messages"][-1]["content"].startswith("Alice: hello\n\n")
    await model.history.close()


async def test_a_conversation_without_a_prompt_sends_its_system_prompt_as_given(fake: FakeOpenAI) -> None:
    conversation = Conversation(llm=llm_client(fake), system_prompt="  short answers\n", speaker="Alice")
    fake.push(text("ok"))
    await conversation.chat("hi")
    assert fake.requests[0]["messages"] == [{"role": "system", "content": "  short answers\n"},
                                            {"role": "user", "content": "Alice: hi"}]


def test_a_conversation_takes_a_system_prompt_or_a_prompt_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        Conversation(llm=llm_client("http://127.0.0.1:9/v1"), system_prompt="short", prompt=prompt())
