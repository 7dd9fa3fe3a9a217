"""What the bot's start loads: the plugin's import and its startup (toolkits, the database) bring
in nothing that only a tool call, a picture, a lunar date or a migration needs; those libraries
are imported where they are used (see bench/start.py for the time it saves)."""

from __future__ import annotations

from pathlib import Path

from tests.fresh_python import bot_env, run_json

CHILD = """
import asyncio, json, sys
import nonebot
from nonebot.adapters.onebot.v11 import Adapter

nonebot.init(driver="~fastapi+~httpx+~websockets")  # as bot.py does
nonebot.get_driver().register_adapter(Adapter)
nonebot.load_plugin("nonebot_plugin_marsho")
from nonebot_plugin_marsho.plugin import marsho

async def main():
    await marsho.start()
    problem = "" if marsho.ready else marsho.problem
    await marsho.stop()
    return problem

problem = asyncio.run(main())
print(json.dumps({"problem": problem, "loaded": sorted({name.split(".")[0] for name in sys.modules})}))
"""

LOADED_WHEN_USED = {
    "openai": "the first request to the endpoint (agent/model/endpoint.py)",
    "httpx2": "the same",
    "aiohttp": "the same (the SDK's transport)",
    "alembic": "a migration (the database here is at the newest revision)",
    "jsonschema": "a tool call's arguments checked, or a manifest's schema",
    "httpcore": "a picture downloaded (net/guard.py builds on it)",
    "lunar_python": "a lunar date (the clock toolkit, the zh-CN time note)",
    "lxml": "a web page parsed",
    "matplotlib": "a formula or a chart drawn",
    "PIL": "a picture drawn",
    "pint": "a unit converted",
    "mcp": "an MCP server configured",
}
"""Libraries a start must not import, and what imports them."""


def start_the_bot(workdir: Path) -> dict:
    """The plugin imported and started as bot.py does, in a process of its own."""
    result: dict = run_json(CHILD, workdir, env=bot_env(workdir))
    return result


def test_a_start_loads_no_library_that_only_later_work_needs(tmp_path: Path) -> None:
    first = start_the_bot(tmp_path)  # creates the database (Alembic runs)
    assert first["problem"] == "" and "alembic" in first["loaded"]
    again = start_the_bot(tmp_path)
    assert again["problem"] == ""
    assert "sqlalchemy" in again["loaded"] and "nonebot_plugin_marsho" in again["loaded"]
    loaded_early = {name: why for name, why in LOADED_WHEN_USED.items() if name in again["loaded"]}
    assert loaded_early == {}, "imported at start, though only this needs it: " + "; ".join(
        f"{name}: {why}" for name, why in loaded_early.items())
