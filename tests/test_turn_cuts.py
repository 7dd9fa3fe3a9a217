"""The per-turn cuts of the agent and store layers (issue 30): what is kept or reused between
turns gives each turn the same values as building them afresh did."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gc
import json
import os
import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest

from nonebot_plugin_marsho.agent import persona as persona_module
from nonebot_plugin_marsho.agent.engine import Engine, hidden_result, visible_to
from nonebot_plugin_marsho.agent.model.base import Completion, ModelRequest
from nonebot_plugin_marsho.agent.model.endpoint import _within
from nonebot_plugin_marsho.agent.persona import Prompt, base_prompt, tagged_speaker, time_line, turn_prompt
from nonebot_plugin_marsho.agent.praises import PraisesFile
from nonebot_plugin_marsho.agent.quirks import PROFILES, Quirks, _shaped_one, shaped
from nonebot_plugin_marsho.agent.summary import Summarizer
from nonebot_plugin_marsho.agent.tokens import TokenCounter
from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.store.recent import RecentTurns
from nonebot_plugin_marsho.store.session import SessionLocks, Turn
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.store.sqlite_direct import SqliteDirect
from nonebot_plugin_marsho.tools import Tool, Toolkit, ToolRunner, Toolset
from nonebot_plugin_marsho.tools.model import ToolContext

KEY = "test:group:1"


def _kept(messages: list[dict]) -> RecentTurns:
    recent = RecentTurns()
    recent.read_started(KEY)
    recent.read_ended(KEY, [("t1", [json.dumps(m) for m in messages], [5] * len(messages))],
                      max_messages=40, complete=True)
    return recent


def test_changing_a_read_tool_call_or_content_part_changes_nothing_kept() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": "ok"},
    ]
    recent = _kept(messages)
    [got] = recent.get(KEY, 40) or []
    got.messages[0]["content"][0]["text"] = "changed"
    got.messages[1]["tool_calls"][0]["function"]["name"] = "changed"
    got.messages[2]["content"] = "changed"
    got.messages[3]["extra"] = "changed"
    [again] = recent.get(KEY, 40) or []
    assert again.messages == messages


def test_each_read_gets_messages_of_its_own() -> None:
    recent = _kept([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    [first] = recent.get(KEY, 40) or []
    [second] = recent.get(KEY, 40) or []
    assert first == second
    assert all(a is not b for a, b in zip(first.messages, second.messages, strict=True))


# the summary's store on a SQLite file, without SQLAlchemy ----------------------------------------


async def _stored_turns(store: SqlStore) -> list[str]:
    for number in range(8):
        await store.append_turn(KEY, [{"role": "user", "content": f"q{number}"},
                                      *[{"role": "assistant", "content": f"a{number}.{i}"}
                                        for i in range(number % 3)]], [3] * (1 + number % 3))
        await store.append_turn("another", [{"role": "user", "content": f"elsewhere {number}"}], [3])
    return [turn.id for turn in await store.recent_turns(KEY, max_messages=100, max_tokens=10**6)]


async def test_turns_between_on_a_file_reads_what_sqlalchemy_reads(tmp_path: Path) -> None:
    on_file, in_memory = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}"), SqlStore("sqlite://")
    try:
        file_ids, memory_ids = await _stored_turns(on_file), await _stored_turns(in_memory)
        assert on_file._direct is not None and in_memory._direct is None
        for after, before in [(0, 7), (1, 6), (2, 3), (3, 2), (0, 1)]:
            for max_messages in (0, 1, 2, 4, 7, 100):
                for with_after in (False, True):
                    got = await on_file.turns_between(KEY, file_ids[after], file_ids[before],
                                                      max_messages=max_messages, with_after=with_after)
                    want = await in_memory.turns_between(KEY, memory_ids[after], memory_ids[before],
                                                         max_messages=max_messages, with_after=with_after)
                    assert [t.messages for t in got] == [t.messages for t in want], (after, before, max_messages)
                    assert [t.tokens for t in got] == [t.tokens for t in want]
        assert await on_file.turns_between(KEY, file_ids[0], "0" * 32, max_messages=100) == []
    finally:
        await on_file.close()
        await in_memory.close()


async def test_a_summary_sqlite_cannot_take_is_a_store_error_and_keeps_the_one_before(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    try:
        await store.save_summary(KEY, "first", through_turn="t1", turns=1, tokens=1)
        with pytest.raises(StoreError):
            await store.save_summary(KEY, "bad \ud800", through_turn="t2", turns=2, tokens=2)
        summary = await store.get_summary(KEY)
        assert summary is not None and (summary.text, summary.through_turn) == ("first", "t1")
        await store.save_summary("other", "theirs", through_turn="t9", turns=1, tokens=1)
        summary = await store.get_summary(KEY)
        assert summary is not None and summary.text == "first"
    finally:
        await store.close()


# the system message with a summary, built once per what it is made of ------------------------------


def _engine(**options: Any) -> Engine:
    toolset = Toolset()
    toolset.add(Toolkit("kit", tools=[Tool(f"kit__t{i}", "does things " * 40, {"type": "object"}, lambda: "")
                                      for i in range(3)]))
    engine = Engine(cast(Any, None), toolset, SqlStore("sqlite://"), ToolRunner(toolset),
                    system_prompt="You are Marsho.", counter=TokenCounter(), **options)
    engine.summarizer = Summarizer(cast(Any, None), max_tokens=600, counter=lambda: engine.counter,
                                   language="en")
    return engine


def _system_text(engine: Engine, prompt: str, summary: str, tools: list[dict[str, Any]]) -> str:
    return str(engine._system(prompt, summary, tools)[0]["content"])


def test_the_system_message_follows_everything_it_is_made_of() -> None:
    engine = _engine(max_tokens=2000)
    tools = engine.toolset.schemas()
    long_summary = "Alice likes cats and long walks. " * 120
    seen = {}
    for step, change in enumerate([
        lambda: None,
        lambda: setattr(engine, "max_tokens", 6000),  # more room: the summary is no longer cut
        lambda: setattr(engine.summarizer, "language", "zh-CN"),  # the block's frame
        lambda: setattr(engine, "counter", TokenCounter()),  # another model's counter
    ]):
        change()
        for prompt in ("You are Marsho.", "You are Marsho. " * 80):
            for summary in ("Alice likes cats.", long_summary):
                for offered in (tools, tools[:1]):
                    got = _system_text(engine, prompt, summary, offered)
                    assert got == _system_text(_fresh(engine), prompt, summary, offered)
                    assert got == _system_text(engine, prompt, summary, offered)  # cached
                    seen[step, prompt, summary, len(offered)] = got
    assert seen[0, "You are Marsho.", long_summary, 3] != seen[1, "You are Marsho.", long_summary, 3]
    assert seen[1, "You are Marsho.", long_summary, 3] != seen[2, "You are Marsho.", long_summary, 3]


def _fresh(engine: Engine) -> Engine:
    """An engine that has built nothing yet, with `engine`'s settings."""
    fresh = _engine(max_tokens=engine.max_tokens)
    fresh.counter = engine.counter
    assert fresh.summarizer is not None and engine.summarizer is not None
    fresh.summarizer.language = engine.summarizer.language
    return fresh


# SqliteDirect's own thread --------------------------------------------------------------------------


def _sqlite_threads() -> int:
    return sum(thread.name.startswith("marsho-sqlite") for thread in threading.enumerate())


async def _ended(before: int) -> bool:
    for _ in range(200):  # the thread ends once it has read the end of its queue
        if _sqlite_threads() <= before:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_a_closed_connection_ends_its_thread_and_a_later_call_opens_both_again(tmp_path: Path) -> None:
    before = _sqlite_threads()
    direct = SqliteDirect(str(tmp_path / "marsho.db"))
    assert await direct.call(lambda db: db.execute("SELECT 1").fetchone()) == (1,)
    await direct.close()
    assert await _ended(before)
    assert await direct.call(lambda db: db.execute("SELECT 2").fetchone()) == (2,)
    await direct.close()
    await direct.close()  # closing twice is harmless
    assert await _ended(before)


async def test_a_connection_dropped_unclosed_ends_its_thread(tmp_path: Path) -> None:
    before = _sqlite_threads()
    direct = SqliteDirect(str(tmp_path / "marsho.db"))
    await direct.call(lambda db: None)
    del direct
    gc.collect()
    assert await _ended(before)


async def test_a_call_whose_caller_gave_up_still_runs_and_the_next_gets_its_own_answer(tmp_path: Path) -> None:
    direct = SqliteDirect(str(tmp_path / "marsho.db"))
    started, release = threading.Event(), threading.Event()

    def slow(db: sqlite3.Connection) -> str:
        started.set()
        release.wait(5)
        db.execute("CREATE TABLE done (a INTEGER)")
        return "slow"

    try:
        waiting = asyncio.ensure_future(direct.call(slow))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        waiting.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await direct.call(lambda db: db.execute("SELECT name FROM sqlite_master").fetchall()) == [("done",)]
        with pytest.raises(sqlite3.OperationalError):
            await direct.call(lambda db: db.execute("SELECT * FROM missing"))
    finally:
        await direct.close()


# the first request laid out once ------------------------------------------------------------------------


class _Recording:
    """A model that answers at once and keeps every request's messages."""

    model = "recording"
    timeout = 30.0

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    async def complete(self, messages: list[dict[str, Any]], tools: Any = None, **_: Any) -> Completion:
        self.requests.append(copy.deepcopy(messages))
        if tools is None and "[Summary" not in json.dumps(messages[:1]):
            return Completion(f"folded {len(self.requests)}: " + "they talked about cats. " * 8)
        return Completion(f"answer {len(self.requests)} " + "fine " * 25)


def _summarising(llm: _Recording) -> Engine:
    engine = _engine(max_tokens=1500, max_history=12)
    engine.llm = cast(Any, llm)
    assert engine.summarizer is not None
    engine.summarizer.llm = cast(Any, llm)
    return engine


async def test_the_first_request_laid_out_beside_the_summary_is_the_one_laid_out_afresh() -> None:
    planned, afresh = _Recording(), _Recording()
    engines = _summarising(planned), _summarising(afresh)
    unplanned = engines[1]._summary_for_turn

    async def without_plan(*args: Any) -> Any:
        summary, _ = await unplanned(*args)
        return summary, None

    engines[1]._summary_for_turn = without_plan  # type: ignore[method-assign]
    for number in range(40):
        for engine in engines:
            await engine.chat(KEY, f"question {number}: " + "tell me about cats " * (3 + number % 5),
                              note="(12:00)")
    assert planned.requests == afresh.requests
    assert sum("[Summary" in json.dumps(r[:1]) for r in planned.requests) > 5  # carried a summary
    assert len(planned.requests) > 45  # and folded several times


# a speaker's label, made once per speaker -----------------------------------------------------------------


def test_a_speakers_label_follows_each_of_its_arguments() -> None:
    reserved = ["Marsho", "bot"]
    base = tagged_speaker("Alice", "OneBot V11", "10001", reserved)
    assert tagged_speaker("Alice", "OneBot V11", "10001", iter(reserved)) == base  # any iterable
    assert tagged_speaker("Alice", "OneBot V11", "10001", reserved) is base  # made once
    assert tagged_speaker("Marsho", "OneBot V11", "10001", reserved) != tagged_speaker(
        "Marsho", "OneBot V11", "10001", [])  # the reserved names count
    assert tagged_speaker("Alice", "OneBot V11", "10002", reserved) != base
    assert tagged_speaker("Alice", "Telegram", "10001", reserved) != base
    assert tagged_speaker("Bob", "OneBot V11", "10001", reserved) != base
    assert tagged_speaker("Alice" * 20, "OneBot V11", "10001", reserved, limit=12) != tagged_speaker(
        "Alice" * 20, "OneBot V11", "10001", reserved)


# a request shaped for its family ------------------------------------------------------------------------


_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
_SHAPES: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "tool_calls": [_CALL], "reasoning_content": "think"},
    {"role": "assistant", "content": "", "tool_calls": [_CALL]},
    {"role": "assistant", "content": "looking", "tool_calls": [_CALL], "reasoning_content": "more"},
    {"role": "tool", "tool_call_id": "c1", "content": "done"},
    {"role": "assistant", "content": "ok", "reasoning_content": "thought"},
    {"role": "user", "content": [{"type": "text", "text": "and this"}]},
]


def _one_pass(fields: Any) -> bool:
    """A profile shaped in the one pass (no merging, no system prompt as the user's)."""
    return not fields.get("merge_same_role") and not fields.get("system_as_user")


@pytest.mark.parametrize("fields", [{}, *(fields for _, fields in PROFILES if _one_pass(fields)),
                                    {"tool_call_content": "empty", "reasoning_back": False}])
def test_a_request_is_shaped_as_each_message_alone_would_be(fields: dict[str, Any]) -> None:
    quirks = Quirks(**{k: v for k, v in fields.items() if k != "effort_field"})
    messages = copy.deepcopy(_SHAPES)
    got = shaped(messages, quirks)
    assert got == [_shaped_one(message, quirks, ()) for message in copy.deepcopy(_SHAPES)]
    assert messages == _SHAPES  # nothing sent was changed in place


# many turns at once on a SQLite file ---------------------------------------------------------------


async def test_many_turns_at_once_on_a_sqlite_file_are_all_stored(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    try:
        await store.start()
        await asyncio.gather(*(store.append_turn(f"s{n}", [{"role": "user", "content": f"q{n}"}], [1])
                               for n in range(30)))
        for n in range(30):
            [turn] = await store.recent_turns(f"s{n}", max_messages=10, max_tokens=100)
            assert turn.messages == [{"role": "user", "content": f"q{n}"}]
    finally:
        await store.close()


# the endpoint's exchange within its timeout -----------------------------------------------------------


async def test_an_exchange_past_its_timeout_is_cancelled_and_a_timeout_error() -> None:
    cancelled = asyncio.Event()

    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    async def quick() -> str:
        return "ok"

    async def failing() -> str:
        raise ValueError("refused")

    with pytest.raises(asyncio.TimeoutError):
        await _within(slow(), 0.05)
    assert cancelled.is_set()
    assert await _within(quick(), 0.05) == "ok"
    with pytest.raises(ValueError, match="refused"):
        await _within(failing(), 5)
    # the caller's own cancellation stays a cancellation, not a timeout
    waiting = asyncio.ensure_future(_within(slow(), 5))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


# a request changed on its way down the parts -----------------------------------------------------------


def test_a_request_changed_on_its_way_is_the_one_dataclasses_replace_makes() -> None:
    request = ModelRequest([{"role": "user", "content": "hi"}], tools=[{"type": "function"}], model="m")
    changes: dict[str, Any] = {"model": "other", "more": True, "keep": 2.5, "foreign": frozenset({"x"}),
                               "settings": {"model_setting": "MARSHO_MODEL"}, "stream": True}
    changed = request.but(**changes)
    assert changed == dataclasses.replace(request, **changes)
    assert request.model == "m" and not request.stream  # the original is left as it was
    assert request.but() == request and request.but() is not request
    with pytest.raises(TypeError, match="no field"):
        request.but(modle="typo")


# the history as an asker may see it ----------------------------------------------------------------------


def test_only_the_turns_with_tool_calls_are_looked_into_for_what_the_asker_may_not_see() -> None:
    def secret() -> str:
        return ""

    toolset = Toolset()
    toolset.add(Toolkit("kit", tools=[Tool("kit__secret", "owner only", {"type": "object"}, secret,
                                           permission="superuser")]))
    call = {"id": "c1", "type": "function", "function": {"name": "kit__secret", "arguments": "{}"}}
    plain = Turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], [1, 1], "t1")
    empty_calls = Turn([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "tool_calls": []}],
                       [1, 1], "t2")
    called = Turn([{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "c1", "content": "the owner's data"},
                   {"role": "assistant", "content": "done"}], [1, 1, 1, 1], "t3")
    member = ToolContext(session_key=KEY, user_id="2", role="member")
    seen = visible_to([plain, empty_calls, called], toolset, member)
    assert seen[0] is plain and seen[1] is empty_calls  # nothing to hide: as they are
    assert seen[2].messages[2]["content"] == hidden_result("kit__secret")
    assert called.messages[2]["content"] == "the owner's data"  # the history itself unchanged
    owner = ToolContext(session_key=KEY, user_id="1", role="superuser")
    assert visible_to([called], toolset, owner)[0] is called


# one turn at a time per session -------------------------------------------------------------------------


async def test_a_sessions_turns_take_turns_and_an_idle_session_keeps_no_lock() -> None:
    locks = SessionLocks()
    order: list[str] = []

    async def turn(name: str, key: str, gate: asyncio.Event) -> None:
        async with locks.hold(key):
            order.append(f"{name} in")
            await gate.wait()
            order.append(f"{name} out")

    gate, other_gate = asyncio.Event(), asyncio.Event()
    first = asyncio.ensure_future(turn("first", KEY, gate))
    second = asyncio.ensure_future(turn("second", KEY, gate))
    elsewhere = asyncio.ensure_future(turn("elsewhere", "other", other_gate))
    await asyncio.sleep(0.01)
    assert order == ["first in", "elsewhere in"]  # another session does not wait
    gate.set()
    other_gate.set()
    await asyncio.gather(first, second, elsewhere)
    assert order.index("first out") < order.index("second in")
    assert locks._locks == {} and locks._users == {}


async def test_a_turn_cancelled_while_it_waits_leaves_the_session_free() -> None:
    locks = SessionLocks()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.hold(KEY):
            await release.wait()

    held = asyncio.ensure_future(holder())
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(holder())
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await held
    assert locks._locks == {} and locks._users == {}
    with pytest.raises(ValueError):  # a failure inside releases it too
        async with locks.hold(KEY):
            raise ValueError("boom")
    assert locks._locks == {}
    async with locks.hold(KEY):
        pass


async def test_a_sqlite_stores_turn_lock_is_the_session_lock() -> None:
    store = SqlStore("sqlite://")
    try:
        inside = asyncio.Event()
        async with store.lock(KEY):
            blocked = asyncio.ensure_future(_enter(store, KEY, inside))
            await asyncio.sleep(0.01)
            assert not inside.is_set()  # the session's second turn waits
        await blocked
        assert inside.is_set()
    finally:
        await store.close()


async def _enter(store: SqlStore, key: str, inside: asyncio.Event) -> None:
    async with store.lock(key):
        inside.set()


# the turn's time line, made once a minute ---------------------------------------------------------------


@pytest.mark.parametrize("language", ["zh-CN", "en"])
def test_the_time_line_is_the_one_made_afresh_for_each_minute_zone_and_language(language: Any) -> None:
    shanghai, new_york = ZoneInfo("Asia/Shanghai"), ZoneInfo("America/New_York")
    instant = datetime(2026, 2, 17, 9, 5, 42, tzinfo=shanghai)
    moments = [instant, instant.replace(second=3), instant + timedelta(minutes=1), instant + timedelta(days=1),
               instant.astimezone(new_york), instant.astimezone(timezone.utc), instant.replace(tzinfo=None),
               datetime(2026, 11, 1, 1, 30, tzinfo=new_york), datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=new_york)]
    for now in moments * 2:  # the second time from what was kept
        assert time_line(now, language) == persona_module._time_line(now, language)
    assert len({time_line(now, language) for now in moments}) == len(moments) - 1  # seconds do not count


# the system prompt, made once per what it is made of --------------------------------------------------


def test_the_system_prompt_follows_praises_json_and_every_setting(tmp_path: Path) -> None:
    path = tmp_path / "praises.json"
    path.write_text(json.dumps({"like": [{"name": "Alice", "advantages": "kind"}]}), encoding="utf-8")
    old = time.time() - 100
    os.utime(path, (old, old))
    prompt = Prompt(persona="You are Marsho.", praises=PraisesFile(path, lambda _: None), language="en")

    def afresh(shared: bool = False, group_persona: str | None = None) -> str:
        likes = prompt.praises.people() if prompt.praises else []
        return turn_prompt(base_prompt(prompt.persona, prompt.additional, likes, language=prompt.language,
                                       group_persona=group_persona), shared=shared, language=prompt.language)

    def check() -> str:
        for shared in (False, True):
            for group_persona in (None, "be nice"):
                got = prompt.system(shared=shared, group_persona=group_persona)
                assert got == afresh(shared, group_persona) == prompt.system(shared=shared,
                                                                            group_persona=group_persona)
        return prompt.system()

    first = check()
    path.write_text(json.dumps({"like": [{"name": "Bob"}]}), encoding="utf-8")
    os.utime(path, (old + 10, old + 10))
    assert "Bob" in check() and "Alice" not in prompt.system()  # an edit of praises.json shows
    prompt.additional = "Answer in rhymes."
    assert "rhymes" in check()
    prompt.persona = "You are Mochi."
    assert "Mochi" in check()
    prompt.language = "zh-CN"
    assert check() != first
