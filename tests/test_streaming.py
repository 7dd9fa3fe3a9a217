"""Every popular provider, correctly (issue 26, the model layer): answers streamed from the
endpoint and assembled into one Completion within every bound, the text hook told only the
answer, provider signatures (Gemini 3) and reasoning (DeepSeek) sent back exactly within a turn
and to the same endpoint only, stream-only models (DashScope's qwq) learned from their refusal,
and MARSHO_REASONING_EFFORT sent as each family takes it, dropped where it is refused. Each
provider is the strict fake (tests/fake_openai.py), refusing what the real one would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import Fallback, LLMClient
from nonebot_plugin_marsho.chat.render import error_text, status_text
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import ToolRunner
from tests.conftest import llm_client
from tests.fake_openai import (
    FakeOpenAI,
    error,
    streamed,
    streamed_text,
    text,
    tool_calls,
    with_usage,
)
from tests.test_engine import make_toolset

T = Texts("en")
QUESTION = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = [{"type": "function", "function": {"name": "wx__get_weather", "parameters": {}}}]


@pytest.fixture
def strict(fake: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """The fake endpoint refusing what each model's real provider refuses."""
    fake.strict = True
    fake.signatures.clear()
    fake.streamed = 0
    yield fake
    fake.signatures.clear()


@pytest.fixture(scope="module")
def backup() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def engine_on(client: LLMClient, store: SqlStore | None = None) -> Engine:
    toolset = make_toolset()
    return Engine(client, toolset, store or SqlStore("sqlite://"), ToolRunner(toolset, timeout=5),
                  system_prompt="Be brief.")


class Told:
    """A text hook that keeps what it is told."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    async def __call__(self, piece: str) -> None:
        self.pieces.append(piece)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def calls_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [call for message in body["messages"] if message.get("tool_calls")
            for call in message["tool_calls"]]


# --- streaming from the endpoint ------------------------------------------------------------------


async def test_a_streamed_answer_is_assembled_with_reasoning_apart_and_usage_from_its_last_chunk(
    strict: FakeOpenAI,
) -> None:
    usage = {"prompt_tokens": 4000, "completion_tokens": 321, "total_tokens": 4321,
             "completion_tokens_details": {"reasoning_tokens": 300}}
    strict.push(with_usage(text("It is sunny in Oslo today.", reasoning="let me think"), usage))
    completion = await llm_client(strict, stream="true").complete(QUESTION)
    assert (completion.content, completion.reasoning, completion.streamed) == (
        "It is sunny in Oslo today.", "let me think", True)
    assert completion.usage is not None and not completion.usage.estimated
    # reasoning tokens counted once, inside the completion's
    assert (completion.usage.prompt, completion.usage.completion, completion.usage.reasoning) == (4000, 321, 300)
    body = strict.requests[0]
    assert (body["stream"], body["stream_options"]) == (True, {"include_usage": True})
    assert strict.streamed == 1


async def test_a_stream_without_its_usage_chunk_leaves_the_usage_to_be_estimated(fake: FakeOpenAI) -> None:
    fake.push(with_usage(text("fine"), None))
    completion = await llm_client(fake, stream="true").complete(QUESTION)
    assert completion.content == "fine" and completion.usage is None  # Metered estimates it


async def test_without_a_text_hook_requests_are_sent_as_before(strict: FakeOpenAI) -> None:
    await llm_client(strict).complete(QUESTION)
    assert "stream" not in strict.requests[0] and "stream_options" not in strict.requests[0]
    assert strict.streamed == 0


async def test_stream_false_never_streams_even_with_a_text_hook(fake: FakeOpenAI) -> None:
    told = Told()
    completion = await llm_client(fake, stream="false").complete(QUESTION, on_text=told)
    assert completion.content == "ok" and "stream" not in fake.requests[0] and told.pieces == []


async def test_streamed_tool_calls_are_assembled_from_their_fragments(strict: FakeOpenAI) -> None:
    # a qwen model on DashScope: later fragments carry "id": ""
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}, "call_a"),
                           ("wx__get_weather", {"location": "Rome, Italy"}, "call_b")))
    completion = await llm_client(strict, model="qwen-plus", stream="true").complete(QUESTION, WEATHER_TOOL)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls] == [
        ("call_a", "wx__get_weather", {"location": "Oslo"}),
        ("call_b", "wx__get_weather", {"location": "Rome, Italy"})]


async def test_a_stream_that_stops_half_way_is_an_error_and_nothing_is_stored(fake: FakeOpenAI) -> None:
    fake.push(streamed_text("The answer is", " forty", finish=False, done=False))
    engine = engine_on(llm_client(fake, stream="true", retries=0))
    with pytest.raises(EndpointError) as caught:
        await engine.chat("k", "what is it?")
    assert caught.value.code == "endpoint.stream_cut"
    assert "stopped its streamed answer half way" in error_text(T, caught.value)
    assert await engine.history.recent_turns("k", max_messages=10, max_tokens=10**6) == []


async def test_a_connection_that_breaks_mid_stream_is_a_stream_cut(fake: FakeOpenAI) -> None:
    def broken() -> Iterator[bytes]:
        yield b'data: {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}\n\n'
        raise ConnectionResetError("the server went away")  # no closing chunk: the body is short

    fake.push(streamed(broken, content_type="text/event-stream"))
    with pytest.raises(EndpointError) as caught:
        await llm_client(fake, stream="true", retries=0).complete(QUESTION)
    assert caught.value.code == "endpoint.stream_cut"


async def test_a_cut_stream_shown_in_part_is_neither_retried_nor_sent_to_a_fallback(
    fake: FakeOpenAI, backup: FakeOpenAI
) -> None:
    backup.reset()
    fake.push(streamed_text("First paragraph.", "\n\nSecond", finish=False, done=False), text("again"))
    told = Told()
    client = llm_client(fake, retries=2, fallbacks=[Fallback(base_url=backup.base_url, model="other")])
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION, on_text=told)
    assert caught.value.code == "endpoint.stream_cut_shown"
    assert told.text.startswith("First paragraph.")
    assert len(fake.requests) == 1 and backup.requests == []  # shown once, never again


async def test_a_cut_stream_nothing_of_which_was_shown_is_tried_again(fake: FakeOpenAI) -> None:
    fake.push(streamed_text("<think>hmm", finish=False, done=False), text("whole"))
    client = llm_client(fake, retries=1)
    client.sleep = no_wait
    told = Told()
    completion = await client.complete(QUESTION, on_text=told)
    assert completion.content == "whole" and told.text == "whole" and len(fake.requests) == 2


async def no_wait(seconds: float) -> None:
    pass


async def test_a_stream_past_max_response_bytes_is_refused(fake: FakeOpenAI) -> None:
    fake.push(streamed_text(*["word " * 20] * 200))  # about 40 KB of events
    with pytest.raises(EndpointError) as caught:
        await llm_client(fake, stream="true", max_response_bytes=5000).complete(QUESTION)
    assert caught.value.code == "endpoint.too_large"


async def test_a_streamed_answer_past_max_answer_chars_is_cut(fake: FakeOpenAI) -> None:
    told = Told()
    fake.push(streamed_text(*["abcdefghij"] * 10))
    completion = await llm_client(fake, max_answer_chars=25).complete(QUESTION, on_text=told)
    assert (completion.content, completion.cut) == ("abcdefghijabcdefghijabcde", True)
    assert told.text == completion.content


# --- what the text hook is told -------------------------------------------------------------------


async def test_the_hook_is_told_the_answer_as_it_arrives_never_its_reasoning(fake: FakeOpenAI) -> None:
    told = Told()
    fake.push(text("Paris is the capital.\n\nIt is large.", reasoning="the user asks about France"))
    completion = await llm_client(fake).complete(QUESTION, on_text=told)
    assert len(told.pieces) > 1  # piece by piece, not at the end
    assert told.text == completion.content == "Paris is the capital.\n\nIt is large."
    told = Told()
    fake.push(text("<think>private musing</think>\n\nThe answer."))
    completion = await llm_client(fake).complete(QUESTION, on_text=told)
    assert told.text == completion.content == "The answer." and completion.reasoning == "private musing"


async def test_a_tool_round_tells_nothing_and_the_final_answer_is_told(fake: FakeOpenAI) -> None:
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), content="Let me check."),
              text("It is sunny in Oslo."))
    told = Told()
    reply = await engine_on(llm_client(fake)).chat("k", "weather?", on_text=told)
    assert reply.text == "It is sunny in Oslo." and told.text == "It is sunny in Oslo."
    assert all(body.get("stream") is True for body in fake.requests)


async def test_a_hook_that_fails_does_not_fail_the_answer(fake: FakeOpenAI) -> None:
    async def broken(piece: str) -> None:
        raise RuntimeError("the chat is gone")

    fake.push(text("still answered"))
    assert (await llm_client(fake).complete(QUESTION, on_text=broken)).content == "still answered"


# --- stream-only models ----------------------------------------------------------------------------


async def test_a_stream_only_model_is_answered_with_default_settings_then_streamed_at_once(
    strict: FakeOpenAI,
) -> None:
    client = llm_client(strict, model="qwq-plus")
    strict.push(text("first"), text("second"))
    assert (await client.complete(QUESTION)).content == "first"
    assert [body.get("stream") for body in strict.requests] == [None, True]
    assert (await client.complete(QUESTION)).content == "second"
    assert [body.get("stream") for body in strict.requests] == [None, True, True]
    assert "qwq-plus takes only streamed requests" in status_text(T, client.status())


async def test_what_a_refusal_taught_is_kept_across_a_restart(strict: FakeOpenAI, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'learned.db'}"
    store = SqlStore(url)
    engine = engine_on(llm_client(strict, model="qwq-plus"), store)
    await engine.restore_model()
    await engine.chat("k", "hi")
    await engine.llm.learned.settled()
    await store.close()
    strict.requests.clear()
    again = engine_on(llm_client(strict, model="qwq-plus"), SqlStore(url))
    await again.restore_model()
    await again.chat("k", "hi again")
    assert [body.get("stream") for body in strict.requests] == [True]
    await again.history.close()


async def test_qwen3_thinking_that_needs_a_stream_is_streamed_not_stripped_of_its_effort(
    strict: FakeOpenAI,
) -> None:
    client = llm_client(strict, model="qwen3-235b-a22b", reasoning_effort="high")
    assert (await client.complete(QUESTION)).content == "ok"
    assert [(b.get("stream"), b.get("enable_thinking")) for b in strict.requests] == [(None, True), (True, True)]
    assert client.learned.effort_refused == {}


async def test_the_strict_fake_refuses_a_stream_only_model_unstreamed(strict: FakeOpenAI) -> None:
    with pytest.raises(EndpointError, match="only support stream mode"):
        await llm_client(strict, model="qwq-plus", stream="false").complete(QUESTION)
    assert len(strict.requests) == 1  # MARSHO_STREAM=false: the owner's choice is kept


# --- Gemini 3's thought signatures ------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["false", "true"])
async def test_gemini_3_gets_each_signature_back_exactly_within_the_turn(strict: FakeOpenAI, stream: str) -> None:
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}, "c1")), text("Sunny."),
                tool_calls(("wx__get_weather", {"location": "Oslo"}, "c2"),
                           ("wx__get_weather", {"location": "Rome"}, "c3")), text("Both sunny."))
    engine = engine_on(llm_client(strict, model="gemini-3-pro-preview", stream=stream))
    assert (await engine.chat("k", "weather in Oslo?")).text == "Sunny."
    [sent] = calls_in(strict.requests[1])
    assert sent["extra_content"] == {"google": {"thought_signature": strict.signatures["c1"]}}
    # two parallel calls: only the first carries a signature, and only it gets one back
    assert (await engine.chat("k", "and Oslo and Rome?")).text == "Both sunny."
    earlier, first, second = calls_in(strict.requests[3])
    assert "extra_content" not in earlier  # the previous turn's calls carry none of it
    assert first["extra_content"] == {"google": {"thought_signature": strict.signatures["c2"]}}
    assert "extra_content" not in second
    stored = await engine.history.recent_turns("k", max_messages=100, max_tokens=10**6)
    assert "extra_content" not in json.dumps([turn.messages for turn in stored])


async def test_the_strict_fake_refuses_a_missing_or_altered_signature(strict: FakeOpenAI) -> None:
    client = llm_client(strict, model="gemini-3-pro-preview")
    strict.signatures["c9"] = "sig-real"
    call = {"id": "c9", "type": "function", "function": {"name": "wx__get_weather", "arguments": "{}"}}
    for given in ({}, {"extra_content": {"google": {"thought_signature": "sig-forged"}}}):
        messages = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [{**call, **given}]},
                    {"role": "tool", "tool_call_id": "c9", "content": "sunny"}]
        with pytest.raises(EndpointError) as caught:
            await client.complete(messages)
        # Gemini's list-shaped error reads as a refusal with its own reason
        said = error_text(T, caught.value)
        assert said.startswith("The endpoint refused the request (400: ")
        assert "thought signature" in said or "thought_signature" in said, said


async def test_a_signature_never_goes_to_a_fallback_the_turn_moved_to(
    strict: FakeOpenAI, backup: FakeOpenAI
) -> None:
    backup.reset()
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}, "c1")), error(503, "gone"))
    backup.push(text("Sunny, says the backup."))
    client = llm_client(strict, model="gemini-3-pro-preview", retries=0,
                        fallbacks=[Fallback(base_url=backup.base_url, model="gpt-4o")])
    assert (await engine_on(client).chat("k", "weather?")).text == "Sunny, says the backup."
    assert [set(call) for call in calls_in(backup.requests[0])] == [{"id", "type", "function"}]
    backup.reset()


# --- DeepSeek's thinking with tools --------------------------------------------------------------------


async def test_deepseek_reasoning_goes_back_within_its_streamed_turn_and_never_into_the_next(
    strict: FakeOpenAI,
) -> None:
    strict.push(tool_calls(("wx__get_weather", {"location": "Oslo"}), reasoning="I should look it up"),
                text("Sunny.", reasoning="done"), text("You are welcome."))
    engine = engine_on(llm_client(strict, model="deepseek-reasoner", stream="true"))
    assert (await engine.chat("k", "weather?")).text == "Sunny."
    assert [m.get("reasoning_content") for m in strict.requests[1]["messages"] if m.get("tool_calls")] == [
        "I should look it up"]
    assert (await engine.chat("k", "thanks")).text == "You are welcome."
    assert not any("reasoning_content" in m for m in strict.requests[2]["messages"])


# --- MARSHO_REASONING_EFFORT -----------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "effort", "sent"), [
    ("gpt-5-mini", "low", {"reasoning_effort": "low"}),
    ("gemini-3-pro-preview", "high", {"reasoning_effort": "high"}),
    ("qwen-plus", "low", {"enable_thinking": True, "thinking_budget": 2048}),
    ("qwen-plus", "off", {"enable_thinking": False}),
    ("deepseek-chat", "medium", {"thinking": {"type": "enabled"}}),
    ("deepseek-chat", "off", {"thinking": {"type": "disabled"}}),
    ("gpt-4o", "high", {}),
])
async def test_the_reasoning_effort_is_sent_as_each_family_takes_it(
    strict: FakeOpenAI, model: str, effort: str, sent: dict[str, Any]
) -> None:
    assert (await llm_client(strict, model=model, reasoning_effort=effort).complete(QUESTION)).content == "ok"
    [body] = strict.requests
    fields = ("reasoning_effort", "enable_thinking", "thinking_budget", "thinking")
    assert {key: body[key] for key in fields if key in body} == sent


async def test_no_reasoning_effort_sends_nothing(strict: FakeOpenAI) -> None:
    await llm_client(strict, model="gpt-5-mini").complete(QUESTION)
    assert not {"reasoning_effort", "enable_thinking", "thinking"} & set(strict.requests[0])


async def test_a_refused_effort_is_dropped_remembered_and_shown_and_the_question_answered(
    strict: FakeOpenAI,
) -> None:
    client = llm_client(strict, model="o3-mini", reasoning_effort="minimal")
    assert (await client.complete(QUESTION)).content == "ok"
    assert [body.get("reasoning_effort") for body in strict.requests] == ["minimal", None]
    assert (await client.complete(QUESTION)).content == "ok"
    assert [body.get("reasoning_effort") for body in strict.requests] == ["minimal", None, None]
    assert "o3-mini refused MARSHO_REASONING_EFFORT=minimal" in status_text(T, client.status())


async def test_marsho_model_quirks_effort_field_chooses_how_a_model_is_told(strict: FakeOpenAI) -> None:
    client = llm_client(strict, model="my-thinker", reasoning_effort="low",
                        quirks={"my-*": {"effort_field": "enable_thinking"}})
    await client.complete(QUESTION)
    assert strict.requests[0]["enable_thinking"] is True and "reasoning_effort" not in strict.requests[0]


async def test_a_streamed_answer_offered_tools_is_told_once_its_first_paragraph_is_done(
    fake: FakeOpenAI,
) -> None:
    told = Told()
    fake.push(text("The first paragraph.\n\nThe second one, a little longer."))
    completion = await llm_client(fake).complete(QUESTION, WEATHER_TOOL, on_text=told)
    assert len(told.pieces) > 1 and told.pieces[0].startswith("The first paragraph.\n\n")
    assert told.text == completion.content


class Bill:
    """A meter that keeps what it is told."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def hold(self, request: Any) -> None:
        return None

    def release(self, number: Any) -> None:
        pass

    def record(self, model: str, endpoint: str, usage: Any, **said: Any) -> None:
        self.records.append({"usage": usage, **said})


async def test_a_stream_without_usage_is_estimated_with_its_reasoning(fake: FakeOpenAI) -> None:
    bill = Bill()
    client = llm_client(fake, stream="true")
    client.meter = bill  # type: ignore[assignment]
    fake.push(with_usage(text("Four.", reasoning="two and two make four"), None))
    await client.complete(QUESTION)
    [record] = bill.records
    assert record["usage"] is None  # the meter estimates it, reasoning included
    assert "two and two make four" in record["content"] and "Four." in record["content"]


async def test_server_events_are_read_whatever_the_pieces_they_come_in() -> None:
    from nonebot_plugin_marsho.agent.model.stream import server_events

    async def pieces() -> Any:
        for piece in (b": a comment\r", b"\ndata: {\"a\":", b" 1}\r\n\r", b"\ndata: line one\r", b"\ndata: two\n\n",
                      b"event: ping\ndata: [DONE]"):
            yield piece

    assert [event async for event in server_events(pieces())] == ['{"a": 1}', "line one\ntwo", "[DONE]"]
