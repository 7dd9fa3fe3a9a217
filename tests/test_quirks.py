"""Model quirks as data (issue 15): each profile's rule is checked against a fake endpoint that
enforces it with the provider's own error text (`FakeOpenAI.strict`); switching models among the
profiles never produces a provider error, and reasoning never reaches the answer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import Fallback, LLMClient
from nonebot_plugin_marsho.agent.quirks import Quirks, quirks_for, shaped
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import ToolRunner
from tests.conftest import llm_client
from tests.fake_openai import FakeOpenAI, error, text, tool_calls
from tests.test_engine import make_toolset

CALL = {"id": "c1", "type": "function", "function": {"name": "wx__get_weather", "arguments": "{}"}}


@pytest.fixture
def strict(fake: FakeOpenAI) -> FakeOpenAI:
    """The fake endpoint refusing what each model's real provider refuses."""
    fake.strict = True
    return fake


@pytest.fixture(scope="module")
def backup() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def engine_on(client: LLMClient, system_prompt: str = "Be brief.") -> Engine:
    toolset = make_toolset()
    return Engine(client, toolset, SqlStore("sqlite://"), ToolRunner(toolset, timeout=5),
                  system_prompt=system_prompt)


async def refusal(client: LLMClient, messages: list[dict[str, Any]]) -> str:
    with pytest.raises(EndpointError) as caught:
        await client.complete(messages)
    assert caught.value.status == 400
    return str(caught.value)


# --- the table ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "expected"), [
    ("deepseek-reasoner", Quirks(reasoning_required=True, merge_same_role=True)),
    ("DeepSeek-R1-0528", Quirks(reasoning_required=True, merge_same_role=True)),
    ("mimo-v2-flash", Quirks(reasoning_required=True)),
    ("kimi-k2-thinking-turbo", Quirks(reasoning_required=True)),
    ("o1-mini-2024-09-12", Quirks(reasoning_back=False, system_as_user=True,
                                  token_field="max_completion_tokens")),
    ("o3-mini", Quirks(reasoning_back=False, token_field="max_completion_tokens")),
    ("gpt-4o-mini", Quirks(reasoning_back=False)),
    ("Qwen2.5-7B-Instruct", Quirks(tool_call_content="empty")),
    ("qwen/qwq-32b", Quirks(tool_call_content="empty")),
    ("llama3.1:8b", Quirks()),
])
def test_each_model_family_gets_its_profile(model: str, expected: Quirks) -> None:
    assert quirks_for(model) == expected


def test_marsho_model_quirks_change_fields_over_the_built_in_profile() -> None:
    config = Config(marsho_model_quirks={"deepseek-*": {"system_as_user": True},
                                         "deepseek-reasoner": {"merge_same_role": False}})
    overrides = {pattern: given.fields() for pattern, given in config.marsho_model_quirks.items()}
    assert quirks_for("deepseek-reasoner", overrides) == Quirks(reasoning_required=True,
                                                                system_as_user=True)
    assert quirks_for("deepseek-chat", overrides) == Quirks(system_as_user=True)
    assert quirks_for("gpt-4o", overrides) == Quirks(reasoning_back=False)


def test_a_misspelled_quirk_is_refused_with_its_place() -> None:
    from pydantic import ValidationError

    from nonebot_plugin_marsho.config import describe_validation_error

    with pytest.raises(ValidationError) as caught:
        Config(marsho_model_quirks={"o1*": {"system_as_usr": True}})
    assert "MARSHO_MODEL_QUIRKS['o1*'].system_as_usr" in describe_validation_error(caught.value)


def test_shaping_merges_same_roles_and_keeps_tool_messages_apart() -> None:
    messages = [
        {"role": "system", "content": "persona"}, {"role": "system", "content": "facts"},
        {"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "thinking aloud"},
        {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "why"},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
    ]
    assert shaped(messages, Quirks(merge_same_role=True)) == [
        {"role": "system", "content": "persona\n\nfacts"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "thinking aloud", "tool_calls": [CALL], "reasoning_content": "why"},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
    ]
    assert messages[0] == {"role": "system", "content": "persona"}  # the conversation is untouched


def test_shaping_sets_tool_call_text_and_drops_reasoning_as_asked() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "why"}
    assert shaped([message], Quirks(tool_call_content="empty", reasoning_back=False)) == [
        {"role": "assistant", "content": "", "tool_calls": [CALL]}]
    assert shaped([{**message, "content": ""}], Quirks()) == [message]
    assert shaped([{"role": "system", "content": "p"}], Quirks(system_as_user=True)) == [
        {"role": "user", "content": "p"}]


# --- each quirk against a provider that enforces it ---------------------------------------------


async def test_deepseek_reasoner_gets_no_two_messages_of_one_role_in_a_row(strict: FakeOpenAI) -> None:
    messages = [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}]
    raw = llm_client(strict, model="deepseek-reasoner", quirks={"deepseek-*": {"merge_same_role": False}})
    assert "deepseek-reasoner does not support successive user or assistant messages" in (
        await refusal(raw, messages))
    assert (await llm_client(strict, model="deepseek-reasoner").complete(messages)).content == "ok"
    assert strict.requests[-1]["messages"] == [{"role": "user", "content": "first\n\nsecond"}]


async def test_deepseek_reasoner_gets_its_reasoning_back_with_tool_calls(strict: FakeOpenAI) -> None:
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="I should look it up"),
                text("Sunny.", reasoning="It said sunny"))
    reply = await engine_on(llm_client(strict, model="deepseek-reasoner")).chat("k", "weather?")
    assert reply.text == "Sunny."
    assert strict.requests[1]["messages"][2]["reasoning_content"] == "I should look it up"

    strict.reset()
    strict.strict = True
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="I should look it up"))
    raw = llm_client(strict, model="deepseek-reasoner", quirks={"deepseek-*": {"reasoning_back": False}})
    with pytest.raises(EndpointError, match="Missing `reasoning_content` field in the assistant message"):
        await engine_on(raw).chat("k", "weather?")


async def test_o1_mini_gets_the_system_prompt_as_a_user_message(strict: FakeOpenAI) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    raw = llm_client(strict, model="o1-mini", quirks={"o1-mini": {"system_as_user": False}})
    assert "'messages[0].role' does not support 'system' with this model" in await refusal(raw, messages)
    assert (await llm_client(strict, model="o1-mini").complete(messages)).content == "ok"
    assert [m["role"] for m in strict.requests[-1]["messages"]] == ["user", "user"]


async def test_o1_mini_gets_its_token_limit_as_max_completion_tokens(strict: FakeOpenAI) -> None:
    messages = [{"role": "user", "content": "hi"}]
    raw = llm_client(strict, model="o1-mini", max_answer_tokens=500,
                     quirks={"o1-mini": {"token_field": "max_tokens"}})
    assert "Use 'max_completion_tokens' instead" in await refusal(raw, messages)
    await llm_client(strict, model="o1-mini", max_answer_tokens=500).complete(messages)
    assert strict.requests[-1]["max_completion_tokens"] == 500 and "max_tokens" not in strict.requests[-1]


async def test_a_qwen_server_gets_empty_text_beside_tool_calls(strict: FakeOpenAI) -> None:
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"})), text("Sunny."))
    reply = await engine_on(llm_client(strict, model="qwen2.5-7b-instruct")).chat("k", "weather?")
    assert reply.text == "Sunny." and strict.requests[1]["messages"][2]["content"] == ""

    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"})))
    raw = llm_client(strict, model="qwen2.5-7b-instruct", quirks={"qwen*": {"tool_call_content": "null"}})
    with pytest.raises(EndpointError, match="'content' field must be a string or an array of objects"):
        await engine_on(raw).chat("k2", "weather?")


async def test_openai_models_get_no_reasoning_content_back(fake: FakeOpenAI) -> None:
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="hidden"), text("Sunny."))
    await engine_on(llm_client(fake, model="gpt-4o-mini")).chat("k", "weather?")
    assert "reasoning_content" not in fake.requests[1]["messages"][2]


# --- switching models, and fallbacks, never leak reasoning ------------------------------------


THINKING_ANSWERS = [
    lambda: tool_calls(("wx__get_weather", {"location": "Oslo"}),
                       content="<think>secret plan</think>", reasoning="private thoughts"),
    lambda: text("<think>more secret thoughts</think>It is sunny in Oslo.", reasoning="private thoughts"),
]


async def test_switching_among_profiles_never_gets_a_provider_error_or_leaks_reasoning(
    strict: FakeOpenAI,
) -> None:
    engine = engine_on(llm_client(strict, model="deepseek-reasoner", max_answer_tokens=800))
    for model in ("deepseek-reasoner", "o1-mini", "qwen2.5-72b-instruct", "deepseek-reasoner"):
        await engine.switch_model(model)
        strict.push(*(answer() for answer in THINKING_ANSWERS))
        reply = await engine.chat("k", "weather in Oslo?")  # the history grows across models
        assert reply.text == "It is sunny in Oslo." and reply.rounds == 1, model
        assert "secret" not in reply.text and "private" not in reply.text
    stored = (await engine.history.recent_turns("k", max_messages=100, max_tokens=10**6))
    texts = [str(m.get("content")) for turn in stored for m in turn.messages]
    assert not any("secret" in t or "private" in t or "<think>" in t for t in texts)
    assert len(stored) == 4


async def test_a_fallback_with_other_quirks_continues_a_turn_without_a_provider_error(
    strict: FakeOpenAI, backup: FakeOpenAI
) -> None:
    backup.reset()
    backup.strict = True
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="primary's thoughts"),
                error(503, "gone"))
    backup.push(text("<think>backup's thoughts</think>Sunny in Oslo."))
    client = llm_client(strict, model="deepseek-reasoner", retries=0,
                        fallbacks=[Fallback(base_url=backup.base_url, model="o1-mini")])
    reply = await engine_on(client).chat("k", "weather?")
    assert reply.text == "Sunny in Oslo." and "thoughts" not in reply.text
    sent = backup.requests[0]["messages"]
    assert sent[0]["role"] == "user"  # o1-mini's profile: the system prompt as a user message
    assert not any("reasoning_content" in message for message in sent)
    backup.reset()


async def test_reasoning_of_one_provider_never_reaches_the_fallback_a_turn_moved_to(
    fake: FakeOpenAI, backup: FakeOpenAI
) -> None:
    backup.reset()
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="primary's thoughts"),
              tool_calls(("wx__get_weather", {"location": "Rome"}), reasoning="more of them"),
              error(503, "gone"))
    backup.push(tool_calls(("wx__get_weather", {"location": "Paris"}), reasoning="backup's own"),
                text("Sunny everywhere."))
    client = llm_client(fake, model="deepseek-reasoner", retries=0,
                        fallbacks=[Fallback(base_url=backup.base_url, model="llama-3.1-70b")])
    engine = engine_on(client)
    reply = await engine.chat("k", "weather?")
    assert reply.text == "Sunny everywhere." and reply.rounds == 3
    # the primary got its own reasoning back within the turn, as DeepSeek's reasoner wants
    assert [m.get("reasoning_content") for m in fake.requests[1]["messages"]
            if m.get("tool_calls")] == ["primary's thoughts"]
    moved = backup.requests[0]["messages"]
    assert [m["role"] for m in moved].count("assistant") == 2
    assert not any("reasoning_content" in message for message in moved)
    # its own reasoning goes back to it; the primary's still does not
    assert [m.get("reasoning_content") for m in backup.requests[1]["messages"]
            if m.get("tool_calls")] == [None, None, "backup's own"]
    backup.reset()


async def test_a_reasoner_fallback_gets_empty_reasoning_beside_another_providers_tool_calls(
    fake: FakeOpenAI, backup: FakeOpenAI
) -> None:
    backup.reset()
    backup.strict = True  # refuses a tool call without `reasoning_content`, as DeepSeek does
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="mimo's thoughts"),
              error(503, "gone"))
    backup.push(tool_calls(("wx__get_weather", {"location": "Rome"}), reasoning="deepseek's own"),
                text("Sunny in Oslo."))
    client = llm_client(fake, model="mimo-v2-flash", retries=0,
                        fallbacks=[Fallback(base_url=backup.base_url, model="deepseek-reasoner")])
    reply = await engine_on(client).chat("k", "weather?")
    assert reply.text == "Sunny in Oslo." and len(backup.requests) == 2
    calls = [m for m in backup.requests[1]["messages"] if m.get("tool_calls")]
    assert [m["reasoning_content"] for m in calls] == ["", "deepseek's own"]  # its own goes back
    backup.reset()


def test_shaping_leaves_out_reasoning_another_endpoint_gave() -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "theirs"},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "ours"}]
    sent = shaped(messages, Quirks(), foreign={"theirs"})
    assert "reasoning_content" not in sent[1] and sent[3]["reasoning_content"] == "ours"
    sent = shaped(messages, Quirks(reasoning_required=True), foreign={"theirs"})
    assert sent[1]["reasoning_content"] == "" and sent[3]["reasoning_content"] == "ours"
    assert messages[1]["reasoning_content"] == "theirs"  # what is stored stays as it is
