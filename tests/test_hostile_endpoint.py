"""An endpoint (or a model) that sends too much, nonsense or hostile JSON never breaks a session:
every answer is bounded in bytes, characters and tool calls, every failure is an EndpointError
with a code, and what is stored stays a valid request. Each test drives the real path: LLMClient
over the SDK's aiohttp transport to the fake endpoint on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import LLMClient
from nonebot_plugin_marsho.agent.prompt_mode import ARGUMENTS_PLACEHOLDER, parse_tool_calls
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import Tool, Toolkit, ToolRunner, Toolset
from nonebot_plugin_marsho.tools.model import ToolCall
from tests.conftest import llm_client
from tests.fake_openai import (
    HUGE_HEAD,
    HUGE_TAIL,
    Answer,
    FakeOpenAI,
    error,
    huge_text,
    raw,
    streamed,
    text,
    tool_calls,
)

KEY = "test:group:hostile"
MB = 1024 * 1024
QUESTION = [{"role": "user", "content": "hi"}]

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ANY_DATA = {"type": "object", "properties": {"data": {}}}

ran: list[str] = []


def weather(city: str) -> str:
    ran.append(city)
    return f"{city}: 20 degrees"


def echo(data: Any = None) -> Any:
    return data


def deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def deep_value() -> Any:
    return deep_list(100_000)


def bad_file_name() -> str:
    return "file: " + b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.listdir gives it


def make_toolset() -> Toolset:
    toolset = Toolset()
    toolset.add(Toolkit("kit", path=Path("kit"), tools=[
        Tool("kit__weather", "Weather now", CITY, weather, toolkit="kit"),
        Tool("kit__echo", "Gives its data back", ANY_DATA, echo, toolkit="kit"),
        Tool("kit__deep", "Returns a value nested 100000 deep", {"type": "object", "properties": {}},
             deep_value, toolkit="kit"),
        Tool("kit__bad_name", "Returns a file name that is not UTF-8",
             {"type": "object", "properties": {}}, bad_file_name, toolkit="kit"),
    ]))
    return toolset


@pytest.fixture
async def engines() -> AsyncIterator[list[Engine]]:
    made: list[Engine] = []
    yield made
    for engine in made:
        engine.runner.close()
        await engine.history.close()  # type: ignore[attr-defined]


@pytest.fixture
def make_engine(fake: FakeOpenAI, engines: list[Engine]):
    def make(**llm_options: Any) -> Engine:
        toolset = make_toolset()
        runner = ToolRunner(toolset, timeout=5, max_calls=llm_options.pop("max_calls", 16))
        engine = Engine(llm_client(fake, **llm_options), toolset, SqlStore("sqlite://"), runner,
                        system_prompt="Be brief.", max_tokens=10**7)  # no budget cuts here
        engines.append(engine)
        ran.clear()
        return engine
    return make


async def stored(engine: Engine) -> list[dict[str, Any]]:
    turns = await engine.history.recent_turns(KEY, max_messages=10**6, max_tokens=10**9)
    return [message for turn in turns for message in turn.messages]


def assert_valid_history(messages: list[dict[str, Any]]) -> None:
    """Every tool_call_id answered by exactly one tool message, right after its call."""
    pending: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert pending and message["tool_call_id"] == pending.pop(0), message
        else:
            assert not pending, f"calls left unanswered: {pending[:3]}"
            pending = [call["id"] for call in message.get("tool_calls") or []]
            assert len(set(pending)) == len(pending), "a call id used twice"
    assert not pending


async def failure(client: LLMClient) -> EndpointError:
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    return caught.value


# --- 1. bytes of one response are bounded -----------------------------------------------------


def _status_kb(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def reset_peak_rss() -> int:
    """Reset the process's peak RSS (VmHWM) to its RSS now, and return it in kB."""
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pytest.skip("needs Linux's /proc/self/clear_refs to reset the peak RSS")
    return _status_kb("VmHWM")


async def test_a_50_mb_answer_fails_fast_with_too_large_and_nothing_is_stored(
    fake: FakeOpenAI, make_engine,
) -> None:
    novel = huge_text(50 * MB)  # chunked: no Content-Length to refuse it by
    fake.push(novel)
    engine = make_engine(max_response_bytes=4_000_000)
    with pytest.raises(EndpointError) as caught:
        await engine.chat(KEY, "write me a novel")
    assert caught.value.code == "endpoint.too_large"
    assert caught.value.params["limit"] == 4_000_000
    assert "MARSHO_MAX_RESPONSE_BYTES" in str(caught.value)
    # the bound read, and what the sockets' buffers hold: not the 50 MB
    assert novel.written < 25 * MB, f"{novel.written / MB:.1f} MB sent: the body was not given up at the bound"
    assert await stored(engine) == []
    fake.push(text("next"))
    assert (await engine.chat(KEY, "something short")).text == "next"


async def test_the_peak_memory_of_a_50_mb_answer_stays_far_below_its_size(fake: FakeOpenAI) -> None:
    client = llm_client(fake, max_response_bytes=4_000_000)
    await client.complete(QUESTION)  # the connection pool and the SDK warmed up first
    before = reset_peak_rss()
    fake.push(huge_text(50 * MB))
    try:
        await client.complete(QUESTION)
        code = "none: the whole answer was read"
    except EndpointError as problem:
        code = problem.code
    growth = _status_kb("VmHWM") - before
    print(f"\npeak RSS growth while refusing a 50 MB answer (bound 4 MB): {growth / 1024:.1f} MB")
    assert code == "endpoint.too_large"
    # read whole, the answer took 170-180 MB at its peak (its bytes, their join, the JSON text);
    # in a process of its own, refusing it takes about 4.3 MB (here freed memory may be reused)
    assert growth < 20 * 1024, f"peak RSS grew {growth / 1024:.1f} MB for a 4 MB bound"


async def test_a_body_announced_over_the_bound_is_refused_without_reading_it(fake: FakeOpenAI) -> None:
    novel = huge_text(50 * MB, announce=True)
    fake.push(novel)
    client = llm_client(fake, max_response_bytes=4_000_000)
    assert (await failure(client)).code == "endpoint.too_large"
    assert novel.written < 25 * MB, f"{novel.written / MB:.1f} MB sent: the body was read"
    fake.push(text("still here"))
    assert (await client.complete(QUESTION)).content == "still here"  # the pool recovered


def _gzip_of(parts: Iterable[bytes]) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    return b"".join(packer.compress(part) for part in parts) + packer.flush()


async def test_a_small_gzip_body_that_inflates_past_the_bound_is_refused(fake: FakeOpenAI) -> None:
    block = b"x" * MB
    bomb = _gzip_of([HUGE_HEAD, *([block] * 200), HUGE_TAIL])  # 200 MB of answer
    assert len(bomb) < 400_000
    fake.push(raw(bomb, headers={"Content-Encoding": "gzip"}))
    client = llm_client(fake, max_response_bytes=4_000_000)
    assert (await failure(client)).code == "endpoint.too_large"


async def test_a_gzip_answer_within_the_bound_is_read(fake: FakeOpenAI) -> None:
    body = text("compressed hello").body
    fake.push(raw(_gzip_of([body]), headers={"Content-Encoding": "gzip"}))
    client = llm_client(fake)
    assert (await client.complete(QUESTION)).content == "compressed hello"
    assert fake.requests[0]["_headers"]["accept-encoding"] == "gzip, deflate"


async def test_an_answer_in_an_encoding_not_read_here_is_a_clear_error(fake: FakeOpenAI) -> None:
    fake.push(raw(b"\x00\x01binary", headers={"Content-Encoding": "br"}))
    problem = await failure(llm_client(fake))
    assert problem.code == "endpoint.unreadable" and "br" in str(problem)
    fake.push(raw(b"\x1f\x8bnot really gzip", headers={"Content-Encoding": "gzip"}))
    assert (await failure(llm_client(fake))).code == "endpoint.unreadable"


async def test_an_answer_under_the_bound_is_read_whole(fake: FakeOpenAI) -> None:
    fake.push(huge_text(90_000))
    completion = await llm_client(fake, max_response_bytes=100_000,
                                  max_answer_chars=200_000).complete(QUESTION)
    assert completion.content == "x" * 90_000 and not completion.cut


async def test_an_endless_slow_body_is_given_up_at_the_timeout(fake: FakeOpenAI) -> None:
    def drip() -> Iterator[bytes]:
        yield HUGE_HEAD
        while True:
            time.sleep(0.05)
            yield b"x"

    fake.push(streamed(drip))
    started = time.perf_counter()
    problem = await failure(llm_client(fake, timeout=1))
    assert problem.code == "endpoint.timeout"
    assert time.perf_counter() - started < 15  # the body never ends: given up at the timeout


async def test_an_error_status_with_a_huge_body_is_too_large_not_read_whole(fake: FakeOpenAI) -> None:
    answer = huge_text(50 * MB)
    answer.status = 502
    fake.push(answer)
    assert (await failure(llm_client(fake, max_response_bytes=1_000_000))).code == "endpoint.too_large"


# --- 2. characters of one answer are bounded ----------------------------------------------------


async def test_a_long_answer_is_cut_at_max_answer_chars_and_says_it_was(fake: FakeOpenAI) -> None:
    fake.push(text("é" * 30_000, reasoning="r" * 50_000))
    completion = await llm_client(fake, max_answer_chars=20_000).complete(QUESTION)
    assert completion.content == "é" * 20_000
    assert completion.cut
    assert len(completion.reasoning) <= 20_001  # reasoning is bounded too (with an ellipsis)
    fake.push(text("short"))
    assert not (await llm_client(fake, max_answer_chars=20_000).complete(QUESTION)).cut


async def test_an_answer_cut_for_length_is_stored_cut(fake: FakeOpenAI, make_engine) -> None:
    fake.push(text("<think>" + "t" * 30_000 + "</think>" + "a" * 30_000))
    engine = make_engine(max_answer_chars=1_000)
    reply = await engine.chat(KEY, "long please")
    assert reply.text == "a" * 1_000
    assert len(reply.reasoning) <= 1_001
    assert (await stored(engine))[-1] == {"role": "assistant", "content": "a" * 1_000}


# --- 3. tool calls per response are bounded -----------------------------------------------------


async def test_500_calls_in_one_response_run_16_the_next_are_answered_not_run_and_the_rest_dropped(
    fake: FakeOpenAI, make_engine,
) -> None:
    fake.push(tool_calls(*[("kit__weather", {"city": f"c{i}"}, f"id{i}") for i in range(500)]),
              text("done"))
    engine = make_engine(max_calls=16)
    reply = await engine.chat(KEY, "weather everywhere")
    assert reply.text == "done"
    assert sorted(ran) == sorted(f"c{i}" for i in range(16))
    sent = fake.requests[1]["messages"]
    results = [m for m in sent if m["role"] == "tool"]
    # 4 x 16 calls are kept (engine.KEPT_CALLS_FACTOR): 16 run, 48 answered "not run"; the
    # other 436 are dropped from the assistant message, so history never holds thousands
    kept = [f"id{i}" for i in range(64)]
    assert [m["tool_call_id"] for m in results] == kept
    (asked,) = [m for m in sent if m["role"] == "assistant" and m.get("tool_calls")]
    assert [call["id"] for call in asked["tool_calls"]] == kept
    not_run = [m for m in results if "not run" in m["content"]]
    assert len(not_run) == 48
    assert all(m["tool_call_id"] in {f"id{i}" for i in range(16, 64)} for m in not_run)
    assert "at most 16 tool calls per response (MARSHO_MAX_TOOL_CALLS)" in not_run[0]["content"]
    assert_valid_history(await stored(engine))
    fake.push(text("next turn fine"))
    assert (await engine.chat(KEY, "thanks")).text == "next turn fine"
    assert_valid_history(fake.requests[-1]["messages"][1:])


# --- 4. deep or hostile JSON never breaks a session -----------------------------------------------

HOSTILE_ARGUMENTS = {
    "a float out of range": '{"city": 1e999999}',
    "NaN": '{"city": NaN}',
    "Infinity": '{"city": -Infinity}',
    "an int of 100000 digits": '{"city": ' + "9" * 100_000 + "}",
    "nested past the stack": '{"city": ' + "[" * 5_000 + "]" * 5_000 + "}",
    "nested just under it": '{"city": ' + "[" * 990 + "]" * 990 + "}",
    "broken": '{"city": "Oslo"',
}


@pytest.mark.parametrize("arguments", HOSTILE_ARGUMENTS.values(), ids=HOSTILE_ARGUMENTS.keys())
async def test_hostile_tool_arguments_get_the_bad_json_answer_and_the_session_goes_on(
    fake: FakeOpenAI, make_engine, arguments: str,
) -> None:
    fake.push(tool_calls(("kit__weather", arguments, "c1")), text("sorry"), text("next"))
    engine = make_engine()
    assert (await engine.chat(KEY, "weather?")).text == "sorry"
    result = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert result["content"].startswith(("Error: the arguments for kit__weather are not valid JSON",
                                         "Error: invalid arguments for kit__weather"))
    assert "schema" in result["content"] and ran == []
    assert_valid_history(await stored(engine))
    assert (await engine.chat(KEY, "again")).text == "next"


async def test_a_lone_surrogate_in_arguments_and_results_is_stored_and_sent(
    fake: FakeOpenAI, make_engine,
) -> None:
    fake.push(tool_calls(("kit__weather", '{"city": "Os\\ud800lo"}', "c1"),
                         ("kit__bad_name", "{}", "c2")),
              raw(text("ok @ then").body.replace(b"@", b"\\ud800")), text("next"))
    engine = make_engine()
    reply = await engine.chat(KEY, "weather?")
    assert reply.text == "ok \ufffd then"
    results = [m["content"] for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert results[0] == "Os\ufffdlo: 20 degrees" and results[1] == "file: caf\ufffd.txt"
    assert_valid_history(await stored(engine))
    assert (await engine.chat(KEY, "again")).text == "next"


async def test_a_tool_result_nested_past_the_stack_is_an_error_result(
    fake: FakeOpenAI, make_engine,
) -> None:
    fake.push(tool_calls(("kit__deep", "{}", "c1")), text("it failed"))
    engine = make_engine()
    assert (await engine.chat(KEY, "go")).text == "it failed"
    result = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert result["content"].startswith("Error: kit__deep returned a value that cannot be written as JSON")


async def test_call_arguments_sent_as_a_deep_object_become_a_result_not_a_crash(
    fake: FakeOpenAI, make_engine,
) -> None:
    deep = "[" * 900 + "]" * 900
    body = json.loads(tool_calls(("kit__echo", "{}", "c1")).body)
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "@"
    text_body = json.dumps(body).replace('"@"', '{"data": ' + deep + "}")
    fake.push(raw(text_body.encode()), text("done"))
    engine = make_engine()
    assert (await engine.chat(KEY, "go")).text == "done"
    assert_valid_history(await stored(engine))


async def test_duplicate_call_ids_are_made_unique(fake: FakeOpenAI, make_engine) -> None:
    fake.push(tool_calls(("kit__weather", {"city": "a"}, "x"), ("kit__weather", {"city": "b"}, "x"),
                         ("kit__weather", {"city": "c"}, "x_1")), text("done"))
    engine = make_engine()
    await engine.chat(KEY, "go")
    ids = [call["id"] for call in fake.requests[1]["messages"][2]["tool_calls"]]
    assert len(set(ids)) == 3 and ids[0] == "x"
    assert_valid_history(await stored(engine))


@pytest.mark.parametrize(("body", "code"), [
    (b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "endpoint.bad_json"),
    (b'{"choices": [], "n": ' + b"9" * 100_000 + b"}", "endpoint.bad_json"),
    (b'{"choices": [{"message": {"content": "ok"', "endpoint.bad_json"),
    (b"[1, 2, 3]", "endpoint.not_completion"),
])
async def test_an_unreadable_json_body_is_a_clear_endpoint_error(
    fake: FakeOpenAI, body: bytes, code: str,
) -> None:
    fake.push(raw(body))
    assert (await failure(llm_client(fake))).code == code


async def test_odd_but_readable_fields_are_read_as_text(fake: FakeOpenAI) -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "part one, "},
                                                {"type": "text", "text": "part two"}],
               "reasoning_content": deep_list(10),
               "tool_calls": [{"id": deep_list(5), "function": {"name": 5, "arguments": "{}"}}]}
    body = {"choices": [{"message": message}], "usage": {"n": 1e308 * 10}}
    fake.push(raw(json.dumps(body).encode()))
    completion = await llm_client(fake).complete(QUESTION)
    assert completion.content == "part one, part two"
    assert completion.reasoning == "" and completion.tool_calls == []


async def test_a_stored_call_too_deep_to_rewrite_is_a_placeholder_in_prompt_mode(
    fake: FakeOpenAI, make_engine,
) -> None:
    deep = "[" * 990 + "]" * 990
    fake.push(tool_calls(("kit__weather", deep, "c1")), text("sorry, bad call"))
    engine = make_engine()
    await engine.chat(KEY, "weather?")
    assert_valid_history(await stored(engine))
    # the endpoint stops taking tools: the stored history is rewritten for prompt mode
    fake.push(error(400, "This model does not support tools."), text("prompt mode works"),
              text("and still does"))
    assert (await engine.chat(KEY, "and now?")).text == "prompt mode works"
    assert engine.llm.tool_mode == "prompt"
    sent = json.dumps(fake.requests[3]["messages"], ensure_ascii=False)
    assert ARGUMENTS_PLACEHOLDER in sent.replace('\\"', '"') and deep not in sent
    assert (await engine.chat(KEY, "once more")).text == "and still does"


def test_prompt_mode_parsing_stays_fast_on_hostile_text() -> None:
    for hostile in ["```x\n" * 20_000, "[" * 100_000, '["' * 50_000, "{" * 100_000,
                    '[{"name": "a", "arguments": ' + "[" * 5_000 + "]" * 5_000 + "}]"]:
        started = time.perf_counter()
        calls, rest = parse_tool_calls(hostile)
        # about 0.2 s at most on a busy machine; a quadratic parse would take minutes
        assert time.perf_counter() - started < 5, hostile[:20]
        assert calls == [] and rest == hostile


def test_prompt_mode_calls_with_hostile_arguments_are_calls_the_runner_refuses() -> None:
    calls, _ = parse_tool_calls('[{"name": "kit__weather", "arguments": {"city": 1e999999}}]')
    assert [call.name for call in calls] == ["kit__weather"]
    assert calls[0].arguments == '{"city": Infinity}'  # and loads_json refuses Infinity
    calls, _ = parse_tool_calls('[{"name": "kit__weather", "arguments": {"city": "\\ud800"}}]')
    assert calls[0].arguments == '{"city": "\\ud800"}'  # escaped: storable and sendable


async def test_the_runner_answers_the_prompt_mode_infinity(make_engine) -> None:
    engine = make_engine()
    result = await engine.runner.run_one(ToolCall("c", "kit__weather", '{"city": Infinity}'))
    assert result.status == "bad_arguments" and "Infinity is not a JSON number" in result.content


# --- 5. empty and non-UTF-8 bodies, proxies, errors ----------------------------------------------


@pytest.mark.parametrize(("answer", "code", "words"), [
    (raw(b""), "endpoint.empty_body", "empty body"),
    (raw(b"  \r\n "), "endpoint.empty_body", "empty body"),
    (raw(b'{"choices": "\xff\xfe"}'), "endpoint.not_utf8", "position 13"),
    (raw(b"<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
     "endpoint.not_completion", "502 Bad Gateway"),
    (raw(b'{"error": {"message": "quota exceeded", "type": "insufficient_quota"}}'),
     "endpoint.no_choices", "quota exceeded"),
    (raw(b"<html>" + b"\n    gateway trouble" * 10_000 + b"</html>", status=502, content_type="text/html"),
     "endpoint.5xx", "gateway trouble"),
    (raw(b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", status=400), "endpoint.4xx", "[[["),
    (raw(b"", status=503), "endpoint.5xx", "Service Unavailable"),
    (raw(b"moved", status=302), "endpoint.4xx", "302"),
])
async def test_bodies_that_are_no_completion_are_endpoint_errors_with_clear_codes(
    fake: FakeOpenAI, answer: Answer, code: str, words: str,
) -> None:
    fake.push(answer)
    problem = await failure(llm_client(fake))
    assert problem.code == code
    assert words in str(problem)
    assert len(str(problem)) < 600  # the endpoint's own words are cut short


async def test_an_endpoint_echoing_the_api_key_does_not_put_it_in_the_error(fake: FakeOpenAI) -> None:
    key = "sk-live-very-secret-0042"
    fake.responder = lambda body: error(401, f"Incorrect API key provided: {body['_headers']['authorization']}")
    problem = await failure(llm_client(fake, api_key=key))
    assert problem.code == "endpoint.401"
    assert key not in str(problem) and key not in repr(problem.params)
    fake.responder = lambda body: raw(f"<html>bad {body['_headers']['authorization']}</html>".encode())
    problem = await failure(llm_client(fake, api_key=key))
    assert key not in str(problem) and key not in repr(problem.params)


async def test_a_lone_surrogate_in_the_question_does_not_fail_the_request(fake: FakeOpenAI) -> None:
    fake.push(text("fine"))
    completion = await llm_client(fake).complete([{"role": "user", "content": "hi \ud800"}])
    assert completion.content == "fine"
    assert fake.requests[0]["messages"][0]["content"] == "hi \ufffd"


# --- 6. a fair gate for requests in flight ----------------------------------------------------------


class OneAtATime:
    """A gate of one slot that records how many requests were inside it at once."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.inside = 0
        self.most = 0
        self.entered = 0

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.lock:
            self.inside += 1
            self.entered += 1
            self.most = max(self.most, self.inside)
            try:
                yield
            finally:
                self.inside -= 1


async def test_each_request_runs_inside_a_slot_and_the_wait_is_not_timed(fake: FakeOpenAI) -> None:
    gate = OneAtATime()
    client = llm_client(fake, timeout=0.6, gate=gate)
    fake.latency = 0.25  # four requests one after another: 1 s in all, the timeout 0.6 s each
    started = time.perf_counter()
    answers = await asyncio.gather(*(client.complete(QUESTION) for _ in range(4)))
    assert [a.content for a in answers] == ["ok"] * 4
    assert time.perf_counter() - started >= 1.0
    assert gate.entered == 4 and gate.most == 1


async def test_a_request_still_times_out_once_it_has_its_slot(fake: FakeOpenAI) -> None:
    gate = OneAtATime()
    fake.push(text("late", delay=1.5))
    with pytest.raises(EndpointError, match="did not answer within 0.5 s"):
        await llm_client(fake, timeout=0.5, gate=gate).complete(QUESTION)
    assert gate.inside == 0  # the slot was given back


async def test_the_prompt_mode_retry_takes_a_slot_of_its_own(fake: FakeOpenAI) -> None:
    gate = OneAtATime()
    fake.push(error(400, "tools are not supported"), text("plain"))
    client = llm_client(fake, gate=gate)
    tools = make_toolset().schemas(None)
    assert (await client.complete(QUESTION, tools)).content == "plain"
    assert gate.entered == 2
