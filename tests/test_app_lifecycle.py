"""The application is whole before it serves: `Marsho.start` builds every service or none, tears
down what it built (last built first) when a stage fails and says which, `stop` is safe at any
time, and a bot that is not ready answers every chat with why, without its rules failing."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nonebot.log import logger
from nonebug import App

from nonebot_plugin_marsho.agent.chatlog import ChatLog
from nonebot_plugin_marsho.agent.llm import LLMClient
from nonebot_plugin_marsho.agent.memory import MemoryBook
from nonebot_plugin_marsho.agent.metering import Meter
from nonebot_plugin_marsho.chat import app as app_module
from nonebot_plugin_marsho.chat.active import ActiveReplies
from nonebot_plugin_marsho.chat.app import Marsho, running
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.exceptions import NotReadyError, StoreError
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools.runner import ToolRunner
from tests.conftest import SUPERUSER_ID
from tests.fake_openai import FakeOpenAI, text
from tests.onebot import group_message, onebot_bot, reply_call

BUILT = ["tool threads", "model fake-model", "model summary-model", "model judge-model", "database",
         "recent chat", "bill", "MCP servers", "memory"]
"""What a start with every service builds, in the order it builds it (each one torn down)."""
STARTING = "marsho is still starting; try again in a moment."


class FakeMcp:
    """MCP servers that start at once and record their stop."""

    servers: dict[str, Any] = {}

    def __init__(self, closed: list[str]) -> None:
        self.closed = closed

    async def stop(self) -> None:
        self.closed.append("MCP servers")


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the bot tears down, in order (each close still does its work); its MCP servers are
    FakeMcp."""
    order: list[str] = []

    def record(owner: type, method: str, name: Callable[[Any], str]) -> None:
        original = getattr(owner, method)
        if inspect.iscoroutinefunction(original):
            async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
                order.append(name(self))
                return await original(self, *args, **kwargs)
        else:
            def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                order.append(name(self))
                return original(self, *args, **kwargs)
        monkeypatch.setattr(owner, method, recorded)

    record(LLMClient, "close", lambda client: f"model {client.model}")
    record(ToolRunner, "close", lambda _: "tool threads")
    record(SqlStore, "close", lambda _: "database")
    record(ChatLog, "close", lambda _: "recent chat")
    record(Meter, "close", lambda _: "bill")
    record(MemoryBook, "settled", lambda _: "memory")

    async def start_mcp(self: Marsho, toolset: Any, *, wait: float | None = None) -> FakeMcp:
        return FakeMcp(order)

    monkeypatch.setattr(Marsho, "start_mcp", start_mcp)
    return order


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """What is logged during the test, one message a line, without time or level."""
    messages: list[str] = []
    sink_id = logger.add(lambda message: messages.append(str(message).rstrip("\n")), format="{message}")
    yield messages
    logger.remove(sink_id)


def whole_bot(fake: FakeOpenAI, tmp_path: Path, **settings: Any) -> Marsho:
    """A bot with every service: a summary model, a judge, memory, MCP servers (FakeMcp)."""
    config = Config(**{
        "marsho_base_url": fake.base_url, "marsho_api_key": "k", "marsho_model": "fake-model",
        "marsho_lang": "en", "marsho_time_prompt": False, "marsho_summary_model": "summary-model",
        "marsho_active_judge_model": "judge-model", "marsho_memory": True,
        "marsho_database_url": f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}", **settings})
    return Marsho(config, tmp_path)


def boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("boom")


async def store_boom(*args: Any, **kwargs: Any) -> Any:
    raise StoreError("the disk is on fire")


async def async_boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("boom")


async def test_stop_tears_down_every_service_in_reverse_order_of_building(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str]
) -> None:
    bot = whole_bot(fake, tmp_path)
    await bot.start()
    assert bot.ready, bot.problem
    assert closed == []
    await bot.stop()
    assert closed == BUILT[::-1]
    assert not bot.ready and bot.problem == STARTING and bot.problem_brief == ""


FAILURES = [
    # stage, what fails (patched where it is), what had been built before, what the chats are told
    ("toolkits", (Marsho, "load_toolset", boom), 0,
     "marsho could not load its toolkits: RuntimeError: boom", "brief.toolkits",
     "marsho: could not load the toolkits: boom"),
    ("models", (app_module, "judge_model", boom), 3,
     "marsho could not start (models): RuntimeError: boom", "brief.internal",
     "marsho: could not start (models): boom"),
    ("database open", None, 4, "marsho cannot use its database: ", "brief.database",
     "marsho: cannot use the database: "),
    ("database start", (SqlStore, "start", store_boom), 5,
     "marsho cannot use its database: the disk is on fire", "brief.database",
     "marsho: cannot use the database: the disk is on fire. Check MARSHO_DATABASE_URL."),
    ("recent chat", (ChatLog, "load", store_boom), 6,
     "marsho cannot use its database: the disk is on fire", "brief.database",
     "marsho: cannot use the database: the disk is on fire. Check MARSHO_DATABASE_URL."),
    ("active replies", (ActiveReplies, "load", store_boom), 6,
     "marsho cannot use its database: the disk is on fire", "brief.database",
     "marsho: cannot use the database: the disk is on fire. Check MARSHO_DATABASE_URL."),
    ("usage", (Meter, "roll_up", async_boom), 7,
     "marsho could not start (usage): RuntimeError: boom", "brief.internal",
     "marsho: could not start (usage): boom"),
    ("MCP servers", (Marsho, "start_mcp", async_boom), 7,
     "marsho could not start (MCP servers): RuntimeError: boom", "brief.internal",
     "marsho: could not start (MCP servers): boom"),
    ("memory", (Marsho, "add_memory", boom), 8,
     "marsho could not start (memory): RuntimeError: boom", "brief.internal",
     "marsho: could not start (memory): boom"),
]


@pytest.mark.parametrize(("stage", "failing", "built", "problem", "brief", "log"), FAILURES,
                         ids=[failure[0] for failure in FAILURES])
async def test_a_start_that_fails_at_a_stage_tears_down_what_it_built_and_says_what_failed(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str], logged: list[str], monkeypatch: pytest.MonkeyPatch,
    stage: str, failing: tuple[Any, str, Any] | None, built: int, problem: str, brief: str, log: str,
) -> None:
    settings: dict[str, Any] = {}
    if failing is None:  # a URL no driver reads
        settings["marsho_database_url"] = "mysql+nosuchdriver://u:pw@h/db"
    else:
        monkeypatch.setattr(*failing)
    bot = whole_bot(fake, tmp_path, **settings)
    await bot.start()  # never raises: NoneBot would not start at all
    assert closed == BUILT[:built][::-1]
    assert not bot.ready
    assert bot.problem.startswith(problem) and bot.problem_brief == brief
    assert any(line.startswith(log) for line in logged), logged
    assert not any(line.startswith("marsho: ready") for line in logged)
    with pytest.raises(NotReadyError) as raised:
        bot.require_engine()
    assert str(raised.value) == bot.problem
    with pytest.raises(NotReadyError):
        bot.nicknames  # noqa: B018
    assert bot.engine is None and bot.judge is None and bot.memory_book is None


async def test_stop_after_a_failed_start_is_safe_and_closes_nothing_twice(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Meter, "roll_up", async_boom)
    bot = whole_bot(fake, tmp_path)
    await bot.start()
    torn_down = list(closed)
    await bot.stop()
    await bot.stop()
    assert closed == torn_down
    assert bot.problem == STARTING and bot.problem_brief == ""


async def test_a_start_cancelled_half_way_tears_down_what_it_built(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    loading = asyncio.Event()

    async def load_forever(self: ChatLog) -> None:
        loading.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(ChatLog, "load", load_forever)
    bot = whole_bot(fake, tmp_path)
    starting = asyncio.create_task(bot.start())
    await loading.wait()
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert closed == BUILT[:6][::-1] and not bot.ready


async def test_a_bot_started_stopped_and_started_again_answers(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str]
) -> None:
    bot = whole_bot(fake, tmp_path, marsho_memory=False)
    await bot.start()
    first = bot.require_engine()
    await bot.stop()
    await bot.stop()
    assert len(closed) == len(BUILT) - 1
    await bot.start()
    try:
        engine = bot.require_engine()
        assert engine is not first
        fake.push(text("hello again"))
        reply = await engine.chat("OneBot V11:private:10001", "hi")
        assert reply.text == "hello again"
    finally:
        await bot.stop()
    assert len(closed) == 2 * (len(BUILT) - 1)


async def test_a_second_start_tears_down_the_first_ones_services(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str]
) -> None:
    bot = whole_bot(fake, tmp_path)
    await bot.start()
    await bot.start()
    try:
        assert closed == BUILT[::-1] and bot.ready
    finally:
        await bot.stop()


async def test_a_copy_with_other_settings_leaves_the_services_to_the_bot_that_built_them(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str]
) -> None:
    bot = whole_bot(fake, tmp_path)
    await bot.start()
    try:
        copy = bot.with_config(marsho_group_context=5)
        assert copy.require_engine() is bot.require_engine()
        await copy.stop()
        assert closed == [] and bot.ready and not copy.ready
    finally:
        await bot.stop()


class Said:
    """Equal to any message, whose last text it keeps (nonebug compares expected == actual)."""

    def __init__(self) -> None:
        self.text = ""

    def __eq__(self, message: Any) -> bool:
        self.text = message[-1].data["text"]
        return True


async def ask(app: App, bot_app: Marsho, message: str = "marsho hi", *, owner: bool = False,
              before: tuple[str, ...] = ()) -> str:
    """What the bot answers to `message` in a group, from a member or the owner, after the
    messages `before` (answered by nothing)."""
    said = Said()
    with running.using(bot_app):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            for line in before:
                ctx.receive_event(bot, group_message(line))
            event = group_message(message, user_id=int(SUPERUSER_ID) if owner else 10001)
            ctx.receive_event(bot, event)
            name, data = reply_call(event, "")
            ctx.should_call_api(name, {**data, "message": said}, result={"message_id": 1})
    return said.text


async def test_a_bot_still_starting_says_so_to_everyone(app: App, fake: FakeOpenAI, tmp_path: Path) -> None:
    starting = Marsho(Config(marsho_base_url=fake.base_url, marsho_lang="en"), tmp_path)
    assert await ask(app, starting, owner=False) == STARTING
    assert await ask(app, starting, owner=True) == STARTING
    assert fake.requests == []


@pytest.mark.parametrize(("failing", "member"), [
    ((Meter, "roll_up", async_boom), "Sorry, I could not answer: something went wrong inside me (our "
                                     "conversation so far is kept). The bot's owner has the details in the log."),
    ((ChatLog, "load", store_boom), "Sorry, I could not answer: my conversation database failed. The bot's "
                                    "owner has the details in the log."),
    ((Marsho, "load_toolset", boom), "Sorry, I could not answer: my tools could not be loaded. The bot's "
                                     "owner has the details in the log."),
], ids=["usage", "database", "toolkits"])
async def test_a_bot_that_failed_to_start_tells_members_briefly_and_the_owner_what_failed(
    app: App, fake: FakeOpenAI, tmp_path: Path, closed: list[str], monkeypatch: pytest.MonkeyPatch,
    failing: tuple[Any, str, Any], member: str,
) -> None:
    monkeypatch.setattr(*failing)
    broken = whole_bot(fake, tmp_path)
    await broken.start()
    try:
        assert await ask(app, broken, owner=False) == member
        assert await ask(app, broken, owner=True) == broken.problem
    finally:
        await broken.stop()
    assert fake.requests == []


async def test_messages_not_for_marsho_pass_a_bot_that_is_not_ready_quietly(
    app: App, fake: FakeOpenAI, tmp_path: Path
) -> None:
    errors: list[str] = []
    sink_id = logger.add(lambda message: errors.append(str(message)), level="ERROR", format="{message}")
    # the recent chat kept and active replies on everywhere, once the bot is ready
    starting = Marsho(Config(marsho_base_url=fake.base_url, marsho_lang="en", marsho_group_context_default="on",
                             marsho_active_default=1.0), tmp_path)
    try:
        answer = await ask(app, starting, before=("what a day", "nice weather"))
    finally:
        logger.remove(sink_id)
    assert answer == STARTING
    assert errors == [] and fake.requests == []


async def test_a_question_under_way_when_the_bot_stops_finishes_on_the_services_it_found(
    fake: FakeOpenAI, tmp_path: Path, closed: list[str]
) -> None:
    """A stop (the bot shutting down) tears the services down while a question may still be at
    the endpoint: its turn ends on the engine it started with, not with 'still starting', and
    marks no recent chat in a closed log."""
    from nonebot_plugin_marsho.chat.ask import _carried
    from nonebot_plugin_marsho.chat.commands.registry import CommandContext, Registry

    bot = whole_bot(fake, tmp_path, marsho_memory=False)
    await bot.start()
    services = bot.services
    assert services is not None
    context = CommandContext(app=bot, bot=Any, event=Any, where=Any, role="member", key="k",  # type: ignore[arg-type]
                             shared=False, text="hi", commands=Registry(()), services=services)
    await bot.stop()
    assert context.engine is services.engine
    with pytest.raises(NotReadyError):
        bot.require_engine()
    _carried(bot, Any, "k", Any, stored=True)  # type: ignore[arg-type]  # the log is closed: nothing to mark
