"""Toolkit folders whose functions describe themselves, tools.json checked against the functions,
owner settings (presets, disabled tools, permissions) and who may see and call each tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.tools import (
    ToolCall,
    ToolContext,
    ToolResult,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)
from nonebot_plugin_marsho.tools.model import Role
from tests.test_loader import assert_names_file, only_error, tool_entry, write_toolkit

# A toolkit registering its tools in a Toolbox: no tools.json needed.
TOOLBOX_INIT = '''\
from nonebot_plugin_marsho.tools import Toolbox

tools = Toolbox()


@tools.tool
def weather(city: str, days: int = 1) -> str:
    """Get the weather forecast of a city.

    Args:
        city: City name, e.g. Hangzhou.
        days: How many days ahead.
    """
    return f"{city}: sunny for {days} day(s)"


@tools.tool(permission="superuser", name="restart")
def restart_bot() -> str:
    """Restart the bot."""
    return "restarting"


def search(query: str, api_key: str) -> str:
    """Search the web."""
    return f"{query}: key ok={api_key == 'registered-key'}"


tools.add(search, permission="admin", api_key="registered-key")


def not_registered() -> str:
    """Public and documented, but the Toolbox decides what is offered."""
    return "never a tool"
'''

# No Toolbox: public functions with a docstring, defined in __init__.py itself, are the tools.
PLAIN_FUNCTIONS_INIT = '''\
from os.path import join  # documented, but someone else's
from .helpers import shout  # documented, but defined in a sibling module


def double(number: int) -> int:
    """Double a number.

    :param number: The number to double.
    """
    return _twice(number)


async def greet(name: str = "world") -> str:
    """Greet someone."""
    return f"hello {name}"


def _twice(number: int) -> int:
    """A private helper."""
    return number * 2


def undocumented() -> str:
    return "no docstring, no tool"
'''

HELPERS = '''\
def shout(text: str) -> str:
    """Shout the text."""
    return text.upper()
'''

CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
}


def load(folder: Path, **options: Any) -> Toolset:
    return load_toolset([ToolsetSource(folder, "a test")], **options)


def problem_texts(toolset: Toolset) -> list[str]:
    return [f"{p.severity}: {p}" for p in toolset.problems]


def entry(name: str, parameters: Any = None, **extension: Any) -> dict[str, Any]:
    """A tools.json entry, with extension keys (like "permission") beside "function"."""
    return {**tool_entry(name, parameters), **extension}


def three_permission_kit(parent: Path) -> Toolset:
    init = '''\
        def chat() -> str:
            return "chatting"

        def kick(user: str) -> str:
            return f"kicked {user}"

        def shutdown() -> str:
            return "shutting down"
        '''
    user_schema = {
        "type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]
    }
    write_toolkit(parent, "kit", init, [
        entry("kit__chat"),
        entry("kit__kick", user_schema, permission="admin"),
        entry("kit__shutdown", permission="superuser"),
    ])
    toolset = load(parent)
    assert toolset.problems == [], problem_texts(toolset)
    return toolset


@pytest.fixture
def run_as() -> Iterator[Any]:
    """run_as(toolset, context, tool name, arguments) → the ToolResult of that one call."""
    runners: list[ToolRunner] = []

    async def run(
        toolset: Toolset, context: ToolContext | None, name: str, arguments: Any = None
    ) -> ToolResult:
        runner = ToolRunner(toolset, timeout=5)
        runners.append(runner)
        call = ToolCall("call_1", name, json.dumps(arguments or {}))
        [result] = await runner.run([call], context)
        return result

    yield run
    for runner in runners:
        runner.close()


# --- toolkits without tools.json ----------------------------------------------------------------


async def test_toolbox_toolkit_loads_its_registered_tools_without_tools_json(
    tmp_path: Path, run_as: Any
) -> None:
    write_toolkit(tmp_path, "kit", TOOLBOX_INIT, tools="")

    toolset = load(tmp_path)

    assert toolset.problems == [], problem_texts(toolset)
    assert list(toolset.tools) == ["kit__weather", "kit__restart", "kit__search"]
    weather, restart, search = toolset.tools.values()
    assert weather.description == "Get the weather forecast of a city."
    assert weather.parameters["properties"]["city"] == {
        "type": "string", "description": "City name, e.g. Hangzhou."
    }
    assert [(t.permission, t.toolkit) for t in (weather, restart, search)] == [
        ("everyone", "kit"), ("superuser", "kit"), ("admin", "kit")
    ]
    assert search.presets == {"api_key": "registered-key"}
    assert set(search.parameters["properties"]) == {"query"}

    result = await run_as(toolset, ToolContext(role="admin"), "kit__search", {"query": "cats"})
    assert (result.status, result.content) == ("ok", "cats: key ok=True")


async def test_without_a_toolbox_the_public_documented_functions_are_the_tools(
    tmp_path: Path, run_as: Any
) -> None:
    write_toolkit(tmp_path, "kit", PLAIN_FUNCTIONS_INIT, tools="", helpers=HELPERS)

    toolset = load(tmp_path)

    assert toolset.problems == [], problem_texts(toolset)
    # not _twice (private), undocumented (no docstring), join and shout (defined elsewhere)
    assert sorted(toolset.tools) == ["kit__double", "kit__greet"]
    double = toolset.tools["kit__double"]
    assert double.description == "Double a number."
    assert double.parameters["properties"]["number"]["description"] == "The number to double."
    assert (await run_as(toolset, None, "kit__double", {"number": 21})).content == "42"
    assert (await run_as(toolset, None, "kit__greet")).content == "hello world"


@pytest.mark.parametrize(
    ("init", "words"),
    [
        (
            'def lookup(city: str, /) -> str:\n    """Look up a city."""\n',
            ["lookup()", "'city'", "positional-only"],
        ),
        (
            "from nonebot_plugin_marsho.tools import Toolbox\n"
            "class Opaque:\n    pass\n"
            'def lookup(city: Opaque) -> str:\n    """Look up a city."""\n'
            "tools = Toolbox()\ntools.add(lookup)\n",
            ["lookup()", "cannot be described", "Opaque"],
        ),
        (
            'def lookup(city: "Nowhere") -> str:\n    """Look up a city."""\n',
            ["lookup()", "Nowhere"],
        ),
    ],
    ids=["positional-only", "unsupported-type-in-toolbox", "unresolvable-hint"],
)
def test_a_function_that_cannot_be_described_is_reported_in_init_py(
    tmp_path: Path, init: str, words: list[str]
) -> None:
    folder = write_toolkit(tmp_path, "kit", init, tools="")

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(only_error(toolset), folder / "__init__.py", *words)


# --- tools.json wins, and is checked against the functions -------------------------------------


def test_tools_json_wins_over_docstrings_and_toolbox(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "kit", TOOLBOX_INIT, [
        tool_entry("kit__weather", CITY_SCHEMA, description="Weather, as tools.json says."),
    ])

    toolset = load(tmp_path)

    assert toolset.problems == [], problem_texts(toolset)
    assert list(toolset.tools) == ["kit__weather"]
    weather = toolset.tools["kit__weather"]
    assert weather.description == "Weather, as tools.json says."
    assert weather.parameters == CITY_SCHEMA


async def test_tools_json_entry_keeps_the_toolbox_registration_presets_and_permission(
    tmp_path: Path, run_as: Any
) -> None:
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}, "api_key": {"type": "string"}},
        "required": ["query", "api_key"],
    }
    write_toolkit(tmp_path, "kit", TOOLBOX_INIT, [tool_entry("kit__search", schema)])

    toolset = load(tmp_path)

    assert toolset.problems == [], problem_texts(toolset)
    search = toolset.tools["kit__search"]
    assert search.permission == "admin"
    assert search.parameters["properties"] == {"query": {"type": "string"}}
    assert search.parameters["required"] == ["query"]
    result = await run_as(toolset, ToolContext(role="owner"), "kit__search", {"query": "cats"})
    assert (result.status, result.content) == ("ok", "cats: key ok=True")


def test_required_parameter_the_function_lacks_is_an_error(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    }
    init = "def weather(city):\n    return city\n"
    folder = write_toolkit(tmp_path, "kit", init, [tool_entry("kit__weather", schema)])

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(only_error(toolset), folder / "tools.json", "kit__weather", "'country'",
                      "weather()", "no such parameter")


def test_function_parameter_without_default_missing_from_the_schema_is_an_error(
    tmp_path: Path,
) -> None:
    init = "def weather(city, units):\n    return city\n"
    folder = write_toolkit(tmp_path, "kit", init, [tool_entry("kit__weather", CITY_SCHEMA)])

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(only_error(toolset), folder / "tools.json", "kit__weather", "'units'",
                      "no default")


def test_optional_schema_property_the_function_lacks_is_a_warning(tmp_path: Path) -> None:
    properties = {**CITY_SCHEMA["properties"], "units": {"type": "string"}}
    schema = {**CITY_SCHEMA, "properties": properties}
    init = "def weather(city):\n    return city\n"
    folder = write_toolkit(tmp_path, "kit", init, [tool_entry("kit__weather", schema)])

    toolset = load(tmp_path)

    assert toolset.errors == []
    assert list(toolset.tools) == ["kit__weather"]
    assert len(toolset.warnings) == 1, problem_texts(toolset)
    assert_names_file(toolset.warnings[0], folder / "tools.json", "kit__weather", "'units'")


def test_function_taking_kwargs_accepts_any_schema(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
        "required": ["city", "units"],
    }
    init = "def weather(**kwargs):\n    return kwargs\n"
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__weather", schema)])

    toolset = load(tmp_path)

    assert toolset.problems == [], problem_texts(toolset)
    assert list(toolset.tools) == ["kit__weather"]


# --- permission in tools.json -------------------------------------------------------------------


def test_permission_beside_function_in_tools_json_sets_the_tools_permission(tmp_path: Path) -> None:
    toolset = three_permission_kit(tmp_path)

    assert {name: t.permission for name, t in toolset.tools.items()} == {
        "kit__chat": "everyone", "kit__kick": "admin", "kit__shutdown": "superuser"
    }


def test_unknown_permission_in_tools_json_is_an_error_naming_it(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", tools=[entry("kit__ping", permission="root")])

    toolset = load(tmp_path)

    assert toolset.toolkits == []
    assert_names_file(only_error(toolset), folder / "tools.json", "kit__ping", "'root'",
                      "everyone", "admin", "superuser")


# --- the owner's settings -----------------------------------------------------------------------


async def test_setting_presets_a_tools_json_parameter_hidden_from_the_model(
    tmp_path: Path, run_as: Any
) -> None:
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}, "api_key": {"type": "string"}},
        "required": ["query", "api_key"],
    }
    init = "def search(query, api_key):\n    return f'{query}: key ok={api_key == \"s3cret\"}'\n"
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__search", schema)])

    toolset = load(tmp_path, settings={"kit": {"api_key": "s3cret"}})

    assert toolset.problems == [], problem_texts(toolset)
    search = toolset.tools["kit__search"]
    assert search.parameters["properties"] == {"query": {"type": "string"}}
    assert search.parameters["required"] == ["query"]
    assert "s3cret" not in json.dumps(toolset.schemas())
    result = await run_as(toolset, None, "kit__search", {"query": "cats", "api_key": "guessed"})
    assert (result.status, result.content) == ("ok", "cats: key ok=True")


async def test_setting_presets_a_self_described_function(tmp_path: Path, run_as: Any) -> None:
    init = 'def search(query: str, api_key: str) -> str:\n    """Search."""\n    return api_key\n'
    write_toolkit(tmp_path, "kit", init, tools="")

    toolset = load(tmp_path, settings={"kit": {"api_key": "s3cret"}})

    assert toolset.problems == [], problem_texts(toolset)
    assert set(toolset.tools["kit__search"].parameters["properties"]) == {"query"}
    result = await run_as(toolset, None, "kit__search", {"query": "cats"})
    assert (result.status, result.content) == ("ok", "[redacted]")  # passed in, never shown


def test_setting_that_matches_no_parameter_is_a_warning(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit")

    toolset = load(tmp_path, settings={"kit": {"api_token": "s3cret"}})

    assert toolset.errors == []
    assert list(toolset.tools) == ["kit__ping"]
    assert len(toolset.warnings) == 1, problem_texts(toolset)
    assert_names_file(toolset.warnings[0], folder, "'api_token'", "matches no parameter")
    assert "s3cret" not in str(toolset.warnings[0])


def test_disabled_tool_is_dropped_and_listed(tmp_path: Path) -> None:
    init = "def ping():\n    return 'pong'\n\ndef pong():\n    return 'ping'\n"
    write_toolkit(tmp_path, "kit", init, [tool_entry("kit__ping"), tool_entry("kit__pong")])

    toolset = load(tmp_path, disabled_tools=["kit__pong"])

    assert list(toolset.tools) == ["kit__ping"]
    assert toolset.disabled == ["kit__pong"]
    assert [t.name for t in toolset.toolkits[0].tools] == ["kit__ping"]


@pytest.mark.parametrize(
    ("permissions", "expected"),
    [
        ({"kit": "admin"}, {"kit__chat": "admin", "kit__kick": "admin", "kit__shutdown": "admin"}),
        ({"kit__chat": "superuser"},
         {"kit__chat": "superuser", "kit__kick": "admin", "kit__shutdown": "superuser"}),
        ({"kit": "everyone", "kit__kick": "superuser"},  # the tool's own entry beats its toolkit's
         {"kit__chat": "everyone", "kit__kick": "superuser", "kit__shutdown": "everyone"}),
    ],
    ids=["whole-toolkit", "one-tool", "tool-beats-toolkit"],
)
def test_configured_permissions_override_the_declared_ones(
    tmp_path: Path, permissions: dict[str, str], expected: dict[str, str]
) -> None:
    three_permission_kit(tmp_path)

    toolset = load(tmp_path, permissions=permissions)

    assert {name: t.permission for name, t in toolset.tools.items()} == expected


# --- who sees and who may call ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("context", "offered"),
    [
        (None, ["kit__chat"]),
        (ToolContext(role="member"), ["kit__chat"]),
        (ToolContext(role="admin"), ["kit__chat", "kit__kick"]),
        (ToolContext(role="owner"), ["kit__chat", "kit__kick"]),
        (ToolContext(role="superuser"), ["kit__chat", "kit__kick", "kit__shutdown"]),
    ],
    ids=["no-context", "member", "admin", "owner", "superuser"],
)
def test_each_role_is_offered_only_the_tools_it_may_use(
    tmp_path: Path, context: ToolContext | None, offered: list[str]
) -> None:
    toolset = three_permission_kit(tmp_path)

    names = [schema["function"]["name"] for schema in toolset.schemas(context)]

    assert names == offered


@pytest.mark.parametrize(
    ("role", "tool", "who"),
    [
        ("member", "kit__kick", "group admins and owners"),
        ("member", "kit__shutdown", "superusers"),
        ("admin", "kit__shutdown", "superusers"),
        ("owner", "kit__shutdown", "superusers"),
    ],
)
async def test_a_call_to_a_tool_the_asker_may_not_use_is_denied(
    tmp_path: Path, run_as: Any, role: Role, tool: str, who: str
) -> None:
    toolset = three_permission_kit(tmp_path)

    result = await run_as(toolset, ToolContext(role=role), tool, {"user": "troll"})

    assert result.status == "denied"
    assert result.content.startswith("Error:")
    assert tool in result.content and who in result.content
    assert "kicked" not in result.content and "shutting" not in result.content


async def test_a_call_without_context_is_a_members_call(tmp_path: Path, run_as: Any) -> None:
    toolset = three_permission_kit(tmp_path)

    result = await run_as(toolset, None, "kit__kick", {"user": "troll"})

    assert result.status == "denied"


async def test_a_call_the_asker_may_make_runs(tmp_path: Path, run_as: Any) -> None:
    toolset = three_permission_kit(tmp_path)

    kick = await run_as(toolset, ToolContext(role="owner"), "kit__kick", {"user": "troll"})
    shutdown = await run_as(toolset, ToolContext(role="superuser"), "kit__shutdown")

    assert (kick.status, kick.content) == ("ok", "kicked troll")
    assert (shutdown.status, shutdown.content) == ("ok", "shutting down")
