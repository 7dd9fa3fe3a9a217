"""The layers stay true: every import in the package points down (chat → config → agent → store,
tools → shared), only chat/ knows NoneBot's adapters, and nothing imports NoneBot's internals
(`nonebot.internal`: not NoneBot's public API, free to change in any release). Imports inside
functions and under TYPE_CHECKING count too: a layer that needs something above it needs it
passed in instead."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nonebot_plugin_marsho"
NAME = "nonebot_plugin_marsho"

SHARED = {"i18n", "exceptions", "fileformat", "redaction"}
"""Top-level modules every layer may use; they import only each other."""

MAY_IMPORT: dict[str, set[str]] = {
    # the wiring: plugin.py, __init__.py, __main__.py may import anything
    "chat": {"agent", "store", "tools", "net", "config", *SHARED},
    "config": {"agent", "store", "tools", *SHARED},
    "agent": {"store", "tools", *SHARED},
    "tools": {"net", *SHARED},
    "store": {*SHARED},
    "net": {*SHARED},
    "toolkits": {"tools", "net", *SHARED},
    "i18n": set(),
    "exceptions": {"i18n"},
    "fileformat": {"i18n", "exceptions"},
    "redaction": set(),
}
WIRING = {"plugin", "__init__", "__main__"}
ADAPTERS_ALLOWED = {"chat"}
INTERNALS = "nonebot.internal"
"""NoneBot's internals: no part of the package imports them, the wiring included."""


def layer_of(module: str) -> str:
    """`chat` for nonebot_plugin_marsho.chat.matchers, `config` for nonebot_plugin_marsho.config."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
        if len(parts) == 1:
            return f"{NAME}.__init__"
    return ".".join(parts)


def imports_of(path: Path, source: str) -> list[tuple[int, str]]:
    """Every module the file at `path` imports (absolute names), with its line."""
    tree = ast.parse(source)
    module = module_of(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if module == f"{NAME}.__init__":
        package = [NAME]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                if not node.level and target.split(".")[0] != NAME:  # `from nonebot import internal`
                    found.append((node.lineno, f"{target}.{alias.name}"))
                    continue
                # `from . import matchers` imports a module; `from .app import Marsho`, a name
                submodule = PACKAGE.parent / f"{target}.{alias.name}".replace(".", "/")
                is_module = submodule.with_suffix(".py").exists() or submodule.is_dir()
                found.append((node.lineno, f"{target}.{alias.name}" if is_module else target))
    return found


def violations(probe: tuple[Path, str] | None = None) -> list[str]:
    """Each import that breaks the rules, in the package (and in `probe`, a file not on disk)."""
    files = [(path, path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))]
    found = []
    for path, source in [*files, *([probe] if probe else [])]:
        module = module_of(path)
        layer = layer_of(module)
        for line, target in imports_of(path, source):
            where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
            if target == INTERNALS or target.startswith(INTERNALS + "."):
                found.append(f"{where}: nothing may import NoneBot's internals")
            if layer in WIRING:
                continue
            allowed = MAY_IMPORT[layer]
            if target.startswith("nonebot.adapters") and layer not in ADAPTERS_ALLOWED:
                found.append(f"{where}: only chat/ may know NoneBot's adapters")
            if target == NAME or target.startswith(NAME + "."):
                other = layer_of(target) if target != NAME else "__init__"
                if other != layer and other not in allowed:
                    found.append(f"{where}: {layer} may import only {sorted(allowed)}")
    return found


def test_every_import_points_down_and_only_chat_knows_the_adapters() -> None:
    assert violations() == []


def test_every_part_of_the_package_has_a_layer() -> None:
    layers = {layer_of(module_of(path)) for path in PACKAGE.rglob("*.py")}
    assert layers - set(MAY_IMPORT) - WIRING == set()


@pytest.mark.parametrize(
    ("layer", "source", "complaint"),
    [
        ("store", "from ..agent.tokens import TokenCounter\n", "store may import only"),
        ("agent", "from ..config import Config\n", "agent may import only"),
        ("agent", "from nonebot.adapters import Bot\n", "only chat/ may know"),
        ("tools", "def f():\n    from ..chat.app import current_app\n", "tools may import only"),
        ("chat", "from nonebot.internal.matcher import current_bot\n", "NoneBot's internals"),
        ("chat", "from nonebot import internal\n", "NoneBot's internals"),
        ("plugin", "import nonebot.internal.adapter\n", "NoneBot's internals"),
    ],
)
def test_an_upward_import_is_caught(layer: str, source: str, complaint: str) -> None:
    probe = PACKAGE / layer / "_layer_probe.py"
    assert any(complaint in line and "_layer_probe.py" in line for line in violations((probe, source)))
