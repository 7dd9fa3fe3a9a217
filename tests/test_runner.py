"""ToolRunner: a batch runs at once, results in call order, every failure a result to read."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pydantic
import pytest

from nonebot_plugin_marsho.tools import Tool, ToolCall, Toolkit, ToolResult, ToolRunner, Toolset

CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
DELAY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
}


def make_tool(
    name: str, func: Callable[..., Any], parameters: dict[str, Any] | None = None
) -> Tool:
    schema = parameters or NO_PARAMETERS
    return Tool(f"kit__{name}", f"The {name} tool", schema, func, toolkit="kit")


def make_toolset(*tools: Tool) -> Toolset:
    toolset = Toolset()
    toolset.add(Toolkit("kit", Path("kit"), list(tools)))
    return toolset


def call(name: str, arguments: Any = "{}", call_id: str | None = None) -> ToolCall:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(call_id or f"call_{name}", f"kit__{name}", arguments)


@pytest.fixture
def make_runner() -> Iterator[Callable[..., ToolRunner]]:
    """ToolRunner(Toolset(tools), **options); their worker threads are stopped after the test."""
    runners: list[ToolRunner] = []

    def make(*tools: Tool, **options: Any) -> ToolRunner:
        runner = ToolRunner(make_toolset(*tools), **options)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.close()


def run_on_own_loop(batch: Callable[[], Coroutine[Any, Any, list[ToolResult]]]) -> list[ToolResult]:
    """Run a batch on a private event loop in another thread, so nothing can break pytest's loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, batch()).result(timeout=10)


async def async_sleeper(seconds: float = 0.5, label: str = "") -> str:
    await asyncio.sleep(seconds)
    return label or f"slept {seconds}"


def sync_sleeper(seconds: float = 0.5, label: str = "") -> str:
    time.sleep(seconds)
    return label or f"slept {seconds}"


async def say_fine() -> str:
    return "fine"


# --- running at the same time ---------------------------------------------------------------------


async def test_three_async_tools_run_in_parallel(make_runner: Callable[..., ToolRunner]) -> None:
    arrived = 0
    all_in = asyncio.Event()

    async def meet(seconds: float = 0.5, label: str = "") -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 3:
            all_in.set()
        # one after another, the first would wait alone until the runner's timeout
        await all_in.wait()
        return "met"

    runner = make_runner(make_tool("sleep", meet, DELAY_SCHEMA), timeout=30)
    calls = [call("sleep", {"seconds": 0.5}, f"call_{i}") for i in range(3)]

    results = await runner.run(calls)

    assert [r.status for r in results] == ["ok"] * 3, "the three calls ran one after another"


async def test_three_sync_tools_run_in_parallel_in_worker_threads(
    make_runner: Callable[..., ToolRunner],
) -> None:
    threads: list[threading.Thread] = []
    all_in = threading.Barrier(3, timeout=20)  # one after another, the first would wait alone

    def blocking_sleeper(seconds: float) -> str:
        threads.append(threading.current_thread())
        try:
            all_in.wait()
        except threading.BrokenBarrierError:
            return "ran one after another"
        return "done"

    runner = make_runner(make_tool("sleep", blocking_sleeper, DELAY_SCHEMA), timeout=30)
    calls = [call("sleep", {"seconds": 0.5}, f"call_{i}") for i in range(3)]

    results = await runner.run(calls)

    assert [r.content for r in results] == ["done"] * 3
    assert threading.main_thread() not in threads
    assert len(set(threads)) == 3


async def test_event_loop_keeps_ticking_while_a_sync_tool_sleeps(
    make_runner: Callable[..., ToolRunner],
) -> None:
    ticks: list[float] = []
    ticked = threading.Event()

    def sleeps_until_the_loop_ticked(seconds: float) -> str:
        # blocks its thread until the loop has ticked 5 times since it began (20 s at most)
        began = len(ticks)
        while len(ticks) < began + 5 and time.perf_counter() - started < 20:
            time.sleep(0.01)
        ticked.set()
        return f"the loop ticked {len(ticks) - began} times"

    runner = make_runner(make_tool("sleep", sleeps_until_the_loop_ticked, DELAY_SCHEMA), timeout=30)

    async def ticker() -> None:
        while not ticked.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.02)

    ticking = asyncio.create_task(ticker())
    try:
        started = time.perf_counter()
        [result] = await runner.run([call("sleep", {"seconds": 0.5})])
    finally:
        ticking.cancel()

    assert result.ok
    assert result.content == "the loop ticked 5 times", f"{result.content} while the tool slept"


async def test_results_keep_call_order_when_later_calls_finish_first(
    make_runner: Callable[..., ToolRunner],
) -> None:
    finished: list[str] = []

    async def sleeper(seconds: float, label: str) -> str:
        await asyncio.sleep(seconds)
        finished.append(label)
        return label

    runner = make_runner(make_tool("sleep", sleeper, DELAY_SCHEMA))
    calls = [
        call("sleep", {"seconds": 0.3, "label": "slow"}, "call_1"),
        call("sleep", {"seconds": 0.15, "label": "medium"}, "call_2"),
        call("sleep", {"seconds": 0.0, "label": "quick"}, "call_3"),
    ]

    results = await runner.run(calls)

    assert finished == ["quick", "medium", "slow"]
    assert [r.call_id for r in results] == ["call_1", "call_2", "call_3"]
    assert [r.content for r in results] == ["slow", "medium", "quick"]
    assert [r.to_message()["tool_call_id"] for r in results] == ["call_1", "call_2", "call_3"]


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "sync"])
async def test_max_parallel_bounds_how_many_run_at_once(
    make_runner: Callable[..., ToolRunner], blocking: bool
) -> None:
    lock = threading.Lock()
    running = peak = 0

    def enter() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)

    def leave() -> None:
        nonlocal running
        with lock:
            running -= 1

    async def async_tool() -> str:
        enter()
        await asyncio.sleep(0.1)
        leave()
        return "ok"

    def sync_tool() -> str:
        enter()
        time.sleep(0.1)
        leave()
        return "ok"

    runner = make_runner(make_tool("work", sync_tool if blocking else async_tool), max_parallel=2)

    results = await runner.run([call("work", "{}", f"call_{i}") for i in range(6)])

    assert [r.status for r in results] == ["ok"] * 6
    assert peak == 2


# --- time limits ----------------------------------------------------------------------------------


async def test_a_tool_over_the_timeout_says_so_and_the_batch_goes_on(
    make_runner: Callable[..., ToolRunner],
) -> None:
    runner = make_runner(
        make_tool("sleep", async_sleeper, DELAY_SCHEMA), make_tool("fine", say_fine), timeout=0.3
    )

    started = time.perf_counter()
    slow, fine = await runner.run([call("sleep", {"seconds": 60}), call("fine")])
    elapsed = time.perf_counter() - started

    assert slow.status == "timeout"
    assert "kit__sleep" in slow.content
    assert "0.3 s" in slow.content
    assert fine.ok and fine.content == "fine"
    assert elapsed < 30, f"the batch waited {elapsed:.2f} s for a tool limited to 0.3 s"


async def test_a_slow_sync_tool_times_out_without_holding_the_batch(
    make_runner: Callable[..., ToolRunner],
) -> None:
    runner = make_runner(
        make_tool("sleep", sync_sleeper, DELAY_SCHEMA), make_tool("fine", say_fine), timeout=0.2
    )

    started = time.perf_counter()
    slow, fine = await runner.run([call("sleep", {"seconds": 5}), call("fine")])
    elapsed = time.perf_counter() - started

    assert slow.status == "timeout"
    assert "0.2 s" in slow.content
    assert fine.ok
    assert elapsed < 4  # not the 5 s the thread goes on sleeping


async def test_a_tool_raising_timeout_error_itself_is_an_error_not_a_timeout(
    make_runner: Callable[..., ToolRunner],
) -> None:
    # socket.timeout is TimeoutError, which is asyncio.TimeoutError since Python 3.11
    async def upstream() -> str:
        raise TimeoutError("the weather service did not answer in 2 s")

    runner = make_runner(make_tool("upstream", upstream), timeout=30)

    [result] = await runner.run([call("upstream")])

    assert result.status == "error", result.content
    assert "TimeoutError" in result.content
    assert "the weather service did not answer in 2 s" in result.content
    assert "30 s" not in result.content


# --- exceptions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "sync"])
async def test_an_exception_names_its_type_and_message_and_the_batch_goes_on(
    make_runner: Callable[..., ToolRunner], blocking: bool
) -> None:
    def failing_sync(city: str) -> str:
        raise ValueError(f"no such city: {city}")

    async def failing_async(city: str) -> str:
        raise ValueError(f"no such city: {city}")

    runner = make_runner(
        make_tool("weather", failing_sync if blocking else failing_async, CITY_SCHEMA),
        make_tool("fine", say_fine),
    )

    failed, fine = await runner.run([call("weather", {"city": "Atlantis"}), call("fine")])

    assert failed.status == "error"
    assert "kit__weather" in failed.content
    assert "ValueError" in failed.content
    assert "no such city: Atlantis" in failed.content
    assert fine.ok and fine.content == "fine"


async def test_an_exception_whose_str_raises_still_gives_an_error_result(
    make_runner: Callable[..., ToolRunner],
) -> None:
    class UnprintableError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("__str__ is broken too")

    async def unprintable() -> str:
        raise UnprintableError

    runner = make_runner(make_tool("unprintable", unprintable), make_tool("fine", say_fine))

    failed, fine = await runner.run([call("unprintable"), call("fine")])

    assert failed.status == "error"
    assert "UnprintableError" in failed.content, failed.content
    assert fine.ok


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "sync"])
@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_a_tool_raising_system_exit_or_keyboard_interrupt_does_not_stop_the_bot(
    make_runner: Callable[..., ToolRunner], raised: type[BaseException], blocking: bool
) -> None:
    # A tool's own `sys.exit()` must not take the bot down (the loader guards imports the same way).
    def quit_sync() -> str:
        raise raised(3)

    async def quit_async() -> str:
        raise raised(3)

    runner = make_runner(
        make_tool("quit", quit_sync if blocking else quit_async), make_tool("fine", say_fine)
    )

    try:
        quitter, fine = run_on_own_loop(lambda: runner.run([call("quit"), call("fine")]))
    except BaseException as error:  # noqa: BLE001 - what escaped is the finding
        pytest.fail(f"{error!r} escaped the runner and stopped the event loop")

    assert quitter.status == "error"
    assert raised.__name__ in quitter.content
    assert fine.ok


def test_a_tool_raising_cancelled_error_itself_does_not_cancel_the_batch(
    make_runner: Callable[..., ToolRunner],
) -> None:
    async def confused() -> str:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("an inner task was cancelled")

    async def slower() -> str:
        await asyncio.sleep(0.05)
        return "fine"

    runner = make_runner(make_tool("confused", confused), make_tool("slower", slower))

    try:
        confused_result, fine = run_on_own_loop(
            lambda: runner.run([call("confused"), call("slower")])
        )
    except BaseException as error:  # noqa: BLE001 - what escaped is the finding
        pytest.fail(f"{error!r} escaped the runner; the other results were lost")

    assert confused_result.status == "error"
    assert "CancelledError" in confused_result.content
    assert fine.ok


async def test_cancelling_the_batch_from_outside_still_cancels_it(
    make_runner: Callable[..., ToolRunner],
) -> None:
    runner = make_runner(make_tool("sleep", async_sleeper, DELAY_SCHEMA))

    batch = asyncio.create_task(runner.run([call("sleep", {"seconds": 5})]))
    await asyncio.sleep(0.05)
    batch.cancel()

    with pytest.raises(asyncio.CancelledError):
        await batch


# --- what the model sent --------------------------------------------------------------------------


async def test_unknown_tool_name_lists_the_available_tools(
    make_runner: Callable[..., ToolRunner],
) -> None:
    runner = make_runner(make_tool("fine", say_fine), make_tool("weather", say_fine))

    [result] = await runner.run([ToolCall("call_1", "kit__wether", "{}")])

    assert result.status == "unknown_tool"
    assert result.call_id == "call_1"
    assert "'kit__wether'" in result.content
    assert "kit__fine" in result.content and "kit__weather" in result.content


async def test_arguments_that_are_not_json_give_the_parse_error_and_the_schema(
    make_runner: Callable[..., ToolRunner],
) -> None:
    runner = make_runner(make_tool("weather", async_sleeper, CITY_SCHEMA))

    [result] = await runner.run([call("weather", '{"city": "Paris"')])

    assert result.status == "bad_arguments"
    assert "not valid JSON" in result.content
    assert "line 1, column 17" in result.content
    assert json.dumps(CITY_SCHEMA) in result.content


@pytest.mark.parametrize(
    ("arguments", "kind"), [('["Paris"]', "list"), ('"Paris"', "str"), ("42", "int")]
)
async def test_arguments_that_are_json_but_not_an_object_are_refused(
    make_runner: Callable[..., ToolRunner], arguments: str, kind: str
) -> None:
    runner = make_runner(make_tool("weather", async_sleeper, CITY_SCHEMA))

    [result] = await runner.run([call("weather", arguments)])

    assert result.status == "bad_arguments"
    assert "must be a JSON object" in result.content
    assert kind in result.content
    assert json.dumps(CITY_SCHEMA) in result.content


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"city": 5}, ("'city'", "is not of type 'string'")),
        ({}, ("'city' is a required property",)),
        ({"town": "Paris"}, ("'city' is a required property",)),
    ],
    ids=["wrong-type", "missing-required", "misnamed"],
)
async def test_arguments_failing_the_schema_name_the_field_and_show_the_schema(
    make_runner: Callable[..., ToolRunner], arguments: dict[str, Any], words: tuple[str, ...]
) -> None:
    ran: list[dict[str, Any]] = []

    async def weather(**kwargs: Any) -> str:
        ran.append(kwargs)
        return "sunny"

    runner = make_runner(make_tool("weather", weather, CITY_SCHEMA))

    [result] = await runner.run([call("weather", arguments)])

    assert result.status == "bad_arguments"
    assert ran == []
    for word in words:
        assert word in result.content, result.content
    assert json.dumps(CITY_SCHEMA) in result.content


@pytest.mark.parametrize("arguments", ["", "   ", "\n"], ids=["empty", "spaces", "newline"])
async def test_empty_arguments_are_treated_as_an_empty_object(
    make_runner: Callable[..., ToolRunner], arguments: str
) -> None:
    runner = make_runner(
        make_tool("fine", say_fine), make_tool("weather", async_sleeper, CITY_SCHEMA)
    )

    fine, weather = await runner.run([call("fine", arguments), call("weather", arguments)])

    assert fine.ok and fine.content == "fine"
    assert weather.status == "bad_arguments"
    assert "'city' is a required property" in weather.content


# --- what the tool returned -----------------------------------------------------------------------


@dataclasses.dataclass
class Forecast:
    city: str
    celsius: float


class Reading(pydantic.BaseModel):
    city: str
    humidity: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"city": "Paris", "celsius": 21.5}, {"city": "Paris", "celsius": 21.5}),
        (["Paris", "Lyon"], ["Paris", "Lyon"]),
        (42, 42),
        (None, None),
        (True, True),
        (Forecast("Paris", 21.5), {"city": "Paris", "celsius": 21.5}),
        (Reading(city="Paris", humidity=40), {"city": "Paris", "humidity": 40}),
        (datetime(2024, 5, 1, 12, 30), "2024-05-01T12:30:00"),
        ({"当地": "深圳"}, {"当地": "深圳"}),
    ],
    ids=["dict", "list", "int", "none", "bool", "dataclass", "pydantic", "datetime", "cjk"],
)
async def test_non_string_returns_are_serialized_to_json(
    make_runner: Callable[..., ToolRunner], value: Any, expected: Any
) -> None:
    runner = make_runner(make_tool("value", lambda: value))

    [result] = await runner.run([call("value")])

    assert result.ok
    assert json.loads(result.content) == expected
    assert "\\u" not in result.content  # CJK stays readable to the model


async def test_string_returns_are_passed_through_unquoted(
    make_runner: Callable[..., ToolRunner],
) -> None:
    runner = make_runner(make_tool("text", lambda: 'It is "sunny" in 深圳'))

    [result] = await runner.run([call("text")])

    assert result.content == 'It is "sunny" in 深圳'


@pytest.mark.parametrize(
    ("text", "cap"),
    [("x" * 100_000, 1_000), ("天气晴朗" * 20_000, 1_001), ("a天" * 5_000, 256), ("😀" * 5_000, 257)],
    ids=["ascii", "cjk", "mixed-at-config-minimum", "emoji"],
)
async def test_huge_result_is_capped_in_utf8_bytes_with_a_note(
    make_runner: Callable[..., ToolRunner], text: str, cap: int
) -> None:
    runner = make_runner(make_tool("huge", lambda: text), max_result_bytes=cap)

    [result] = await runner.run([call("huge")])

    assert result.ok
    encoded = result.content.encode("utf-8")  # raises on a half character (lone surrogate)
    assert len(encoded) <= cap
    assert "\ufffd" not in result.content
    head, _, note = result.content.partition("\n…[truncated")
    assert head and text.startswith(head)
    assert str(len(text.encode("utf-8"))) in note


async def test_result_within_the_cap_is_left_whole(
    make_runner: Callable[..., ToolRunner],
) -> None:
    text = "天" * 300  # 900 bytes
    runner = make_runner(make_tool("text", lambda: text), max_result_bytes=900)

    [result] = await runner.run([call("text")])

    assert result.content == text


async def test_sync_function_returning_a_coroutine_is_awaited(
    make_runner: Callable[..., ToolRunner],
) -> None:
    async def later(city: str) -> dict[str, str]:
        await asyncio.sleep(0.01)
        return {"city": city, "sky": "clear"}

    def returns_coroutine(city: str) -> Any:
        return later(city)

    runner = make_runner(make_tool("weather", returns_coroutine, CITY_SCHEMA))

    [result] = await runner.run([call("weather", {"city": "Hangzhou"})])

    assert result.ok
    assert json.loads(result.content) == {"city": "Hangzhou", "sky": "clear"}


async def test_arguments_reach_the_function_as_keywords(
    make_runner: Callable[..., ToolRunner],
) -> None:
    async def weather(city: str) -> str:
        return f"The temperature of {city} is 114514℃。"

    runner = make_runner(make_tool("weather", weather, CITY_SCHEMA))

    [result] = await runner.run([call("weather", {"city": "Shenzhen"})])

    assert result.ok
    assert result.content == "The temperature of Shenzhen is 114514℃。"
    assert result.name == "kit__weather"
    assert result.seconds >= 0
