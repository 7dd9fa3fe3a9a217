"""MCP servers as toolkits: the config file, and a FastMCP server (tests/mcp_server.py) reached
over stdio and over HTTP, including one that crashes mid-call and one that changes its tools."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.tools import ToolCall, ToolRunner, Toolset
from nonebot_plugin_marsho.tools.mcp import McpManager, ServerConfig, read_mcp_config
from nonebot_plugin_marsho.tools.model import ToolContext, ToolResult

SERVER = Path(__file__).resolve().parent / "mcp_server.py"
SUPERUSER = ToolContext(role="superuser")
MEMBER = ToolContext(role="member")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- helpers --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stdio_entry(tag: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER)], "env": {"MARSHO_TEST_TAG": tag}, **extra}


def configure(tmp_path: Path, servers: dict[str, Any]) -> dict[str, ServerConfig]:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    configs, problems = read_mcp_config(path)
    assert problems == []
    return configs


class HttpServer:
    """tests/mcp_server.py in a subprocess on a free loopback port."""

    def __init__(self, transport: str = "streamable-http") -> None:
        self.transport = transport
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'sse' if self.transport == 'sse' else 'mcp'}"

    def start(self) -> None:
        env = {**os.environ, "MARSHO_TEST_TAG": f"http-{self.transport}"}
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), self.transport, str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the MCP test server exited at start"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError("the MCP test server did not start listening")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    yield server
    server.stop()


async def call(
    runner: ToolRunner, name: str, arguments: dict[str, Any] | str = "{}", who: ToolContext = SUPERUSER
) -> ToolResult:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return await runner.run_one(ToolCall("call-1", name, raw), who)


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the condition was not met in time")


@pytest.fixture
async def toolset() -> AsyncIterator[Toolset]:
    yield Toolset()


# -- config ---------------------------------------------------------------------------------


def test_config_reads_the_common_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARSHO_MCP_TOKEN", "tok-123")
    path = tmp_path / "mcp.json"
    path.write_text(
        """{
  // comments are allowed
  "mcpServers": {
    "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"], "env": {"A": "1"}, "cwd": "/tmp"},
    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${MARSHO_MCP_TOKEN}"}},
    "legacy": {"url": "https://example.com/v1/sse", "permission": "everyone", "timeout": 5},
    "explicit": {"url": "https://example.com/events", "transport": "sse", "permission": "admin"},
    "off": {"command": "nothing", "disabled": true}
  }
}""",
        encoding="utf-8",
    )
    servers, problems = read_mcp_config(path)
    assert problems == []
    assert set(servers) == {"files", "remote", "legacy", "explicit", "off"}
    files = servers["files"]
    assert (files.transport, files.command, files.args) == ("stdio", "npx", ("-y", "server-files", "/tmp"))
    assert (files.env, files.cwd, files.permission, files.timeout) == ({"A": "1"}, "/tmp", "superuser", None)
    remote = servers["remote"]
    assert remote.transport == "streamable-http"
    assert remote.headers == {"Authorization": "Bearer tok-123"}
    assert (servers["legacy"].transport, servers["legacy"].permission) == ("sse", "everyone")
    assert servers["legacy"].timeout == 5
    assert (servers["explicit"].transport, servers["explicit"].permission) == ("sse", "admin")
    assert servers["off"].disabled


def test_config_problems_name_the_file_and_server(tmp_path: Path) -> None:
    assert read_mcp_config(tmp_path / "absent.json") == ({}, [])
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"a": {"command": "x"},}', encoding="utf-8")
    servers, problems = read_mcp_config(path)
    assert servers == {} and len(problems) == 1
    assert str(path) in problems[0] and "invalid JSON at line 1" in problems[0]

    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "good": {"command": "ok"},
                    "nothing": {"args": []},
                    "both": {"command": "x", "url": "http://h/mcp"},
                    "who": {"command": "x", "permission": "root"},
                    "slow": {"url": "http://h/mcp", "timeout": -1},
                    "odd": {"url": "http://h/mcp", "transport": "websocket"},
                    "ftp": {"url": "ftp://h/mcp"},
                    "secret": {"command": "x", "env": {"K": "${MARSHO_SURELY_UNSET_VAR}"}},
                    "list": ["not", "an", "object"],
                }
            }
        ),
        encoding="utf-8",
    )
    servers, problems = read_mcp_config(path)
    assert list(servers) == ["good"]
    assert all(p.startswith(f"{path}: MCP server '") for p in problems), problems
    text = "\n".join(problems)
    for name, words in {
        "nothing": "needs a 'command'",
        "both": "has both 'command' and 'url'",
        "who": "'permission' must be one of",
        "slow": "'timeout' must be a positive number",
        "odd": "unknown transport 'websocket'",
        "ftp": "'url' must be an http:// or https:// URL",
        "secret": "'env.K' uses the environment variable MARSHO_SURELY_UNSET_VAR, which is not set",
        "list": "must be a JSON object",
    }.items():
        assert f"MCP server {name!r}: {words}" in text, (name, text)

    path.write_text('{"servers": {}}', encoding="utf-8")
    assert "mcpServers" in read_mcp_config(path)[1][0]


# -- over stdio and HTTP ---------------------------------------------------------------------


async def test_stdio_and_http_servers(tmp_path: Path, http_server: HttpServer, toolset: Toolset) -> None:
    configs = configure(
        tmp_path,
        {
            "local": stdio_entry("local", timeout=1),
            "web": {"url": http_server.url},
            "gone": {"url": f"http://127.0.0.1:{free_port()}/mcp"},
            "off": {"command": "nothing", "disabled": True},
            "open": {**stdio_entry("open"), "permission": "everyone"},
        },
    )
    manager = McpManager(configs, toolset, call_timeout=10)
    runner = ToolRunner(toolset, timeout=10)
    started = time.monotonic()
    # the unreachable server does not hold it up (until `wait`), nor make it raise
    await manager.start(wait=60)
    try:
        assert time.monotonic() - started < 30
        status = manager.status()
        assert status["local"] == status["web"] == status["open"] == "connected (8 tools)"
        assert status["gone"].startswith("retrying in ") and "ConnectError" in status["gone"], status
        assert status["off"] == "disabled"

        kits = {kit.name: kit for kit in toolset.toolkits}
        assert set(kits) == {"local", "web", "open"}
        assert {tool.name for tool in kits["web"].tools} == {
            f"web__{name}" for name in ("echo", "add", "whoami", "fail", "crash", "slow", "picture", "grow")
        }
        echo = toolset.tools["local__echo"]
        assert echo.description == "Repeat the text back."
        assert echo.parameters["required"] == ["text"] and echo.toolkit == "local"
        assert echo.permission == "superuser"  # the default

        for server in ("local", "web"):
            result = await call(runner, f"{server}__echo", {"text": "hello"})
            assert (result.status, result.content) == ("ok", "echo: hello")
            result = await call(runner, f"{server}__add", {"a": 2, "b": 3})
            assert (result.status, result.content) == ("ok", "5")
        assert (await call(runner, "web__whoami")).content == "http-streamable-http"
        assert (await call(runner, "local__whoami")).content == "local"

        # arguments are checked against the input schema before anything is sent
        bad = await call(runner, "web__add", {"a": "two", "b": 3})
        assert bad.status == "bad_arguments" and "'two' is not of type 'integer'" in bad.content
        missing = await call(runner, "local__echo", {})
        assert missing.status == "bad_arguments" and "'text' is a required property" in missing.content

        # superusers only by default; the server's permission when configured
        denied = await call(runner, "local__echo", {"text": "hi"}, who=MEMBER)
        assert denied.status == "denied"
        assert (await call(runner, "open__whoami", who=MEMBER)).content == "open"
        assert "local__echo" not in {s["function"]["name"] for s in toolset.schemas(MEMBER)}

        failed = await call(runner, "web__fail", {"message": "no such city"})
        assert failed.status == "error" and "no such city" in failed.content

        picture = await call(runner, "local__picture")
        assert picture.status == "ok" and picture.content == "a tiny picture"
        assert len(picture.images) == 1 and picture.images[0].startswith(PNG_MAGIC)

        # the server's own timeout (1 s) bounds the call; the connection stays up
        slow = await call(runner, "local__slow", {"seconds": 5})
        assert slow.status == "error" and "did not answer within 1 s" in slow.content
        assert (await call(runner, "local__echo", {"text": "still"})).content == "echo: still"
    finally:
        await manager.stop()
    assert toolset.tools == {} and toolset.toolkits == []
    assert set(manager.status().values()) <= {"not started", "disabled"}


async def test_sse_server(tmp_path: Path, toolset: Toolset) -> None:
    server = HttpServer("sse")
    server.start()
    manager = McpManager(configure(tmp_path, {"legacy": {"url": server.url}}), toolset)
    try:
        await manager.start()
        assert manager.servers["legacy"].transport == "sse"
        assert manager.status()["legacy"] == "connected (8 tools)"
        result = await call(ToolRunner(toolset), "legacy__echo", {"text": "sse"})
        assert (result.status, result.content) == ("ok", "echo: sse")
    finally:
        await manager.stop()
        server.stop()


# -- failures ---------------------------------------------------------------------------------


async def test_crash_mid_call_is_an_error_then_reconnects(tmp_path: Path, toolset: Toolset) -> None:
    configs = configure(tmp_path, {"fragile": stdio_entry("fragile"), "steady": stdio_entry("steady")})
    manager = McpManager(configs, toolset, backoff=(0.3, 1.0))
    runner = ToolRunner(toolset, timeout=10)
    await manager.start()
    try:
        crashed = await call(runner, "fragile__crash")
        assert crashed.status == "error"
        assert "fragile stopped answering during the call to crash" in crashed.content
        assert "reconnected in the background" in crashed.content

        # the other server goes on meanwhile
        assert (await call(runner, "steady__whoami")).content == "steady"
        assert manager.status()["steady"] == "connected (8 tools)"

        async def back() -> bool:
            return (await call(runner, "fragile__whoami")).content == "fragile"

        await eventually(back)
        assert manager.status()["fragile"] == "connected (8 tools)"
    finally:
        await manager.stop()


async def test_a_server_that_fails_to_start_is_retried(tmp_path: Path, toolset: Toolset) -> None:
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit('no such module: x')"]}
    configs = configure(tmp_path, {"broken": broken, "fine": stdio_entry("fine")})
    manager = McpManager(configs, toolset, backoff=(0.2, 0.4))
    await manager.start()
    try:
        status = manager.status()
        assert status["fine"] == "connected (8 tools)"
        assert status["broken"].startswith("retrying in "), status
        assert "no such module: x" in status["broken"]  # its stderr explains why
        assert not any(kit.name == "broken" for kit in toolset.toolkits)
        await asyncio.sleep(1)  # a few more attempts, backed off, without disturbing the rest
        assert (await call(ToolRunner(toolset), "fine__whoami")).content == "fine"
    finally:
        await manager.stop()


async def test_http_server_crash_mid_call_and_restart(toolset: Toolset, tmp_path: Path) -> None:
    server = HttpServer()
    server.start()
    manager = McpManager(configure(tmp_path, {"web": {"url": server.url}}), toolset, backoff=(0.3, 0.6))
    manager.busy_ping_interval = 0.3  # a dead HTTP server says nothing: pings during calls find it
    runner = ToolRunner(toolset, timeout=10)
    try:
        await manager.start()
        started = time.monotonic()
        crashed = await call(runner, "web__crash")
        assert crashed.status == "error" and "web stopped answering during the call" in crashed.content
        assert time.monotonic() - started < 9  # found by the pings, not at the runner's 10 s
        server.start()  # the same port, again

        async def back() -> bool:
            return (await call(runner, "web__echo", {"text": "again"})).content == "echo: again"

        await eventually(back)
    finally:
        await manager.stop()
        server.stop()


# -- tool list changes --------------------------------------------------------------------------


async def test_tool_list_change_is_picked_up(tmp_path: Path, toolset: Toolset) -> None:
    configs = configure(tmp_path, {"grower": stdio_entry("grower")})
    manager = McpManager(configs, toolset)
    runner = ToolRunner(toolset)
    await manager.start()
    try:
        assert "grower__extra" not in toolset.tools
        assert (await call(runner, "grower__grow", {"name": "extra"})).content == "added extra"

        async def listed() -> bool:
            return "grower__extra" in toolset.tools

        await eventually(listed, 5)
        assert manager.status()["grower"] == "connected (9 tools)"
        assert [kit.name for kit in toolset.toolkits] == ["grower"]  # replaced, not added twice
        assert toolset.tools["grower__extra"].description == "The extra tool, added at run time."
        result = await call(runner, "grower__extra", {"x": "hi"})
        assert (result.status, result.content) == ("ok", "extra: hi")
    finally:
        await manager.stop()
