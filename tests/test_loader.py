"""Toolkit folders → Toolset: what loads, and what a toolkit author reads when it does not."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.tools import (
    BUILTIN_TOOLSET,
    LoadProblem,
    Toolset,
    ToolsetSource,
    load_toolset,
)
from nonebot_plugin_marsho.tools.loader import MODULE_NAMESPACE

# The example of nonebot-plugin-marshoai's toolkit guide (README_TOOLS), copied verbatim: `#`
# annotations and `"required"` beside `"parameters"`.
MARSHOAI_EXAMPLE_INIT = """\
from datetime import datetime

async def get_weather(location: str):
    return f"The temperature of {location} is 114514℃。" #To simulate the return value of weather.

async def get_current_time():
    current_time = datetime.now().strftime("%Y.%m.%d %H:%M:%S")
    time_prompt = f"Now is {current_time}。"
    return time_prompt
"""

MARSHOAI_EXAMPLE_TOOLS_JSON = """\
[
    {
        "type": "function",
        "function": {
            "name": "marshoai-example__get_weather", # Name of this Function Call
            "description": "Get the weather of a specified locatin.", # Description, it need to descripte the usage of this Functin
            "parameters": {   # Define the parameters
                "type": "object",
                "properties": {
                    "location": { # 'location' is the name that _init__.py had defined.
                        "type": "string", # the Type of patameters
                        "description": "City or district. Such as Beijing, Hangzhou, Yuhang District" # Description，it need to descripte the type or example of Actual Parameter
                    }
                }
            },
            "required": [ # Define the Required Parameters
                "location"
            ]
        }
    },
    {
        "type": "function",
        "function": {
            "name": "marshoai-example__get_current_time",
            "description": "Get time",
            "parameters": {} # No parameter requried, so it is blanked
        }
    }
]
"""

PING_INIT = "def ping():\n    return 'pong'\n"


def write_toolkit(
    parent: Path,
    name: str,
    init: str | None = PING_INIT,
    tools: str | list[dict[str, Any]] | None = None,
    **siblings: str,
) -> Path:
    """A toolkit folder: `__init__.py` and `tools.json` (None/"" leave one out), plus siblings."""
    folder = parent / name
    folder.mkdir(parents=True)
    if init is not None:
        (folder / "__init__.py").write_text(textwrap.dedent(init), encoding="utf-8")
    if tools is None:
        tools = [tool_entry(f"{name}__ping")]
    if not isinstance(tools, str):
        tools = json.dumps(tools, ensure_ascii=False, indent=2)
    if tools != "":
        (folder / "tools.json").write_text(tools, encoding="utf-8")
    for module, text in siblings.items():
        (folder / f"{module}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def tool_entry(name: str, parameters: Any = None, description: str = "A tool") -> dict[str, Any]:
    """One tools.json entry in the `{"type": "function", "function": ...}` form of marshoai's toolkits."""
    function: dict[str, Any] = {"name": name, "description": description}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def load(*folders: Path, disabled: tuple[str, ...] = ()) -> Toolset:
    return load_toolset([ToolsetSource(folder, "a test") for folder in folders], disabled)


def only_error(toolset: Toolset) -> LoadProblem:
    """The single error of a toolset, failing with every problem listed otherwise."""
    assert len(toolset.errors) == 1, [str(p) for p in toolset.problems]
    return toolset.errors[0]


def assert_names_file(problem: LoadProblem, path: Path, *words: str) -> None:
    """The problem, as the author reads it, names the file and says each of `words`."""
    text = str(problem)
    assert problem.path == path
    assert str(path) in text
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"


# --- files that must load -------------------------------------------------------------------------


async def test_marshoai_example_loads_verbatim(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "marshoai-example", MARSHOAI_EXAMPLE_INIT, MARSHOAI_EXAMPLE_TOOLS_JSON)

    toolset = load(tmp_path)

    assert toolset.errors == []
    assert [t.name for t in toolset.toolkits] == ["marshoai-example"]
    assert set(toolset.tools) == {
        "marshoai-example__get_weather",
        "marshoai-example__get_current_time",
    }
    weather = toolset.tools["marshoai-example__get_weather"]
    assert weather.description == "Get the weather of a specified locatin."
    assert "Shenzhen" in await weather.func(location="Shenzhen")


def test_marshoai_required_beside_parameters_is_moved_inside_with_a_warning(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "marshoai-example", MARSHOAI_EXAMPLE_INIT, MARSHOAI_EXAMPLE_TOOLS_JSON)

    toolset = load(tmp_path)

    weather = toolset.tools["marshoai-example__get_weather"]
    assert weather.parameters["required"] == ["location"]
    assert "required" not in weather.schema()["function"]
    assert len(toolset.warnings) == 1, [str(p) for p in toolset.warnings]
    assert_names_file(
        toolset.warnings[0], folder / "tools.json", "get_weather", "required", "moved"
    )


def test_comments_are_stripped_but_hash_inside_strings_survives(tmp_path: Path) -> None:
    description = "Rank #1 pick // not a comment /* nor this */ see https://example.com/#top"
    tools = textwrap.dedent(f"""\
        // a line comment before everything
        [
          /* a block comment
             over two lines */
          {{
            "type": "function", # hash comment
            "function": {{
              "name": "kit__ping", /* inline block */
              "description": {json.dumps(description)} // trailing
            }}
          }}
        ]
        """)
    write_toolkit(tmp_path, "kit", tools=tools)

    toolset = load(tmp_path)

    assert toolset.problems == []
    assert toolset.tools["kit__ping"].description == description


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    tools = (
        "[\n"
        '  {"type": "function", "function": {"name": "kit__ping"}}\n'
        '  {"type": "function", "function": {"name": "kit__pong"}}\n'
        "]\n"
    )
    folder = write_toolkit(tmp_path, "kit", tools=tools)

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "invalid JSON", "line 3", "column 3")


def test_invalid_json_line_counts_lines_inside_block_comments(tmp_path: Path) -> None:
    tools = (
        "/* one\n"
        "   two\n"
        "   three */\n"
        "[\n"
        '  {"type": "function", "function": {"name": "kit__ping"}},\n'
        "]\n"
    )
    folder = write_toolkit(tmp_path, "kit", tools=tools)

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "invalid JSON", "line 6")


# --- tool names -----------------------------------------------------------------------------------


def test_tool_name_without_toolkit_prefix_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", tools=[tool_entry("other__ping")])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "'other__ping'", "'kit__'")


def test_function_part_containing_double_underscore_is_reported(tmp_path: Path) -> None:
    init = "def get__weather():\n    return 'sunny'\n"
    folder = write_toolkit(tmp_path, "kit", init, [tool_entry("kit__get__weather")])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "'get__weather'", "'__'")


def test_toolkit_folder_name_containing_double_underscore_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "my__kit", tools=[tool_entry("my__kit__ping")])

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(only_error(toolset), folder, "'my__kit'", "'__'")


@pytest.mark.parametrize(
    "function_name",
    ["a" * 60, "get weather", "get.weather", "天气"],
    ids=["65-chars", "space", "dot", "cjk"],
)
def test_tool_name_too_long_or_with_bad_characters_is_reported(
    tmp_path: Path, function_name: str
) -> None:
    name = f"kit__{function_name}"
    folder = write_toolkit(tmp_path, "kit", tools=[tool_entry(name)])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", repr(name), "1-64", "letters, digits")


def test_name_without_a_function_in_init_is_reported(tmp_path: Path) -> None:
    tools = [tool_entry("kit__ping"), tool_entry("kit__pong")]
    folder = write_toolkit(tmp_path, "kit", tools=tools)

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(
        only_error(toolset), folder / "tools.json", "kit__pong", "__init__.py", "'pong'"
    )


def test_non_callable_attribute_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", "ping = 5\n")

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "'ping'", "int", "not a function")


def test_duplicate_tool_names_in_one_tools_json_are_reported(tmp_path: Path) -> None:
    tools = [tool_entry("kit__ping"), tool_entry("kit__ping")]
    folder = write_toolkit(tmp_path, "kit", tools=tools)

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(only_error(toolset), folder / "tools.json", "'kit__ping'", "entry 2",
                      "already defined", "entry 1")


def test_same_toolkit_name_in_two_toolsets_keeps_the_first_and_reports_the_second(
    tmp_path: Path,
) -> None:
    first = write_toolkit(tmp_path / "one", "kit", "def ping():\n    return 'first'\n")
    second = write_toolkit(tmp_path / "two", "kit", "def ping():\n    return 'second'\n")

    toolset = load(tmp_path / "one", tmp_path / "two")

    assert [t.path for t in toolset.toolkits] == [first]
    assert toolset.tools["kit__ping"].func() == "first"
    assert_names_file(only_error(toolset), second, "'kit'", "already loaded", str(first))


# --- missing files and imports --------------------------------------------------------------------


def test_missing_init_py_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", init=None)

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "missing")


def test_no_tools_json_and_nothing_self_described_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", tools="")  # ping() has no docstring

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "no tools", "tools.json", "Toolbox")


def test_import_error_names_the_exception_and_the_line_in_the_toolkit(tmp_path: Path) -> None:
    init = """\
        import os

        raise RuntimeError("database unreachable")
        """
    folder = write_toolkit(tmp_path, "kit", init)

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "import failed", "RuntimeError",
                      "database unreachable", "__init__.py line 3")


def test_import_error_inside_a_sibling_module_names_that_file_and_line(tmp_path: Path) -> None:
    init = "from .helpers import VALUE\n\ndef ping():\n    return VALUE\n"
    helpers = "VALUE = 1\nimport no_such_module_for_marsho_tests\n"
    folder = write_toolkit(tmp_path, "kit", init, helpers=helpers)

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "ModuleNotFoundError",
                      "no_such_module_for_marsho_tests", "helpers.py line 2")


def test_syntax_error_in_init_is_reported_with_its_line(tmp_path: Path) -> None:
    init = "def ping():\n    return 'pong'\n\ndef pong(:\n    pass\n"
    folder = write_toolkit(tmp_path, "kit", init)

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "SyntaxError", "line 4")


def test_system_exit_at_import_is_reported_and_loading_goes_on(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "a-quitter", "import sys\nsys.exit('no config file')\n",
                           [tool_entry("a-quitter__ping")])
    write_toolkit(tmp_path, "b-fine")

    toolset = load(tmp_path)

    assert_names_file(only_error(toolset), folder / "__init__.py", "SystemExit", "no config file")
    assert list(toolset.tools) == ["b-fine__ping"]


# --- schemas --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "where"),
    [
        ({"type": "object", "properties": {"city": {"type": "strin"}}}, "properties/city/type"),
        ({"type": "object", "properties": 5}, "properties"),
        ({"type": "object", "required": "city"}, "required"),
    ],
    ids=["misspelled-type", "properties-not-object", "required-not-list"],
)
def test_schema_that_is_not_valid_json_schema_is_reported(
    tmp_path: Path, parameters: dict[str, Any], where: str
) -> None:
    folder = write_toolkit(tmp_path, "kit", tools=[tool_entry("kit__ping", parameters)])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "kit__ping", "not a valid JSON Schema", where)


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        ({"type": "string"}, ('"object"', "'string'")),
        ({"type": "array", "items": {"type": "string"}}, ('"object"', "'array'")),
        (["location"], ("must be a JSON object",)),
        ("location", ("must be a JSON object",)),
    ],
    ids=["string-schema", "array-schema", "list", "string"],
)
def test_parameters_that_are_not_an_object_schema_are_reported(
    tmp_path: Path, parameters: Any, words: tuple[str, ...]
) -> None:
    folder = write_toolkit(tmp_path, "kit", tools=[tool_entry("kit__ping", parameters)])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "kit__ping", "'parameters'", *words)


@pytest.mark.parametrize("parameters", [{}, None], ids=["empty", "absent"])
def test_empty_parameters_become_an_object_schema(tmp_path: Path, parameters: Any) -> None:
    write_toolkit(tmp_path, "kit", tools=[tool_entry("kit__ping", parameters)])

    toolset = load(tmp_path)

    assert toolset.problems == []
    assert toolset.tools["kit__ping"].parameters == {"type": "object", "properties": {}}


# --- toolsets -------------------------------------------------------------------------------------


def test_broken_toolkit_is_skipped_while_the_others_load(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "a-good")
    write_toolkit(tmp_path, "b-broken", tools='[{"type": "function",')
    write_toolkit(tmp_path, "c-good")

    toolset = load(tmp_path)

    assert [t.name for t in toolset.toolkits] == ["a-good", "c-good"]
    assert set(toolset.tools) == {"a-good__ping", "c-good__ping"}
    assert list(toolset.failed_toolkits()) == ["b-broken"]


def test_disabled_toolkits_are_skipped_and_listed(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "kept")
    # never imported once disabled, so its import error is never seen
    write_toolkit(tmp_path, "switched-off", "raise RuntimeError('must not be imported')\n")

    toolset = load(tmp_path, disabled=("switched-off",))

    assert toolset.problems == []
    assert toolset.disabled == ["switched-off"]
    assert [t.name for t in toolset.toolkits] == ["kept"]
    assert list(toolset.tools) == ["kept__ping"]


def test_nonexistent_toolset_folder_is_reported_with_its_origin(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"

    toolset = load_toolset([ToolsetSource(missing, "MARSHO_TOOLKIT_DIRS")])

    assert_names_file(only_error(toolset), missing, "does not exist", "MARSHO_TOOLKIT_DIRS")


def test_optional_toolset_folder_may_be_missing(tmp_path: Path) -> None:
    toolset = load_toolset([ToolsetSource(tmp_path / "absent", "data dir", must_exist=False)])

    assert toolset.problems == []
    assert toolset.toolkits == []


def test_toolset_path_that_is_a_toolkit_folder_loads_that_toolkit(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit")

    toolset = load(folder)

    assert toolset.problems == []
    assert [t.path for t in toolset.toolkits] == [folder]
    assert toolset.tools["kit__ping"].func() == "pong"


async def test_sync_and_async_functions_both_load(tmp_path: Path) -> None:
    init = """\
        def plain():
            return "sync"

        async def waiting():
            return "async"
        """
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__plain"), tool_entry("kit__waiting")])

    toolset = load(tmp_path)

    assert toolset.problems == []
    plain, waiting = toolset.tools["kit__plain"], toolset.tools["kit__waiting"]
    assert (plain.is_async, waiting.is_async) == (False, True)
    assert plain.func() == "sync"
    assert await waiting.func() == "async"


def test_toolkit_imports_its_own_sibling_module_relatively(tmp_path: Path) -> None:
    init = "from .helpers import greeting\n\ndef ping():\n    return greeting()\n"
    helpers = "def greeting():\n    return 'hello from helpers'\n"
    write_toolkit(tmp_path, "kit", init, helpers=helpers)

    toolset = load(tmp_path)

    assert toolset.problems == []
    assert toolset.tools["kit__ping"].func() == "hello from helpers"


def test_sibling_modules_of_the_same_name_in_two_toolkits_do_not_clash(tmp_path: Path) -> None:
    init = "from .helpers import WHO\n\ndef ping():\n    return WHO\n"
    write_toolkit(tmp_path, "alpha", init, helpers="WHO = 'alpha'\n")
    write_toolkit(tmp_path, "beta", init, helpers="WHO = 'beta'\n")

    toolset = load(tmp_path)

    assert toolset.problems == []
    assert toolset.tools["alpha__ping"].func() == "alpha"
    assert toolset.tools["beta__ping"].func() == "beta"


def test_toolkit_modules_live_under_the_private_namespace_only(tmp_path: Path) -> None:
    init = "from .probe_helpers import VALUE\n\ndef ping():\n    return VALUE\n"
    write_toolkit(tmp_path, "namespace_probe", init, probe_helpers="VALUE = 'x'\n")

    toolset = load(tmp_path)

    assert toolset.problems == []
    module = toolset.tools["namespace_probe__ping"].func.__module__
    assert module.startswith(MODULE_NAMESPACE + ".")
    assert f"{module}.probe_helpers" in sys.modules
    assert "namespace_probe" not in sys.modules
    assert "probe_helpers" not in sys.modules


def test_builtin_toolset_loads_without_problems() -> None:
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")])

    assert toolset.problems == []
    assert toolset.toolkits
    assert all(toolkit.tools for toolkit in toolset.toolkits)
    assert "clock__now" in toolset.tools


def test_every_load_problem_names_its_file(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "bad-json", tools="[")
    write_toolkit(tmp_path, "bad-name", tools=[tool_entry("ping")])
    write_toolkit(tmp_path, "bad-schema", tools=[tool_entry("bad-schema__ping", {"type": "strin"})])
    write_toolkit(tmp_path, "bad-import", "import no_such_module_for_marsho_tests\n")
    write_toolkit(tmp_path, "no-function", "", [tool_entry("no-function__ping")])
    write_toolkit(tmp_path, "no-init", init=None)
    write_toolkit(tmp_path, "no-tools", tools="")
    write_toolkit(tmp_path, "bad__folder")
    write_toolkit(tmp_path, "with-warning", tools=[
        {"type": "function", "function": {"name": "with-warning__ping", "parameters": {}},
         "required": []}
    ])

    toolset = load(tmp_path, tmp_path / "missing")

    assert len(toolset.failed_toolkits()) == 9  # eight toolkits, and the missing folder ("")
    assert toolset.warnings
    for problem in toolset.problems:
        assert problem.path.is_relative_to(tmp_path)
        assert str(problem).startswith(f"{problem.path}: ")
        assert str(problem).removeprefix(f"{problem.path}: ").strip()


def test_a_syntax_errors_location_is_given_once(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "__init__.py").write_text("def f(:\n    pass\n", encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "test")])
    (problem,) = toolset.problems
    assert str(problem).endswith("import failed: SyntaxError: invalid syntax (at __init__.py line 1)")
