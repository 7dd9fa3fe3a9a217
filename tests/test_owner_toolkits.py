"""Toolkits written by others (issue 13, "the owner's first hour"): each real mistake found in
marshoai's toolkits and a third-party toolset either loads and runs, or says exactly why not,
at the toolkit's own file and line. The fixtures are in tests/toolsets/others/."""

from __future__ import annotations

import gc
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.redaction import logger
from nonebot_plugin_marsho.tools import (
    LoadProblem,
    ToolCall,
    ToolResult,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)
from nonebot_plugin_marsho.tools.runner import loads_json

from .test_loader import tool_entry, write_toolkit

OTHERS = Path(__file__).resolve().parent / "toolsets" / "others"


def load_one(name: str) -> Toolset:
    """One fixture folder of tests/toolsets/others, loaded as a toolset of its own."""
    return load_toolset([ToolsetSource(OTHERS / name, "a test")])


def problem_texts(problems: list[LoadProblem]) -> list[str]:
    return [str(p) for p in problems]


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


async def run_calls(toolset: Toolset, *calls: tuple[str, dict[str, Any]]) -> list[ToolResult]:
    runner = ToolRunner(toolset, timeout=5)
    try:
        return await runner.run([
            ToolCall(f"call_{i}", name, json.dumps(arguments))
            for i, (name, arguments) in enumerate(calls)
        ])
    finally:
        runner.close()


# --- "require" for "required" (megakits: six places, beside and inside "parameters") -------------


def test_require_beside_or_inside_parameters_is_read_as_required_with_a_warning() -> None:
    toolset = load_one("require-typo")

    assert toolset.errors == [], problem_texts(toolset.errors)
    tools = toolset.tools
    assert tools["require-typo__spin"].parameters["required"] == ["upper"]
    assert tools["require-typo__combine"].parameters["required"] == ["a", "b", "op"]
    for name in ("shout", "whisper", "mirror", "count"):
        parameters = tools[f"require-typo__{name}"].parameters
        assert parameters["required"] == ["msg"]
        assert "require" not in parameters
    warnings_ = problem_texts(toolset.warnings)
    assert len(warnings_) == 6, warnings_
    tools_json = OTHERS / "require-typo" / "tools.json"
    assert all(text.startswith(f"{tools_json}: ") for text in warnings_)
    assert all("'require'" in text and "'required'" in text for text in warnings_)
    beside = [t for t in warnings_ if "beside" in t]
    assert len(beside) == 2 and "require-typo__spin" in beside[0] and "'upper'" in beside[0]
    assert sum("inside 'parameters' is read as" in t for t in warnings_) == 4


async def test_a_call_leaving_out_a_require_typo_parameter_is_refused_by_the_schema() -> None:
    toolset = load_one("require-typo")

    spin, count = await run_calls(toolset, ("require-typo__spin", {"lower": 1}),
                                  ("require-typo__count", {"msg": "喵喵"}))

    assert spin.status == "bad_arguments"
    assert "'upper' is a required property" in spin.content
    assert "TypeError" not in spin.content
    assert (count.status, count.content) == ("ok", "2")


def test_require_inside_and_required_inside_keeps_required_and_says_require_is_ignored(
    tmp_path: Path,
) -> None:
    parameters = {"type": "object", "properties": {"x": {"type": "string"}},
                  "required": ["x"], "require": ["nothing"]}
    init = "def ping(x):\n    return x\n"
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__ping", parameters)])

    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    assert toolset.tools["kit__ping"].parameters["required"] == ["x"]
    [warning] = problem_texts(toolset.warnings)
    assert "'require'" in warning and "ignored" in warning


# --- a parameter without a default that the schema leaves optional ---------------------------------


def test_a_parameter_without_default_that_the_schema_leaves_optional_is_warned_at_load(
    tmp_path: Path,
) -> None:
    init = "def spin(upper: int, lower: int = 0):\n    return upper - lower\n"
    parameters = {"type": "object", "properties": {"upper": {"type": "integer"},
                                                   "lower": {"type": "integer"}}}
    folder = write_toolkit(tmp_path, "kit", init, [tool_entry("kit__spin", parameters)])

    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    assert toolset.errors == []
    [warning] = toolset.warnings
    assert warning.path == folder / "tools.json"
    text = str(warning)
    assert "kit__spin" in text and "'upper'" in text and "no default" in text
    assert "'required'" in text and "'lower'" not in text


async def test_a_call_leaving_out_an_argument_the_function_needs_names_it_not_a_type_error(
    tmp_path: Path,
) -> None:
    init = "async def spin(upper: int, lower: int = 0):\n    return upper - lower\n"
    parameters = {"type": "object", "properties": {"upper": {"type": "integer"},
                                                   "lower": {"type": "integer"}}}
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__spin", parameters)])
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    missing, fine = await run_calls(toolset, ("kit__spin", {"lower": 3}),
                                    ("kit__spin", {"upper": 10, "lower": 3}))

    assert missing.status == "bad_arguments"
    assert "'upper' is missing" in missing.content
    assert "Call it again" in missing.content and '"upper"' in missing.content  # the schema
    assert "TypeError" not in missing.content and "positional" not in missing.content
    assert (fine.status, fine.content) == ("ok", "7")


# --- a coroutine created and never awaited ---------------------------------------------------------


async def test_a_sync_wrapper_returning_str_of_an_async_helper_is_an_error_naming_its_line(
    log_lines: list[str],
) -> None:
    toolset = load_one("unawaited-helper")
    assert toolset.problems == []

    [result] = await run_calls(toolset, ("unawaited-helper__introduce", {}))

    assert result.status == "error"
    assert "<coroutine object" not in result.content
    assert "coroutine 'introduce' was never awaited" in result.content
    assert "unawaited-helper/__init__.py line 6" in result.content
    assert "bug" in result.content
    logged = "\n".join(log_lines)
    assert "unawaited-helper__introduce" in logged
    assert "unawaited-helper/__init__.py line 6" in logged and "await" in logged


async def test_an_async_tool_dropping_an_async_helpers_coroutine_is_an_error_too() -> None:
    toolset = load_one("unawaited-helper")

    [result] = await run_calls(toolset, ("unawaited-helper__homepage", {}))

    assert result.status == "error"
    assert "coroutine 'homepage' was never awaited" in result.content
    assert "unawaited-helper/__init__.py line 11" in result.content


async def test_an_awaitable_returned_by_a_sync_function_is_awaited() -> None:
    toolset = load_one("unawaited-helper")

    [result] = await run_calls(toolset, ("unawaited-helper__motto", {}))

    assert (result.status, result.content) == ("ok", "Await what you call.")


async def test_unawaited_coroutines_in_parallel_calls_are_blamed_on_their_own_call_only() -> None:
    toolset = load_one("unawaited-helper")

    results = await run_calls(
        toolset, ("unawaited-helper__introduce", {}), ("unawaited-helper__motto", {}),
        ("unawaited-helper__homepage", {}), ("unawaited-helper__motto", {}),
    )

    assert [r.status for r in results] == ["error", "ok", "error", "ok"]


def test_a_coroutine_dropped_outside_any_tool_call_still_gets_pythons_own_warning(
    tmp_path: Path,
) -> None:
    async def helper() -> None:
        return None

    ToolRunner(Toolset()).close()  # the runner's stand-in is installed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        helper()
        gc.collect()

    assert any("coroutine" in str(w.message) and "was never awaited" in str(w.message)
               and w.category is RuntimeWarning for w in caught), [str(w.message) for w in caught]


# --- marshoai's plugin format ----------------------------------------------------------------------


def test_a_marshoai_plugin_folder_is_named_as_such_not_sent_to_install_marshoai() -> None:
    toolset = load_one("marshoai-plugin")

    [error] = toolset.errors
    assert error.path == OTHERS / "marshoai-plugin" / "__init__.py"
    text = str(error)
    assert "this is a nonebot-plugin-marshoai plugin, not a toolkit folder; see docs/en/toolkits.md" in text
    assert "No module named" not in text
    assert "pip install" not in text
    assert "on_function_call" in text


def test_a_marshoai_plugin_whose_init_imports_a_sibling_is_named_as_such_at_import(
    tmp_path: Path,
) -> None:
    main = (OTHERS / "marshoai-plugin" / "__init__.py").read_text(encoding="utf-8")
    write_toolkit(tmp_path, "codes", "from .main import *  # noqa\n", "",
                  main=main.replace("from . import codes\n", ""))

    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    [error] = toolset.errors
    assert "this is a nonebot-plugin-marshoai plugin, not a toolkit folder; see docs/en/toolkits.md" in str(error)
    assert "main.py line 1" in str(error)
    assert "No module named" not in str(error)


def test_a_toolkit_importing_marshoais_helpers_is_told_to_copy_them(tmp_path: Path) -> None:
    init = "from nonebot_plugin_marshoai.util import get_backup_context\n\ndef ping():\n    return 1\n"
    write_toolkit(tmp_path, "kit", init)

    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    text = str(toolset.errors[0])
    assert "nonebot_plugin_marshoai.util" in text and "copy" in text
    assert "pip install" not in text


# --- a missing dependency --------------------------------------------------------------------------


def test_a_missing_dependency_names_the_module_and_the_pip_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "bs4", None)  # not installed, whatever this machine has

    toolset = load_one("missing-dependency")

    [error] = toolset.errors
    assert error.path == OTHERS / "missing-dependency" / "__init__.py"
    text = str(error)
    assert "'bs4'" in text and "not installed" in text
    assert "pip install beautifulsoup4" in text
    assert "search.py line 3" in text


def test_a_missing_dependency_whose_package_has_its_name_says_pip_install_it(
    tmp_path: Path,
) -> None:
    write_toolkit(tmp_path, "kit", "import marsho_no_such_package_xyz\n")

    text = str(load_toolset([ToolsetSource(tmp_path, "a test")]).errors[0])

    assert "'marsho_no_such_package_xyz' is not installed" in text
    assert "pip install marsho_no_such_package_xyz" in text
    assert "provides it" not in text
    assert "__init__.py line 1" in text


def test_a_missing_module_of_the_toolkit_itself_is_not_sent_to_pip(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", "from . import mk_Info\n", mk_info="X = 1\n")

    text = str(load_toolset([ToolsetSource(tmp_path, "a test")]).errors[0])

    assert "own module 'mk_Info' is missing" in text
    assert str(folder) in text
    assert "mk_info.py is there, but names are case-sensitive" in text
    assert "pip" not in text and "_toolkits" not in text


# --- a tools.yaml ----------------------------------------------------------------------------------


def test_a_tools_yaml_is_named_in_the_message_not_just_no_tools() -> None:
    toolset = load_one("yaml-described")

    [error] = toolset.errors
    assert error.path == OTHERS / "yaml-described" / "tools.yaml"
    text = str(error)
    assert "tools.yaml" in text and "tools.json" in text and "no tools" in text


def test_a_tools_yaml_beside_self_described_tools_is_said_to_be_unread(tmp_path: Path) -> None:
    init = 'def greet(name: str):\n    """Greet someone."""\n    return name\n'
    folder = write_toolkit(tmp_path, "kit", init, "")
    (folder / "tools.yaml").write_text("- name: kit__greet\n", encoding="utf-8")

    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    assert list(toolset.tools) == ["kit__greet"]
    [warning] = toolset.warnings
    assert warning.path == folder / "tools.yaml" and "not read" in str(warning)


def test_a_folder_with_only_a_tools_yaml_is_reported_not_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "tools.yaml").write_text("- name: kit__greet\n", encoding="utf-8")

    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    assert [p.path for p in toolset.errors] == [folder / "__init__.py"]


# --- where errors are reported ---------------------------------------------------------------------


async def test_an_error_raised_by_a_tool_is_logged_at_the_toolkits_file_and_line(
    tmp_path: Path, log_lines: list[str],
) -> None:
    init = "from .helpers import divide\n\ndef ratio(a: int, b: int):\n    return divide(a, b)\n"
    helpers = "def divide(a, b):\n    return a / b\n"
    parameters = {"type": "object", "properties": {"a": {"type": "integer"},
                                                   "b": {"type": "integer"}}, "required": ["a", "b"]}
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__ratio", parameters)], helpers=helpers)
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    [result] = await run_calls(toolset, ("kit__ratio", {"a": 1, "b": 0}))

    assert result.status == "error" and "ZeroDivisionError" in result.content
    [line] = [line for line in log_lines if "kit__ratio" in line]
    assert "(at kit/helpers.py line 2)" in line
    assert "runner.py" not in line and "thread.py" not in line


async def test_an_error_raised_calling_the_tool_points_at_its_definition_not_the_runner(
    tmp_path: Path, log_lines: list[str],
) -> None:
    init = "import os\n\n\ndef greet(name: str):\n    return name\n"
    parameters = {"type": "object", "properties": {"name": {"type": "string"},
                                                   "mood": {"type": "string"}}}
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__greet", parameters)])
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])

    [result] = await run_calls(toolset, ("kit__greet", {"name": "x", "mood": "glad"}))

    assert result.status == "error" and "TypeError" in result.content
    [line] = [line for line in log_lines if "kit__greet" in line]
    assert "greet(), defined at kit/__init__.py line 4" in line
    assert "runner.py" not in line and "thread.py" not in line


# --- JSON errors read once -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"city": "Hang', "Unterminated string starting at line 1, column 10"),
        ('{"city": "a\nb"}', "Invalid control character at line 1, column 12"),
    ],
    ids=["unterminated", "control-character"],
)
def test_json_errors_say_at_once(text: str, expected: str) -> None:
    with pytest.raises(ValueError) as caught:
        loads_json(text)

    assert str(caught.value) == expected
    assert " at at " not in str(caught.value)
