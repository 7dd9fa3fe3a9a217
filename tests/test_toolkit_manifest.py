"""toolkit.json: toolkits that send data out or are dangerous stay off until enabled."""

from __future__ import annotations

import json
from pathlib import Path

from nonebot_plugin_marsho.tools import ToolsetSource, load_toolset

INIT = '''
def ping() -> str:
    """Answer pong."""
    return "pong"
'''


def make_kit(parent: Path, name: str, manifest: object | None) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "__init__.py").write_text(INIT, encoding="utf-8")
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (folder / "toolkit.json").write_text(text, encoding="utf-8")
    return folder


def test_an_opt_in_toolkit_is_off_until_enabled(tmp_path: Path) -> None:
    make_kit(tmp_path, "net", {"enabled_by_default": False, "sends": "questions, to example.org"})
    make_kit(tmp_path, "local", {"enabled_by_default": True})
    make_kit(tmp_path, "plain", None)
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])
    assert set(toolset.tools) == {"local__ping", "plain__ping"}
    assert toolset.available == {"net": "questions, to example.org"}
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")], enabled=["net"])
    assert "net__ping" in toolset.tools and toolset.available == {}
    assert next(k for k in toolset.toolkits if k.name == "net").sends == "questions, to example.org"


def test_a_broken_manifest_is_reported_with_its_file(tmp_path: Path) -> None:
    folder = make_kit(tmp_path, "net", '{"enabled_by_default": nope}')
    make_kit(tmp_path, "bad-type", {"enabled_by_default": "no"})
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])
    messages = [str(p) for p in toolset.errors]
    assert any(str(folder / "toolkit.json") in m and "line 1" in m for m in messages)
    assert any("'enabled_by_default' must be true or false" in m for m in messages)
    assert toolset.tools == {}
