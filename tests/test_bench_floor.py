"""bench/floor.py keeps working: in its smoke mode the thinnest plugin and Marsho each start as
bot.py does, answer a question quoting it, and answer two tiny bursts (no figure is judged)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import floor  # noqa: E402

pytestmark = pytest.mark.e2e


async def test_floor_bench_smoke_answers_on_both_sides() -> None:
    said: list[str] = []
    sides = await floor.measure(floor.parse(["--smoke"]), say=said.append)

    assert [side.label for side in sides] == ["floor", "marsho"]
    for side in sides:
        # one question answered (a reply quoting it: sim.reply_to), one burst of each size
        # answered "ok" by every group (concurrent_sessions.burst checks each text)
        assert len(side.figures["turn"]) == 1, side.label
        assert len(side.figures["start"]) == 1, side.label
        assert len(side.figures["burst20"]) == len(side.figures["burst200"]) == 1, side.label
    assert len(said) == 2

