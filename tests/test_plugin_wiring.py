"""The plugin reads MARSHO_MCP_FILE and MARSHO_WEBSERVICES_FILE at startup, puts their tools in
its toolset, and lists the MCP servers' state in marsho.tools."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nonebot_plugin_marsho import plugin
from nonebot_plugin_marsho.chat.render import tools_text
from nonebot_plugin_marsho.tools import Toolset

SERVER = Path(__file__).resolve().parent / "mcp_server.py"


async def test_configured_mcp_servers_join_the_toolset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "demo": {"command": sys.executable, "args": [str(SERVER)], "permission": "everyone"},
        "broken": {"url": "ftp://nowhere"},
    }}), encoding="utf-8")
    monkeypatch.setattr(plugin.plugin_config, "marsho_mcp_file", config)
    toolset = Toolset()
    manager = await plugin.start_mcp(toolset)
    try:
        assert manager is not None
        assert "demo__echo" in toolset.tools
        assert toolset.tools["demo__echo"].permission == "everyone"
        listing = tools_text(toolset, manager.status())
        assert "MCP servers: demo: connected" in listing
    finally:
        await manager.stop()
    assert "demo__echo" not in toolset.tools


async def test_a_missing_mcp_file_named_in_env_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugin.plugin_config, "marsho_mcp_file", tmp_path / "nope.json")
    assert await plugin.start_mcp(Toolset()) is None


def test_configured_web_services_join_the_toolset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "webservices.json"
    config.write_text(json.dumps({"tools": [{
        "name": "sales", "description": "Monthly sales as a chart", "url": "http://127.0.0.1:9/x",
        "parameters": {"type": "object", "properties": {"month": {"type": "string"}}},
    }]}), encoding="utf-8")
    monkeypatch.setattr(plugin.plugin_config, "marsho_webservices_file", config)
    toolset = plugin.load_configured_toolset()
    assert "services__sales" in toolset.tools
    monkeypatch.setattr(plugin.plugin_config, "marsho_webservices_file", tmp_path / "missing.json")
    toolset = plugin.load_configured_toolset()
    assert any("MARSHO_WEBSERVICES_FILE names no file" in str(p) for p in toolset.errors)
