"""mkdocs hooks of the documentation site (mkdocs.yml: `hooks: [scripts/mkdocs_hooks.py]`).

`on_pre_build` makes the pictures (scripts/docs_pictures.py) into the docs folder. mkdocs 1.6
runs it before it collects the files, so a fresh clone's `mkdocs build` has them on its pages.
Pictures newer than the script and every module of the plugin are kept as they are: `mkdocs
serve` builds again whenever a file in the docs folder changes, and pictures made on every build
would start the next one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

import docs_pictures  # noqa: E402  (light: it imports the bot only in its workers)

SCRIPT = Path(docs_pictures.__file__).resolve()
SOURCES = (SCRIPT, SCRIPTS.parent / "bot.py", SCRIPTS.parent / "nonebot_plugin_marsho")
"""What the pictures are made of: when any of it changes, they are made again."""

SECONDS = 300
"""How long the script may take (about 20 s on a quiet machine; it stops its own bots sooner)."""


def _newest_source() -> float:
    files = [path for source in SOURCES
             for path in ([source] if source.is_file() else source.rglob("*.py"))]
    return max(path.stat().st_mtime for path in files)


def stale(docs_dir: Path) -> bool:
    """True when a picture is missing or older than what it is made of."""
    made = docs_pictures.picture_paths(docs_dir)
    if not all(path.is_file() for path in made):
        return True
    return min(path.stat().st_mtime for path in made) < _newest_source()


def on_pre_build(config: Any, **_: Any) -> None:
    docs_dir = Path(config["docs_dir"])
    if not stale(docs_dir):
        return
    try:
        done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(docs_dir)], capture_output=True,
                              text=True, timeout=SECONDS, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PluginError(f"scripts/docs_pictures.py took more than {SECONDS} s") from None
    if done.returncode != 0:
        raise PluginError(f"scripts/docs_pictures.py could not make the pictures:\n"
                          f"{done.stderr.strip() or done.stdout.strip()}")
