"""Test set-up: a fake endpoint on loopback, then NoneBot with the plugin loaded against it.

NoneBot is initialised here, in pytest_configure, rather than in nonebug's fixture: the plugin
reads its config when imported, and test modules import plugin modules at collection time, which
only works once the plugin has been loaded by NoneBot.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI

TESTS = Path(__file__).resolve().parent
CHAT_TOOLSET = TESTS / "toolsets" / "chat"

SECRET = "sk-test-secret-4711"
"""Preset for tests/toolsets/chat/owner-kit: must never reach the endpoint or a reply."""
SUPERUSER_ID = "10099"

FAKE = FakeOpenAI()
DATA_DIR = Path(tempfile.mkdtemp(prefix="marsho-test-data-"))


def _runs_tests(config: pytest.Config) -> bool:
    """False in pytest-xdist's controller: its workers collect and run the tests, each with its
    own endpoint, data folder and NoneBot."""
    return hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None) in (None, 0)


_TEMP_DIR = pytest.StashKey[str]()


def _own_temp_dir(config: pytest.Config) -> None:
    """A pytest-xdist worker's temporary files (and its bot processes') go in a folder of its own:
    the Python sandbox's next load removes every marsho-python-* folder no run holds, another
    worker's too, and tests count those folders."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is None:
        return
    folder = tempfile.mkdtemp(prefix=f"marsho-tests-{worker}-")
    os.chmod(folder, 0o1777)  # like /tmp: tests/postgres_server.py runs the server as postgres
    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    config.stash[_TEMP_DIR] = folder


def pytest_configure(config: pytest.Config) -> None:
    if not _runs_tests(config):
        return
    _own_temp_dir(config)
    import nonebot
    from nonebot.adapters.console import Adapter as ConsoleAdapter
    from nonebot.adapters.discord import Adapter as DiscordAdapter
    from nonebot.adapters.feishu import Adapter as FeishuAdapter
    from nonebot.adapters.kaiheila import Adapter as KaiheilaAdapter
    from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter
    from nonebot.adapters.onebot.v12 import Adapter as OneBotV12Adapter
    from nonebot.adapters.qq import Adapter as QQAdapter
    from nonebot.adapters.satori import Adapter as SatoriAdapter
    from nonebot.adapters.telegram import Adapter as TelegramAdapter

    FAKE.start()
    # the tests' settings alone: not the developer's .env, nor MARSHO_* exported in the shell
    for name in [n for n in os.environ if n.upper().startswith(("MARSHO", "MARSHOAI"))]:
        del os.environ[name]
    nonebot.init(
        _env_file=(str(DATA_DIR / "no-such.env"),),  # a str would read ./.env too
        # the HTTP and WebSocket clients: every adapter of tests/test_platforms.py needs them
        # (no bot is configured, so none connects anywhere)
        driver="~fastapi+~httpx+~websockets",
        console_headless_mode=True,  # the Console adapter without its terminal UI
        command_start={"/"},
        localstore_data_dir=str(DATA_DIR),
        localstore_cache_dir=str(DATA_DIR / "cache"),
        localstore_config_dir=str(DATA_DIR / "config"),
        marsho_base_url=FAKE.base_url,
        marsho_api_key="test-key",
        marsho_model="fake-model",
        marsho_toolkit_dirs=[str(CHAT_TOOLSET)],
        marsho_toolkit_settings={"owner-kit": {"api_key": SECRET}},
        superusers={SUPERUSER_ID},
        marsho_tool_timeout=5,
        marsho_timeout=5,
        # a scripted failure reaches the chat as it is; tests/test_providers.py covers retries
        marsho_retries=0,
        # the tests read the English texts; tests/test_i18n.py checks zh-CN, the default
        marsho_lang="en",
        # the time goes after each question (the turn's note): a question is sent as it was
        # asked unless a test is about the time (tests/test_persona.py turns it on)
        marsho_time_prompt=False,
    )
    driver = nonebot.get_driver()
    for adapter in (OneBotV11Adapter, OneBotV12Adapter, QQAdapter, TelegramAdapter, DiscordAdapter,
                    KaiheilaAdapter, FeishuAdapter, SatoriAdapter, ConsoleAdapter):
        driver.register_adapter(adapter)
    nonebot.load_plugin("nonebot_plugin_marsho")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _runs_tests(config):
        FAKE.stop()
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    if _TEMP_DIR in config.stash:
        shutil.rmtree(config.stash[_TEMP_DIR], ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _nonebot_init() -> None:
    """Replaces nonebug's own: NoneBot was initialised in pytest_configure."""
    from nonebot.matcher import matchers
    from nonebug.provider import NoneBugProvider

    matchers.set_provider(NoneBugProvider)


OPEN_CLIENTS: list = []
"""LLMClients made by tests; closed after each test so no connection pool outlives it."""


def llm_client(endpoint: FakeOpenAI | str, **options):
    """An LLMClient on the fake endpoint (or a base URL), closed when the test ends."""
    from nonebot_plugin_marsho.agent.llm import LLMClient

    options = {"api_key": "k", "model": "fake-model", "timeout": 5, **options}
    base_url = endpoint if isinstance(endpoint, str) else endpoint.base_url
    client = LLMClient(base_url=base_url, **options)
    OPEN_CLIENTS.append(client)
    return client


@pytest.fixture(autouse=True)
async def _close_llm_clients() -> AsyncIterator[None]:
    yield
    while OPEN_CLIENTS:
        await OPEN_CLIENTS.pop().close()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[FakeOpenAI]:
    """A fake endpoint of the module's own, for the bot processes its tests start (the plugin's
    FAKE serves the pytest process)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """The fake endpoint the plugin talks to, emptied before and after each test."""
    FAKE.reset()
    yield FAKE
    FAKE.reset()


@pytest.fixture
def marsho():
    """The bot the plugin assembled from the test settings above (the one handlers use)."""
    from nonebot_plugin_marsho.chat.app import running

    return running.get()


@contextmanager
def configured(**settings: Any) -> Iterator[Any]:
    """Handlers use a bot with these settings (`marsho_at=True`...) until the block ends: its own
    limits, cooldowns and prompt, sharing the running bot's engine and database."""
    from nonebot_plugin_marsho.chat.app import running

    with running.using(running.get().with_config(**settings)) as app:
        yield app


@pytest.fixture
async def plugin_engine(marsho, tmp_path: Path):
    """The plugin's running engine, with an empty history (and nicknames, groups' settings and
    recent chat) for this test. The recent chat has a database file of its own: its writes run in
    the background, beside the handlers' reads, which one in-memory SQLite connection cannot
    serve at once (a file is what the bot uses; it is created only when a test uses it)."""
    from nonebot_plugin_marsho.agent.chatlog import ChatLog
    from nonebot_plugin_marsho.agent.persona import GroupPersonas, Nicknames
    from nonebot_plugin_marsho.chat.active import ActiveReplies
    from nonebot_plugin_marsho.store.sql import SqlStore

    engine = marsho.require_engine()
    saved = engine.history, marsho.nicknames, marsho.chat_log, marsho.personas
    engine.history = store = SqlStore("sqlite://")
    marsho.nicknames = Nicknames(store)
    marsho.personas = GroupPersonas(store)
    config = marsho.config
    marsho.chat_log = ChatLog(
        SqlStore(f"sqlite:///{tmp_path / 'chat.db'}"), size=config.marsho_group_context,
        ttl=config.marsho_group_context_ttl, default_on=config.marsho_group_context_default == "on", choices={})
    # the groups' active-reply choices too: one test's `marsho.active 1` in its group must not
    # make the next file's bot (on another xdist worker's order) think a group has them on
    services = marsho.built()
    saved_active = services.active
    services.active = ActiveReplies.from_config(config, store, marsho.prompt.now)
    yield engine
    services.active = saved_active
    await marsho.chat_log.close()
    await marsho.chat_log.store.close()
    engine.history, marsho.nicknames, marsho.chat_log, marsho.personas = saved
    await store.close()


@pytest.fixture
async def book(marsho, plugin_engine, tmp_path: Path):
    """The running bot's memory (MemoryBook), on an empty database of this test's own (a file: the
    marks of use are written in the background, beside the handlers' reads); its settings, which a
    test may change, restored after."""
    from nonebot_plugin_marsho.store.memory import MemoryStore
    from nonebot_plugin_marsho.store.sql import SqlStore

    memory_book = marsho.memory_book
    assert memory_book is not None
    saved = dict(memory_book.__dict__)
    store = SqlStore(f"sqlite:///{tmp_path / 'memory.db'}")
    memory_book.store = MemoryStore(store)
    memory_book._owners = None  # who has memories: in this store, not in another test's
    yield memory_book
    await memory_book.settled()
    memory_book.__dict__.update(saved)
    await store.close()
