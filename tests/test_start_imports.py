"""What a start on SQLite leaves unimported, by module (tests/test_start.py checks libraries):
PostgreSQL's dialect and driver, the tokenizer, which the first count loads, the libraries of
file formats, repeats and vectors, the console adapter, the MCP client, SQLAlchemy's ORM, the
charts and the web services; and what the plugin's import keeps out of the garbage collector's
sight."""

from __future__ import annotations

from pathlib import Path

from tests.fresh_python import bot_env, run_json, run_python

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
print(json.dumps({"problem": problem, "loaded": sorted(sys.modules)}))
"""

NOT_AT_START = {
    "sqlalchemy.dialects.postgresql": "a PostgreSQL database (store/sql.SqlStore.upsert)",
    "asyncpg": "the same",
    "tiktoken": "the first token count (agent/tokens.TokenCounter.deferred)",
    "numpy": "embeddings compared, or a chart drawn (agent/embeddings.py, chat/richtext.py)",
    "pypdf": "a PDF read into the knowledge base (agent/documents/formats.py)",
    "docx": "a Word file read (the same)",
    "openpyxl": "a spreadsheet read (the same)",
    "croniter": "a reminder's cron repeat read (agent/schedule.py)",
    "isodate": "a reminder's ISO 8601 repeat read (the same)",
    "nonebot.adapters.console": "bot.py --console (bot.py imports it only then)",
    "textual": "the same (the console adapter's screen)",
    "nonebot_plugin_marsho.tools.mcp": "an MCP server configured (chat/app.Marsho.start_mcp)",
    "mcp": "the same",
    "nonebot_plugin_marsho.tools.charts": "a web service's chart answer, marsho.usage's chart "
                                          "(tools/webservices.py, chat/bill.py)",
    "nonebot_plugin_marsho.tools.webservices": "a web-services file (chat/app.Marsho.load_toolset)",
    "sqlalchemy.orm": "another plugin's AsyncSession (store/asyncio_engine.py: the store is Core only)",
}


def test_a_start_on_sqlite_imports_neither_postgresql_nor_the_tokenizer(tmp_path: Path) -> None:
    env = {**bot_env(tmp_path, model="gpt-4o-mini"), "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken")}
    for _ in range(2):  # the first creates the database (Alembic loads every dialect it knows)
        result = run_json(CHILD, tmp_path, env=env)
    assert result["problem"] == ""
    loaded = set(result["loaded"])
    assert "nonebot_plugin_marsho.store.sql" in loaded
    early = {name: why for name, why in NOT_AT_START.items() if name in loaded}
    assert early == {}, early


FROZEN_CHILD = """
import gc, json
import nonebot
from nonebot.adapters.onebot.v11 import Adapter

nonebot.init(driver="~fastapi+~httpx+~websockets")  # as bot.py does
nonebot.get_driver().register_adapter(Adapter)
before = len(gc.get_objects())
nonebot.load_plugin("nonebot_plugin_marsho")
print(json.dumps({"before": before, "frozen": gc.get_freeze_count()}))
"""


def test_the_plugins_import_keeps_what_was_loaded_before_it_out_of_the_collectors_sight(
        tmp_path: Path) -> None:
    """NoneBot's objects, and then the plugin's, are frozen as the import goes (not only once the
    bot has started): the collections the import triggers do not walk them again and again."""
    result = run_json(FROZEN_CHILD, tmp_path, env=bot_env(tmp_path, model="gpt-4o-mini"))
    assert result["frozen"] >= result["before"] > 0, result


def test_the_package_imported_without_nonebot_freezes_nothing(tmp_path: Path) -> None:
    """Used as a library (a toolkit's tests, the CLI before it initialises NoneBot), the package
    leaves the collector as it was: only the bot's own import freezes."""
    child = "import gc, nonebot_plugin_marsho; print(gc.get_freeze_count())"
    assert run_python(child, tmp_path) == "0"
