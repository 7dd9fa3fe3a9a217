"""`bot.py` with a stepping clock, for bench/prompt_cache.py: every reading of the time the
prompt tells the model is BENCH_CLOCK_STEP seconds (default 25) after the previous one, so a
conversation of a few real seconds crosses many minute boundaries (the plugin itself has no such
setting: the clock is swapped here, between loading the plugin and starting the bot)."""

from __future__ import annotations

import itertools
import os
import runpy
import sys
from datetime import datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # the plugin of this checkout, as `python bot.py` would import

import nonebot  # noqa: E402

STEP = timedelta(seconds=float(os.environ.get("BENCH_CLOCK_STEP", "25")))
_load_plugin = nonebot.load_plugin


def _load_with_stepping_clock(name: str) -> object:
    plugin = _load_plugin(name)
    if name == "nonebot_plugin_marsho":
        from nonebot_plugin_marsho.plugin import marsho

        start = marsho.prompt.now().replace(second=0, microsecond=0)
        readings = itertools.count()

        def stepping() -> datetime:
            return start + STEP * next(readings)

        marsho.prompt.now = stepping
    return plugin


nonebot.load_plugin = _load_with_stepping_clock  # type: ignore[assignment]
runpy.run_path(str(REPO_ROOT / "bot.py"), run_name="__main__")
