"""The first five minutes of a new owner (issue 24): no key at all, a proxy's 400 that is really a
key or setup problem, and the retry log line. Each test drives the real LLMClient over loopback
against the fake endpoint; waits are recorded instead of taken, so no test depends on the clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nonebot_plugin_marsho.agent.llm import Fallback, LLMClient
from nonebot_plugin_marsho.redaction import logger
from tests.conftest import llm_client
from tests.fake_openai import FakeOpenAI, dropped, error, text

QUESTION = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def backup() -> Iterator[FakeOpenAI]:
    """A second endpoint: the fallback."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def second(backup: FakeOpenAI) -> Iterator[FakeOpenAI]:
    backup.reset()
    yield backup
    backup.reset()


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


def recording(client: LLMClient) -> list[float]:
    """The waits the client takes from now on, recorded instead of slept."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    client.sleep = sleep
    return waits


# --- the retry log line ----------------------------------------------------------------------------


async def test_the_retry_log_line_names_the_setting_to_check(fake: FakeOpenAI, logged: list[str]) -> None:
    fake.push(dropped(), text("answered"))
    client = llm_client(fake, retries=1)
    waits = recording(client)
    assert (await client.complete(QUESTION)).content == "answered"
    [line] = [line for line in logged if "retry 1 of 1" in line]
    assert len(waits) == 1
    assert line.rstrip().endswith("Check MARSHO_BASE_URL and that the endpoint is up."), line
    assert "{" not in line


async def test_a_fallbacks_retry_log_line_names_its_own_entry(
    fake: FakeOpenAI, second: FakeOpenAI, logged: list[str]
) -> None:
    fake.push(error(401, "bad key"))
    second.push(dropped(), text("from the backup"))
    client = llm_client(fake, retries=1, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    recording(client)
    assert (await client.complete(QUESTION)).content == "from the backup"
    [line] = [line for line in logged if "retry 1 of 1" in line]
    assert line.rstrip().endswith("Check MARSHO_FALLBACKS entry 1's base_url and that the endpoint is up."), line
