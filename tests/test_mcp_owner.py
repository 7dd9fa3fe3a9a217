"""MCP servers as the bot's owner meets them (issue 13): servers that hang at the handshake, print
garbage, exit, or have tools that need MCP tasks (tests/mcp_odd_server.py), what each failure
says, what a server's environment holds, and a bot that starts without waiting for a slow server."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.chat.render import tools_text
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.tools import ToolCall, ToolRunner, Toolset
from nonebot_plugin_marsho.tools.mcp import INHERITED_ENVIRONMENT, McpManager, read_mcp_config
from nonebot_plugin_marsho.tools.model import ToolContext

ODD = Path(__file__).resolve().parent / "mcp_odd_server.py"
OWNER = ToolContext(role="superuser")


def odd(mode: str, *extra: str, **entry: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(ODD), mode, *extra], **entry}


def write_config(tmp_path: Path, servers: dict[str, Any]) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[Any]:
    """start(servers, **manager options) -> a started manager (one try each, 1.5 s handshake);
    every manager is stopped when the test ends."""
    managers: list[McpManager] = []

    async def start(servers: dict[str, Any], *, toolset: Toolset | None = None,
                    environ: dict[str, str] | None = None, **options: Any) -> McpManager:
        configs, problems = read_mcp_config(write_config(tmp_path, servers), environ=environ)
        assert problems == []
        connect_timeout = options.pop("connect_timeout", 1.5)
        manager = McpManager(configs, toolset if toolset is not None else Toolset(),
                             **{"retry": False, **options})
        manager.connect_timeout = connect_timeout
        managers.append(manager)
        await manager.start(wait=10)
        return manager

    yield start
    for manager in managers:
        await manager.stop()


# -- a handshake that fails says what happened ---------------------------------------------------


async def test_a_server_that_hangs_at_the_handshake_is_reported_as_silent_with_its_stderr(started: Any) -> None:
    began = time.monotonic()
    manager = await started({"hung": odd("hang")})
    assert time.monotonic() - began < 8  # the handshake's bound, not the SDK's
    status = manager.status()["hung"]
    assert status.code == "mcp.failed"
    assert "no answer to the MCP handshake in 1.5 s" in status
    assert "its stderr: loading the index..." in status
    assert "TimeoutError" not in status


async def test_a_server_that_prints_garbage_is_reported_with_the_first_bytes_it_wrote(started: Any) -> None:
    manager = await started({"junk": odd("garbage")})
    status = manager.status()["junk"]
    assert "no answer to the MCP handshake in 1.5 s" in status
    assert "it wrote non-JSON to stdout: 'Serving HTTP on 0.0.0.0 port 8000" in status


async def test_a_server_that_exits_is_reported_at_once_with_its_exit_code_and_stderr(started: Any) -> None:
    began = time.monotonic()
    manager = await started({"dies": odd("exit")}, connect_timeout=60)
    assert time.monotonic() - began < 30  # not the handshake's timeout
    status = manager.status()["dies"]
    assert "it exited with code 7 during the MCP handshake" in status
    assert "Error: FOO_API_KEY is not set" in status


async def test_a_command_that_is_not_installed_says_so(started: Any) -> None:
    manager = await started({"absent": {"command": "marsho-surely-not-installed"}})
    status = manager.status()["absent"]
    assert "cannot run 'marsho-surely-not-installed'" in status
    assert "on the PATH the server sees" in status


async def test_a_failed_server_is_retried_when_the_manager_retries(started: Any) -> None:
    manager = await started({"dies": odd("exit")}, retry=True, backoff=(5.0, 5.0))
    status = manager.status()["dies"]
    assert status.startswith("retrying in ") and "exited with code 7" in status


# -- tools that need MCP tasks -------------------------------------------------------------------


async def test_tools_that_require_mcp_tasks_are_not_offered_and_the_rest_work(started: Any) -> None:
    toolset = Toolset()
    manager = await started({"odd": odd("tasks", permission="everyone")}, toolset=toolset)
    assert sorted(toolset.tools) == ["odd__either", "odd__environment", "odd__plain"]
    offered = {schema["function"]["name"] for schema in toolset.schemas(OWNER)}
    assert "odd__later" not in offered and "odd__either" in offered  # "optional" is callable
    status = manager.status()["odd"]
    assert status == "connected (3 tools; not offered, they need MCP tasks: later)"
    assert "later 需要 MCP 任务" in tools_text(Texts("zh-CN"), toolset, manager.status())
    report = manager.report()[0]
    assert report.unsupported == ["later"] and len(report.tools) == 3
    result = await ToolRunner(toolset).run_one(ToolCall("c1", "odd__plain", '{"text": "hi"}'), OWNER)
    assert (result.status, result.content) == ("ok", "plain: hi")


# -- what a server sees ----------------------------------------------------------------------------


async def test_a_stdio_server_sees_only_the_inherited_variables_its_env_and_its_cwd(
    started: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARSHO_OWNER_SECRET_THING", "not for servers")
    monkeypatch.setenv("MARSHO_TEST_ODD_TAG", "from ${}")
    folder = tmp_path / "work"
    folder.mkdir()
    toolset = Toolset()
    await started({"odd": odd("tasks", env={"ODD_TAG": "${MARSHO_TEST_ODD_TAG}"}, cwd=str(folder))},
                  toolset=toolset, environ=dict(os.environ))
    result = await ToolRunner(toolset).run_one(ToolCall("c1", "odd__environment", "{}"), OWNER)
    seen = json.loads(result.content)
    assert seen["tag"] == "from ${}"
    assert Path(seen["cwd"]).resolve() == folder.resolve()
    # LC_CTYPE: Python itself sets it in a C locale (PEP 538)
    assert set(seen["env"]) <= {*INHERITED_ENVIRONMENT, "ODD_TAG", "LC_CTYPE"}
    assert "PATH" in seen["env"] and "MARSHO_OWNER_SECRET_THING" not in seen["env"]


# -- the bot does not wait ------------------------------------------------------------------------


async def test_the_bot_starts_without_waiting_for_a_slow_server_whose_tools_join_when_ready(
    tmp_path: Path,
) -> None:
    from nonebot_plugin_marsho.chat.app import running

    go = tmp_path / "go"  # the slow server is silent until this exists, however long start() takes
    config = write_config(tmp_path, {"slow": odd("until", str(go)), "quick": odd("tasks")})
    base = running.get().with_config(marsho_mcp_file=config,
                                     marsho_database_url=f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    app = dataclasses.replace(base, services=None, data_dir=tmp_path)
    await app.start()
    try:
        assert app.engine is not None and app.mcp is not None
        assert app.mcp.status()["slow"] == "starting"
        assert "slow: starting" in tools_text(Texts("en"), app.engine.toolset, app.mcp.status())
        assert "slow__plain" not in app.engine.toolset.tools
        go.touch()
        assert await app.mcp.wait_started(60)
        assert app.mcp.status()["slow"].startswith("connected (3 tools")
        assert "slow__plain" in app.engine.toolset.tools and "quick__plain" in app.engine.toolset.tools
    finally:
        await app.stop()
