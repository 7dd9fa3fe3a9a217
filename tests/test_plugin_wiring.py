"""The plugin reads MARSHO_MCP_FILE and MARSHO_WEBSERVICES_FILE at startup, puts their tools in
its toolset, and lists the MCP servers' state in marsho.tools."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nonebot.log import logger

from nonebot_plugin_marsho.chat.render import tools_text
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.tools import Toolset
from tests.conftest import CHAT_TOOLSET, configured

SERVER = Path(__file__).resolve().parent / "mcp_server.py"


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """What the plugin logs during the test, one message a line, without time or level."""
    messages: list[str] = []
    sink_id = logger.add(lambda message: messages.append(str(message).rstrip("\n")), format="{message}")
    yield messages
    logger.remove(sink_id)


async def test_configured_mcp_servers_join_the_toolset(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "demo": {"command": sys.executable, "args": [str(SERVER)], "permission": "everyone"},
        "broken": {"url": "ftp://nowhere"},
    }}), encoding="utf-8")
    toolset = Toolset()
    with configured(marsho_mcp_file=config) as marsho:
        manager = await marsho.start_mcp(toolset)
    try:
        assert manager is not None
        assert "demo__echo" in toolset.tools
        assert toolset.tools["demo__echo"].permission == "everyone"
        listing = tools_text(Texts("en"), toolset, manager.status())
        assert "MCP servers: demo: connected" in listing
    finally:
        await manager.stop()
    assert "demo__echo" not in toolset.tools


async def test_a_missing_mcp_file_named_in_env_is_reported(tmp_path: Path, logged: list[str]) -> None:
    missing = tmp_path / "nope.json"
    with configured(marsho_mcp_file=missing) as marsho:
        assert await marsho.start_mcp(Toolset()) is None
    assert logged == [f"marsho: MARSHO_MCP_FILE={missing} does not exist"]


def test_configured_web_services_join_the_toolset(tmp_path: Path) -> None:
    config = tmp_path / "webservices.json"
    config.write_text(json.dumps({"tools": [{
        "name": "sales", "description": "Monthly sales as a chart", "url": "http://127.0.0.1:9/x",
        "parameters": {"type": "object", "properties": {"month": {"type": "string"}}},
    }]}), encoding="utf-8")
    with configured(marsho_webservices_file=config) as marsho:
        toolset = marsho.load_toolset()
    assert "services__sales" in toolset.tools
    with configured(marsho_webservices_file=tmp_path / "missing.json") as marsho:
        toolset = marsho.load_toolset()
    assert any("MARSHO_WEBSERVICES_FILE names no file" in str(p) for p in toolset.errors)


def test_the_owner_is_told_what_loaded_what_failed_and_which_settings_name_nothing(
    marsho, logged: list[str]
) -> None:
    with configured(marsho_enabled_toolkits=["no-such-kit"], marsho_disabled_tools=["no_such_tool"],
                    marsho_tool_permissions={"nothing__here": "superuser"}) as bot:
        bot.log_toolset(bot.load_toolset())
    assert logged[0] == f"marsho: your own toolkits go in {marsho.data_dir / 'tools'}"
    assert ("marsho: toolkit owner-kit (MARSHO_TOOLKIT_DIRS) loaded: owner-kit__lookup, "
            "owner-kit__purge_cache, owner-kit__mute_everyone, owner-kit__draw_pixel") in logged
    assert (f"marsho: toolkit broken-kit not loaded: {CHAT_TOOLSET / 'broken-kit' / 'tools.json'}: "
            "invalid JSON at line 3, column 3: Expecting ',' delimiter") in logged
    assert logged[-3:] == [
        "marsho: MARSHO_ENABLED_TOOLKITS names 'no-such-kit', which did not load",
        "marsho: MARSHO_TOOL_PERMISSIONS names 'nothing__here': no such tool or toolkit",
        "marsho: MARSHO_DISABLED_TOOLS names 'no_such_tool': no such tool",
    ]
