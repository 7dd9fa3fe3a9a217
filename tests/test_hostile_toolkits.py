"""Issue 12, "safe in a hostile group": the dangerous built-in toolkits hold when the model is
steered by someone who means harm. `files` refuses a hard link (another name of the file may
be outside the workspace); `python` stays shut where the OS cannot isolate a snippet, and its
processes die with the bot; `sqlite` reads a result row by row up to a byte bound.

Every test drives the real tool, loaded from the built-in toolset and run by a ToolRunner.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.test_toolkit_dangerous import call, load

# --- files: hard links ---------------------------------------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, a file outside it) with workspace/link.txt a hard link to that file."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    os.link(secret, workspace / "link.txt")
    return workspace, secret


def files(workspace: Path) -> Any:
    return load({"files": {"workspace": str(workspace)}}, enabled=("files",))


async def test_files_refuse_to_read_or_write_a_hard_link_to_a_file_outside(
    linked: tuple[Path, Path],
) -> None:
    workspace, secret = linked
    kit = files(workspace)

    read = await call(kit, "files__read", {"path": "link.txt"})
    write = await call(kit, "files__write", {"path": "link.txt", "content": "pwned"})
    append = await call(kit, "files__write", {"path": "link.txt", "content": "!", "append": True})

    for result in (read, write, append):
        assert result.status == "error", result.content
        assert "2 hard links" in result.content and "outside the workspace" in result.content
    assert "top secret" not in read.content
    assert secret.read_text(encoding="utf-8") == "top secret"
    assert secret.stat().st_nlink == 2


async def test_files_refuse_to_move_delete_or_replace_a_hard_link(
    linked: tuple[Path, Path],
) -> None:
    workspace, secret = linked
    kit = files(workspace)
    (workspace / "folder").mkdir()
    os.link(secret, workspace / "folder" / "deep.txt")
    (workspace / "folder" / "plain.txt").write_text("plain", encoding="utf-8")
    (workspace / "new.txt").write_text("new", encoding="utf-8")

    attempts = {
        "move": await call(kit, "files__move", {"source": "link.txt", "destination": "moved.txt"}),
        "replace": await call(kit, "files__move", {"source": "new.txt", "destination": "link.txt",
                                                   "overwrite": True}),
        "delete": await call(kit, "files__delete", {"path": "link.txt"}),
        "delete the folder": await call(kit, "files__delete", {"path": "folder", "recursive": True}),
    }

    for what, result in attempts.items():
        assert result.status == "error", (what, result.content)
        assert "hard links" in result.content, (what, result.content)
    assert "folder/deep.txt" in attempts["delete the folder"].content
    assert (workspace / "link.txt").exists() and (workspace / "new.txt").exists()
    assert (workspace / "folder" / "plain.txt").exists(), "nothing is deleted before the refusal"
    assert secret.read_text(encoding="utf-8") == "top secret"


async def test_files_list_marks_a_hard_link_and_a_single_link_file_still_works(
    linked: tuple[Path, Path],
) -> None:
    workspace, secret = linked
    kit = files(workspace)

    listing = await call(kit, "files__list", {})
    assert "link.txt (10 bytes; 2 hard links, so refused" in listing.content

    secret.unlink()  # the workspace's name is now the file's only one
    assert (await call(kit, "files__read", {"path": "link.txt"})).content == "top secret"
    written = await call(kit, "files__write", {"path": "link.txt", "content": "mine"})
    assert written.status == "ok", written.content
    assert (await call(kit, "files__delete", {"path": "link.txt"})).status == "ok"
