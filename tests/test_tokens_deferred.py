"""The token counter a start makes (agent/tokens.load_counter) looks its model up at its first
count: a start imports no tokenizer and downloads nothing, an encoding on disk is loaded at the
first count, and one tiktoken would download is fetched in a thread of its own, the estimate
counting meanwhile."""

from __future__ import annotations

import hashlib
import shutil
import threading
from importlib.resources import files
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from nonebot_plugin_marsho.agent.tokens import estimate_tokens, load_counter

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_FILE = files("tiktoken_ext") / "data" / "cl100k_base.tiktoken"
SAMPLE = "杭州今天晴，21°C。 The weather is fine."


class Network:
    """tiktoken's downloads, recorded by thread; they fail until `online`."""

    def __init__(self) -> None:
        self.fetched: list[tuple[str, str]] = []
        self.online = False
        self.done = threading.Event()

    def read_file(self, blobpath: str) -> bytes:
        if "://" not in blobpath:
            return Path(blobpath).read_bytes()
        self.fetched.append((threading.current_thread().name, blobpath))
        try:
            if not self.online:
                raise ConnectionError(f"no internet in tests: {blobpath}")
            return Path(str(CL100K_FILE)).read_bytes()
        finally:
            self.done.set()


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Network:
    """An empty TIKTOKEN_CACHE_DIR, tiktoken's loaded encodings emptied, and its downloads
    recorded (put back after the test)."""
    net = Network()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(tiktoken.load, "read_file", net.read_file)
    return net


def wait_for_the_fetch(net: Network) -> None:
    assert net.done.wait(60)
    for thread in threading.enumerate():
        if thread.name == "marsho-tiktoken":
            thread.join(60)


async def test_an_encoding_on_disk_is_loaded_at_the_first_count(network: Network, tmp_path: Path) -> None:
    shutil.copyfile(str(CL100K_FILE), tmp_path / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    counter = await load_counter("gpt-4")
    assert "cl100k_base" not in tiktoken.registry.ENCODINGS  # nothing loaded by the start
    assert counter.count_text(SAMPLE) == len(tiktoken.get_encoding("cl100k_base").encode(SAMPLE))
    assert counter.name == "tiktoken cl100k_base"
    assert network.fetched == []


async def test_an_encoding_to_download_is_fetched_off_the_counting_thread(network: Network) -> None:
    network.online = True
    counter = await load_counter("gpt-4")
    assert counter.count_text(SAMPLE) == estimate_tokens(SAMPLE)  # not waiting for the network
    wait_for_the_fetch(network)
    assert [thread for thread, _ in network.fetched] == ["marsho-tiktoken"]
    assert counter.name == "tiktoken cl100k_base"
    assert counter.count_text(SAMPLE) == len(tiktoken.get_encoding("cl100k_base").encode(SAMPLE))


async def test_offline_and_without_the_file_the_estimate_counts(network: Network) -> None:
    counter = await load_counter("gpt-4")
    assert counter.count_text(SAMPLE) == estimate_tokens(SAMPLE)
    wait_for_the_fetch(network)
    assert counter.name == "estimate"
    assert counter.count_text(SAMPLE) == estimate_tokens(SAMPLE)
    assert network.fetched == [("marsho-tiktoken", CL100K_URL)]


async def test_a_model_tiktoken_does_not_know_is_counted_with_the_estimate(network: Network) -> None:
    counter = await load_counter("deepseek-chat")
    assert counter.count_text(SAMPLE) == estimate_tokens(SAMPLE)
    assert counter.name == "estimate"
    assert network.fetched == []
