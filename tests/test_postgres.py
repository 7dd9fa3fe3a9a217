"""The store on a real PostgreSQL server, and one turn at a time per session across engines and
across OS processes (issue 4, items 1, 2 and 7).

One throw-away server (tests/postgres_server.py) serves the module, with a new database per test.
Without PostgreSQL the module is skipped with the reason, unless MARSHO_REQUIRE_POSTGRES=1 (set
by `.ci/run`): then it fails.

The cross-process tests run `_worker` in child processes (`python -c`): each drives N turns of
one session through Engine + SqlStore + LLMClient against the FakeOpenAI of this process. Every
turn is four messages (question, tool call, tool result, answer: two requests), so a turn whose
messages interleaved with another's, or two turns that ran at once, show in what was stored and
in what the fake received.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import LLMClient
from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.store.sql import SCHEMA_VERSION, SqlStore
from nonebot_plugin_marsho.tools import Tool, Toolkit, ToolRunner, Toolset
from tests.fake_openai import Answer, FakeOpenAI, text, tool_calls
from tests.postgres_server import PostgresServer, Unavailable

REPO_ROOT = Path(__file__).resolve().parent.parent
KEY = "onebot:group:4242"
LATENCY = 0.05
"""Seconds the fake takes per request: long enough for two unlocked turns to overlap."""

_databases = itertools.count(1)


# the server ------------------------------------------------------------------------------------


def start_postgres() -> PostgresServer:
    """A started server; skips the calling module when PostgreSQL cannot run here, or fails
    when MARSHO_REQUIRE_POSTGRES=1 (CI must not skip these tests silently)."""
    try:
        return PostgresServer().start()
    except Unavailable as error:
        if os.environ.get("MARSHO_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"MARSHO_REQUIRE_POSTGRES=1 but PostgreSQL cannot run: {error}", pytrace=False)
        pytest.skip(f"PostgreSQL unavailable: {error}")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture
def pg_url(postgres: PostgresServer) -> str:
    """A new, empty database for this test."""
    return postgres.create_database(f"marsho_{os.getpid()}_{next(_databases)}")


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    """A fake endpoint of its own, answering every turn with a tool call, then a text."""
    fake = FakeOpenAI(responder=tool_then_text, latency=LATENCY).start()
    yield fake
    fake.stop()


# one kind of turn: question → echo tool call → tool result → answer ---------------------------


def echo(text: str) -> str:
    return f"echo: {text}"


def echo_toolset() -> Toolset:
    toolset = Toolset()
    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    toolset.add(Toolkit("t", path=None, tools=[  # type: ignore[arg-type]
        Tool("t__echo", "Echo the text", schema, echo, toolkit="t"),
    ]))
    return toolset


def current_question(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def tool_then_text(body: dict[str, Any]) -> Answer:
    """The fake's script: a user question gets an echo call; the tool's result gets the answer."""
    last = body["messages"][-1]
    if last["role"] == "user":
        return tool_calls(("t__echo", {"text": last["content"]}))
    return text(f"answer to {current_question(body)}")


def make_engine(store: SqlStore, base_url: str) -> Engine:
    """An engine with no system prompt and bounds nothing in these tests reaches."""
    toolset = echo_toolset()
    llm = LLMClient(base_url=base_url, api_key="k", model="fake-model", timeout=30)
    return Engine(llm, toolset, store, ToolRunner(toolset, timeout=10),
                  system_prompt="", max_history=100_000, max_tokens=10**8)


async def close_engine(engine: Engine) -> None:
    await engine.llm.close()
    engine.runner.close()
    if isinstance(engine.history, SqlStore):
        await engine.history.close()


# the worker process ----------------------------------------------------------------------------


def _worker(url: str, base_url: str, key: str, label: str, turns: int) -> None:
    """Run in a child process: say `ready`, wait for a line on stdin, then run `turns` turns
    of session `key` with questions `label-0`, `label-1`..., printing `turn <question>` after each."""

    async def main() -> None:
        store = SqlStore(url)
        await store.start()
        engine = make_engine(store, base_url)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for index in range(turns):
            await engine.chat(key, f"{label}-{index}")
            print(f"turn {label}-{index}", flush=True)
        await close_engine(engine)
        print("done", flush=True)

    asyncio.run(main())


# bot processes that start, take turns and are killed beside a PostgreSQL server
pytestmark = pytest.mark.timeout(300)


class Worker:
    """`_worker` in a child process."""

    def __init__(self, tmp_path: Path, url: str, base_url: str, key: str, label: str, turns: int):
        self.label = label
        self.log_path = tmp_path / f"worker-{label}.log"
        code = ("import sys; from tests.test_postgres import _worker; "
                "_worker(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, url, base_url, key, label, str(turns)],
                cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, text=True,
            )
        self.lines: list[str] = []

    def _read_until(self, wanted: str, timeout: float) -> None:
        assert self.process.stdout is not None
        result: list[bool] = []

        def read() -> None:
            for line in self.process.stdout:  # type: ignore[union-attr]
                self.lines.append(line.strip())
                if line.strip() == wanted:
                    result.append(True)
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            raise AssertionError(f"worker {self.label} did not print {wanted!r} within {timeout:g} s "
                                 f"(exit code {self.process.poll()}):\n{self.output()}")

    def wait_ready(self, timeout: float = 60) -> None:
        self._read_until("ready", timeout)

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def wait_done(self, timeout: float = 90) -> None:
        self._read_until("done", timeout)
        assert self.process.wait(60) == 0, self.output()

    def output(self) -> str:
        return "stdout: " + " | ".join(self.lines) + "\nstderr:\n" + self.log_path.read_text(
            errors="replace")[-4000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(60)


# checks ----------------------------------------------------------------------------------------


def check_one_turn_at_a_time(
    requests: list[dict[str, Any]], exported: list[dict[str, Any]], questions: set[str]
) -> None:
    """Every question answered once, each turn's messages stored together and complete, and
    every request carrying exactly all the turns stored before it."""
    turn_ids = [row["turn"] for row in exported]
    runs = [turn_id for index, turn_id in enumerate(turn_ids) if index == 0 or turn_ids[index - 1] != turn_id]
    assert len(runs) == len(set(runs)), f"a turn's messages are not contiguous: {turn_ids}"
    turns = [[row["message"] for row in exported if row["turn"] == turn_id] for turn_id in runs]
    stored_questions = [turn[0]["content"] for turn in turns]
    assert sorted(stored_questions) == sorted(questions), "a turn was lost or stored twice"
    for turn in turns:
        question = turn[0]["content"]
        assert [m["role"] for m in turn] == ["user", "assistant", "tool", "assistant"], turn
        assert json.loads(turn[1]["tool_calls"][0]["function"]["arguments"]) == {"text": question}
        assert turn[2]["tool_call_id"] == turn[1]["tool_calls"][0]["id"]
        assert turn[2]["content"] == f"echo: {question}"
        assert turn[3]["content"] == f"answer to {question}"
    # each process ran its own questions in order
    for label in {q.rsplit("-", 1)[0] for q in questions}:
        own = [q for q in stored_questions if q.rsplit("-", 1)[0] == label]
        assert own == sorted(own, key=lambda q: int(q.rsplit("-", 1)[1])), own

    # two requests per turn, in the order the turns were stored, each with all earlier turns
    assert len(requests) == 2 * len(turns), [current_question(r) for r in requests]
    for index, turn in enumerate(turns):
        earlier = [m for previous in turns[:index] for m in previous]
        first, second = requests[2 * index], requests[2 * index + 1]
        assert first["messages"] == [*earlier, turn[0]], (
            f"request for {turn[0]['content']} (turn {index}) did not carry exactly the "
            f"{index} earlier turns: {[m.get('content') for m in first['messages']]}"
        )
        assert second["messages"] == [*earlier, *turn[:3]]


# the store on PostgreSQL -----------------------------------------------------------------------


TOOL_TURN = [
    {"role": "user", "content": "weather in Shenzhen?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "wx__now", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "21°C ☀"},
    {"role": "assistant", "content": "21°C and sunny, 出去玩吧"},
]


async def test_store_works_on_postgres(pg_url: str) -> None:
    store = SqlStore(pg_url)
    try:
        assert store.dialect == "postgresql" and store.shared
        await store.start()
        await store.start()  # a second start (another bot process) finds the tables
        assert await store.get_setting("schema_version") == str(SCHEMA_VERSION)
        assert await store.recent_turns(KEY, max_messages=100, max_tokens=10**6) == []
        assert await store.last_turn(KEY) is None

        await store.append_turn(KEY, TOOL_TURN, [5, 7, 3, 9])
        await store.append_turn(KEY, [{"role": "user", "content": "and tomorrow?"},
                                      {"role": "assistant", "content": "rain"}], [4, 2])
        await store.append_turn("onebot:group:other", [{"role": "user", "content": "x"}], [1])

        turns = await store.recent_turns(KEY, max_messages=100, max_tokens=10**6)
        assert [t.messages for t in turns] == [TOOL_TURN, [
            {"role": "user", "content": "and tomorrow?"}, {"role": "assistant", "content": "rain"}]]
        assert [t.tokens for t in turns] == [[5, 7, 3, 9], [4, 2]]
        # the bounds drop whole turns, oldest first
        assert [len(t.messages) for t in
                await store.recent_turns(KEY, max_messages=5, max_tokens=10**6)] == [2]
        assert [len(t.messages) for t in
                await store.recent_turns(KEY, max_messages=100, max_tokens=20)] == [2]
        assert (await store.last_turn(KEY)).messages[-1]["content"] == "rain"  # type: ignore[union-attr]
        assert await store.stats(KEY) == (2, 6, 30)
        exported = await store.export(KEY)
        assert [row["message"] for row in exported] == [*TOOL_TURN, *turns[1].messages]
        assert len({row["turn"] for row in exported}) == 2

        await store.set_setting("model", "a")
        await store.set_setting("model", "b")
        assert await store.get_setting("model") == "b"

        assert await store.clear(KEY) == 2
        assert await store.stats(KEY) == (0, 0, 0)
        assert await store.stats("onebot:group:other") == (1, 1, 1)  # other sessions stay
    finally:
        await store.close()

    reopened = SqlStore(pg_url)  # what another process (or a restart) sees
    try:
        assert await reopened.stats("onebot:group:other") == (1, 1, 1)
        assert await reopened.get_setting("model") == "b"
    finally:
        await reopened.close()


async def test_a_turn_is_stored_whole_or_not_at_all_on_postgres(pg_url: str) -> None:
    store = SqlStore(pg_url)
    try:
        await store.append_turn(KEY, TOOL_TURN[:1] + TOOL_TURN[-1:], [1, 1])
        # the third row's role is too long for its column: PostgreSQL refuses that row, and
        # the rows before it in the same turn must not stay behind
        broken = [*TOOL_TURN[:2], {"role": "x" * 40, "content": "?"}, TOOL_TURN[3]]
        with pytest.raises(StoreError, match="cannot save the turn"):
            await store.append_turn(KEY, broken, [1, 1, 1, 1])
        assert await store.stats(KEY) == (1, 2, 2)
        await store.append_turn(KEY, TOOL_TURN, [1, 1, 1, 1])  # the store still works
        assert await store.stats(KEY) == (2, 6, 6)
    finally:
        await store.close()


async def test_a_newer_schema_is_refused_on_postgres(pg_url: str) -> None:
    first = SqlStore(pg_url)
    try:
        await first.start()
        async with first.engine.begin() as conn:  # a migration this code does not have
            await conn.execute(sqlalchemy.text("UPDATE marsho_alembic_version SET version_num = '9999'"))
    finally:
        await first.close()
    second = SqlStore(pg_url)
    try:
        with pytest.raises(StoreError, match="newer marsho"):
            await second.start()
    finally:
        await second.close()


async def test_bots_starting_together_on_an_empty_database(pg_url: str) -> None:
    """Several bot processes started at once on a new database all create the tables: none
    may fail (concurrent CREATE TABLE collides in PostgreSQL's catalog without a lock)."""
    stores = [SqlStore(pg_url) for _ in range(3)]
    try:
        results = await asyncio.gather(*(store.start() for store in stores), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert await stores[0].get_setting("schema_version") == str(SCHEMA_VERSION)
    finally:
        for store in stores:
            await store.close()


async def test_an_unreachable_postgres_is_a_store_error(postgres: PostgresServer) -> None:
    store = SqlStore(postgres.url("no_such_database"))
    try:
        with pytest.raises(StoreError, match="no_such_database"):
            await store.start()
    finally:
        await store.close()


# the lock --------------------------------------------------------------------------------------


async def _enter(store: SqlStore, key: str, entered: list[float]) -> None:
    async with store.lock(key):
        entered.append(time.monotonic())


async def test_lock_excludes_across_two_stores_in_one_process(pg_url: str) -> None:
    first, second = SqlStore(pg_url), SqlStore(pg_url)
    try:
        entered: list[float] = []
        async with first.lock(KEY):
            waiting = asyncio.create_task(_enter(second, KEY, entered))
            await asyncio.sleep(0.3)
            assert not waiting.done(), "the second engine entered a session the first one holds"
            # other sessions are not held up
            await asyncio.wait_for(_enter(second, KEY + ":other", []), 5)
            released = time.monotonic()
        await asyncio.wait_for(waiting, 5)
        assert entered and entered[0] >= released
        # the lock is free again for both
        await asyncio.wait_for(_enter(first, KEY, []), 5)
        await asyncio.wait_for(_enter(second, KEY, []), 5)
    finally:
        await first.close()
        await second.close()


async def test_lock_is_released_when_the_turn_fails(pg_url: str) -> None:
    first, second = SqlStore(pg_url), SqlStore(pg_url)
    try:
        with pytest.raises(RuntimeError):
            async with first.lock(KEY):
                raise RuntimeError("the turn failed")
        await asyncio.wait_for(_enter(second, KEY, []), 5)
    finally:
        await first.close()
        await second.close()


async def test_lock_is_released_when_turns_are_cancelled(pg_url: str) -> None:
    """A turn cancelled while it holds the session (shutdown), and one cancelled while it
    waits for it, leave the session free."""
    first, second, third = SqlStore(pg_url), SqlStore(pg_url), SqlStore(pg_url)
    try:
        holding = asyncio.create_task(_enter_and_stay(first, KEY))
        await asyncio.sleep(0.2)
        waiting = asyncio.create_task(_enter(second, KEY, []))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        for task in (waiting, holding):
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await asyncio.wait_for(_enter(third, KEY, []), 5)
        await asyncio.wait_for(_enter(second, KEY, []), 5)
        await asyncio.wait_for(_enter(first, KEY, []), 5)
    finally:
        for store in (first, second, third):
            await store.close()


async def _enter_and_stay(store: SqlStore, key: str) -> None:
    async with store.lock(key):
        await asyncio.sleep(3600)


async def test_two_engines_in_one_process_take_turns(pg_url: str, endpoint: FakeOpenAI) -> None:
    turns_each = 5
    engines = [make_engine(SqlStore(pg_url), endpoint.base_url) for _ in range(2)]
    try:
        for engine in engines:  # one after the other: the race at creation is another test's
            await engine.history.start()  # type: ignore[attr-defined]
        async def run(engine: Engine, label: str) -> None:
            for index in range(turns_each):
                await engine.chat(KEY, f"{label}-{index}")

        await asyncio.wait_for(asyncio.gather(run(engines[0], "a"), run(engines[1], "b")), 60)
        exported = await engines[0].history.export(KEY)  # type: ignore[attr-defined]
    finally:
        for engine in engines:
            await close_engine(engine)
    check_one_turn_at_a_time(endpoint.requests, exported, {
        f"{label}-{index}" for label in "ab" for index in range(turns_each)})


async def test_two_processes_take_turns(
    pg_url: str, endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    """Two bot processes run turns of one session at the same time: none is lost, none
    interleaves with another, each sees all the turns before it."""
    turns_each = 6
    store = SqlStore(pg_url)
    await store.start()  # see test_bots_starting_together_on_an_empty_database for that race
    workers = [Worker(tmp_path, pg_url, endpoint.base_url, KEY, label, turns_each) for label in "ab"]
    try:
        for worker in workers:
            await asyncio.to_thread(worker.wait_ready)
        for worker in workers:
            worker.go()
        for worker in workers:
            await asyncio.to_thread(worker.wait_done)
        exported = await store.export(KEY)
    finally:
        for worker in workers:
            worker.kill()
        await store.close()
    labels = [current_question(r).rsplit("-", 1)[0] for r in endpoint.requests]
    assert set(labels) == {"a", "b"}
    check_one_turn_at_a_time(endpoint.requests, exported, {
        f"{label}-{index}" for label in "ab" for index in range(turns_each)})


async def test_a_process_killed_mid_turn_frees_the_session_and_leaves_no_half_turn(
    pg_url: str, endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    held = threading.Event()  # the second turn's answer is being held back
    release = threading.Event()

    def respond(body: dict[str, Any]) -> Answer:
        if body["messages"][-1]["role"] == "tool" and current_question(body) == "k-1":
            held.set()
            release.wait(30)  # the worker is killed before this ends
        return tool_then_text(body)

    endpoint.responder = respond
    worker = Worker(tmp_path, pg_url, endpoint.base_url, KEY, "k", 2)
    store = SqlStore(pg_url)
    engine = make_engine(SqlStore(pg_url), endpoint.base_url)
    try:
        await asyncio.to_thread(worker.wait_ready)
        worker.go()
        assert await asyncio.to_thread(held.wait, 30), worker.output()
        # the worker is mid-turn: question, tool call and tool result exist only in its memory
        waiting = asyncio.create_task(_enter(store, KEY, []))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "the session was not locked while the worker's turn ran"

        killed = time.monotonic()
        os.kill(worker.process.pid, signal.SIGKILL)
        await asyncio.to_thread(worker.process.wait, 10)
        await asyncio.wait_for(waiting, 60)
        freed_after = time.monotonic() - killed
        # at once, give or take a busy machine (a lock left to TCP's timeouts would take minutes)
        assert freed_after < 30, f"the session stayed locked {freed_after:.1f} s after the kill"

        exported = await store.export(KEY)
        assert [row["message"]["content"] for row in exported if row["message"]["role"] == "user"] == ["k-0"]
        assert len(exported) == 4 and len({row["turn"] for row in exported}) == 1

        endpoint.responder = tool_then_text
        before = len(endpoint.requests)
        reply = await asyncio.wait_for(engine.chat(KEY, "after"), 30)
        assert reply.text == "answer to after"
        request = endpoint.requests[before]
        assert request["messages"] == [*(row["message"] for row in exported),
                                       {"role": "user", "content": "after"}]
        assert (await store.stats(KEY))[:2] == (2, 8)
    finally:
        release.set()
        worker.kill()
        await close_engine(engine)
        await store.close()



async def test_summaries_on_postgres(pg_url: str) -> None:
    from tests.test_summary import check_summary_store

    store = SqlStore(pg_url)
    try:
        await check_summary_store(store)
    finally:
        await store.close()


async def test_a_summary_another_bot_process_wrote_is_used_at_once(pg_url: str, fake: Any) -> None:
    from tests.test_summary import KEY as SUMMARY_KEY
    from tests.test_summary import chat_requests, make_engine

    fake.responder = lambda body: text("ok")
    engine = make_engine(fake)
    engine.history = store = SqlStore(pg_url)
    other = SqlStore(pg_url)  # the other bot process
    try:
        await engine.chat(SUMMARY_KEY, "hello")
        await engine.chat(SUMMARY_KEY, "hello again")  # its summary read: none yet
        turn = (await store.recent_turns(SUMMARY_KEY, max_messages=10, max_tokens=10**6))[0]
        await other.save_summary(SUMMARY_KEY, "fact: the other process wrote this", through_turn=turn.id,
                                 turns=1, tokens=8)
        await engine.chat(SUMMARY_KEY, "and now?")
        assert "fact: the other process wrote this" in chat_requests(fake)[-1]["messages"][0]["content"]
    finally:
        await engine.llm.close()
        await store.close()
        await other.close()
