"""Code run in a fresh interpreter, for the tests of what an import or a start loads (sys.modules
as a bot process's, nothing this test process imported).

The child gets PATH and the repository on PYTHONPATH, never the developer's environment, plus what
a test adds (`bot_env`: the folders and endpoint a bot's start needs). What it prints last is the
answer; a child that fails fails the test with the end of its stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def bot_env(workdir: Path, *, model: str = "fake-model") -> dict[str, str]:
    """What the plugin's start needs: localstore's folders in `workdir`, an endpoint that is never
    asked (nothing listens on port 9)."""
    return {
        "LOCALSTORE_DATA_DIR": str(workdir / "data"), "LOCALSTORE_CACHE_DIR": str(workdir / "cache"),
        "LOCALSTORE_CONFIG_DIR": str(workdir / "config"),
        "MARSHO_BASE_URL": "http://127.0.0.1:9/v1", "MARSHO_API_KEY": "k", "MARSHO_MODEL": model,
    }


def run_python(code: str, cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """The last line `code` prints, run as `python -c code args...` in `cwd`."""
    child_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=child_env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def run_json(code: str, cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> Any:
    """What `code` prints last, read as JSON."""
    return json.loads(run_python(code, cwd, *args, env=env))
