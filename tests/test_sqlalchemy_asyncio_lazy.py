"""The store's asyncio engine comes from `sqlalchemy.ext.asyncio.engine` without the package's
`__init__` (store/asyncio_engine.py), which would import the ORM: the ORM stays unloaded, and
the package stays whole for whoever asks it for more. Each check runs in a fresh interpreter."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.fresh_python import run_json


def run_child(code: str, tmp_path: Path) -> dict[str, object]:
    result: dict[str, object] = run_json(textwrap.dedent(code), tmp_path)
    return result


def test_importing_the_store_leaves_the_orm_unloaded(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        import nonebot_plugin_marsho.store.sql, nonebot_plugin_marsho.store.memory
        import nonebot_plugin_marsho.store.knowledge
        print(json.dumps({"orm": "sqlalchemy.orm" in sys.modules,
                          "session": "sqlalchemy.ext.asyncio.session" in sys.modules,
                          "engine": "sqlalchemy.ext.asyncio.engine" in sys.modules}))
    """, tmp_path)
    assert result == {"orm": False, "session": False, "engine": True}


def test_the_orm_names_stay_importable_from_the_package_afterwards(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        import nonebot_plugin_marsho.store.sql
        from sqlalchemy.ext.asyncio import AsyncAttrs, AsyncSession, async_scoped_session
        from sqlalchemy.ext.asyncio import async_sessionmaker
        from sqlalchemy.ext.asyncio import session
        print(json.dumps({"orm": "sqlalchemy.orm" in sys.modules,
                          "same": [AsyncSession is session.AsyncSession,
                                   async_sessionmaker is session.async_sessionmaker,
                                   AsyncAttrs is session.AsyncAttrs],
                          "scoped": async_scoped_session.__module__}))
    """, tmp_path)
    assert result == {"orm": True, "same": [True, True, True], "scoped": "sqlalchemy.ext.asyncio.scoping"}


def test_the_package_as_a_module_completes_itself_on_an_attribute(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        import nonebot_plugin_marsho.store.sql
        import sqlalchemy.ext
        import sqlalchemy.ext.asyncio as m
        before = "sqlalchemy.orm" in sys.modules
        maker = m.async_sessionmaker.__name__
        print(json.dumps({"before": before, "maker": maker, "orm": "sqlalchemy.orm" in sys.modules,
                          "attribute": sqlalchemy.ext.asyncio is m,
                          "hook_left": "__getattr__" in vars(m), "file": m.__file__.endswith("__init__.py")}))
    """, tmp_path)
    assert result == {"before": False, "maker": "async_sessionmaker", "orm": True, "attribute": True,
                      "hook_left": False, "file": True}


def test_dir_and_import_star_see_the_whole_package(tmp_path: Path) -> None:
    result = run_child("""
        import json
        import nonebot_plugin_marsho.store.sql
        import sqlalchemy.ext.asyncio as m
        listed = "AsyncSession" in dir(m)
        namespace = {}
        exec("from sqlalchemy.ext.asyncio import *", namespace)
        print(json.dumps({"dir": listed, "star": sorted({"AsyncSession", "create_async_engine",
                                                         "async_scoped_session"} & set(namespace))}))
    """, tmp_path)
    assert result == {"dir": True, "star": ["AsyncSession", "async_scoped_session", "create_async_engine"]}


def test_a_package_imported_before_the_store_is_used_unchanged(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        import sqlalchemy.ext.asyncio as before
        from nonebot_plugin_marsho.store import asyncio_engine, sql
        print(json.dumps({"same": sys.modules["sqlalchemy.ext.asyncio"] is before,
                          "engine": sql.AsyncEngine is before.AsyncEngine,
                          "create": asyncio_engine.create_async_engine is before.create_async_engine,
                          "hook": "__getattr__" in vars(before)}))
    """, tmp_path)
    assert result == {"same": True, "engine": True, "create": True, "hook": False}


def test_an_engine_runs_core_queries_and_run_sync_without_the_orm(tmp_path: Path) -> None:
    result = run_child("""
        import asyncio, json, sys
        from sqlalchemy import text
        from nonebot_plugin_marsho.store.asyncio_engine import create_async_engine

        async def main():
            engine = create_async_engine("sqlite+aiosqlite://")
            async with engine.begin() as conn:
                one = (await conn.execute(text("SELECT 1"))).scalar_one()
                two = await conn.run_sync(lambda sync: sync.execute(text("SELECT 2")).scalar_one())
            await engine.dispose()
            return [one, two]

        print(json.dumps({"values": asyncio.run(main()), "orm": "sqlalchemy.orm" in sys.modules}))
    """, tmp_path)
    assert result == {"values": [1, 2], "orm": False}


def test_a_submodule_or_a_tools_probe_asked_of_the_package_does_not_run_its_init(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        import nonebot_plugin_marsho.store.sql
        import sqlalchemy.ext.asyncio as m
        from nonebot_plugin_marsho.store.deferred import is_deferred
        probed = hasattr(m, "__wrapped__")
        result = m.result.AsyncResult.__name__
        print(json.dumps({"probed": probed, "result": result, "deferred": is_deferred(m),
                          "orm": "sqlalchemy.orm" in sys.modules}))
    """, tmp_path)
    assert result == {"probed": False, "result": "AsyncResult", "deferred": True, "orm": False}
