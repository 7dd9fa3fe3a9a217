"""A function describes itself as a tool: schema from its hints, words from its docstring."""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Optional

import pytest
from jsonschema import Draft202012Validator
from nonebot.log import logger
from pydantic import BaseModel

from nonebot_plugin_marsho.tools import (
    Tool,
    Toolbox,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    Toolkit,
    ToolResponse,
    ToolResult,
    ToolRunner,
    Toolset,
    function_tool,
)
from nonebot_plugin_marsho.tools.schema import describe_function

# Types and functions live at module level: hints are strings here (`from __future__ import
# annotations`) and are resolved against the module's globals, as in a real toolkit.


class Color(enum.Enum):
    """A paint colour."""

    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    """Where to deliver."""

    street: str
    title: str = "Mx"  # a field literally named "title": pydantic's own titles go, this stays
    zip_code: int | None = None


class Undescribable:
    """A plain class: pydantic has no JSON Schema for it."""


def every_type(
    text: str,
    count: int,
    ratio: float,
    loud: bool,
    mode: Literal["a", "b"],
    color: Color,
    tags: list[str],
    scores: dict[str, int],
    limit: Optional[int],  # noqa: UP045 - the old spelling is what this checks
    offset: int | None,
    address: Address,
    retries: int = 3,
    label: str | None = None,
) -> dict[str, str]:
    """Take one parameter of every supported type; say what each one arrived as."""
    return {name: repr(value) for name, value in locals().items()}


def google_weather(city: str, days: int = 1) -> str:
    """Get the weather forecast of a city.

    Uses the national weather service; forecasts beyond a week are guesses.

    Args:
        city: City name, e.g. Hangzhou.
        days: How many days ahead to forecast.
    """
    return f"{city}: sunny for {days} day(s)"


def rest_weather(city: str, days: int = 1) -> str:
    """Get the weather forecast of a city.

    Uses the national weather service; forecasts beyond a week are guesses.

    :param city: City name, e.g. Hangzhou.
    :param days: How many days ahead to forecast.
    """
    return f"{city}: sunny for {days} day(s)"


def with_options(options: dict[str, str] = {"title": "Dr", "lang": "en"}) -> str:  # noqa: B006
    """Echo the options."""
    return json.dumps(options)


def whoami(ctx: ToolContext, greeting: str = "hi") -> str:
    """Say who is asking."""
    return f"{greeting} {ctx.user_id} ({ctx.role}) in {ctx.group_id}"


def whoami_optional(greeting: str = "hi", ctx: ToolContext | None = None) -> str:
    """Say who is asking."""
    assert ctx is not None, "the context was not injected"
    return f"{greeting} {ctx.user_id} ({ctx.role}) in {ctx.group_id}"


def search(query: str, api_key: str) -> str:
    """Search the web."""
    return f"results for {query} (asked with key {api_key})"


def search_and_fail(query: str, api_key: str) -> str:
    """Search the web, badly."""
    raise PermissionError(f"the key {api_key} was refused for {query!r}")


def login(user: str, password: str) -> dict[str, str]:
    """Log in and echo the credentials (a careless tool)."""
    return {"user": user, "password": password}


def login_and_fail(user: str, password: str) -> str:
    """Log in and fail with the password in the error (a careless tool)."""
    raise KeyError(password)


def find_city(name: str) -> ToolResponse:
    """Find a city."""
    return ToolResponse.error(f"no city called {name}")


def city_facts(name: str) -> ToolResponse:
    """Facts about a city."""
    return ToolResponse.success({"name": name, "districts": ["Yuhang", "Xihu"]})


def deliver(address: Address) -> ToolResponse:
    """Return the delivery address."""
    return ToolResponse.success(address)


def takes_anything(**kwargs: Any) -> str:
    """Accept any keyword."""
    return json.dumps(kwargs, sort_keys=True)


def positional_only(city: str, /) -> str:
    """Positional-only city."""
    return city


def plain_class(thing: Undescribable) -> str:
    """Take a plain class."""
    return repr(thing)


def forward_ref(thing: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
    """Take a type that does not exist."""
    return repr(thing)


def undocumented(city: str) -> str:
    return city


def schema_of(func: Callable[..., Any], **presets: Any) -> dict[str, Any]:
    return function_tool(func, name=func.__name__, presets=presets).parameters


def titles_outside_properties(schema: Any, path: str = "") -> Iterator[str]:
    """Where a "title" keyword (not a property named "title") is left in the schema."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from titles_outside_properties(item, f"{path}/{index}")
    elif isinstance(schema, dict):
        for key, value in schema.items():
            if key == "title":
                yield path or "/"
            if key in ("properties", "$defs") and isinstance(value, dict):
                for name, sub in value.items():
                    yield from titles_outside_properties(sub, f"{path}/{key}/{name}")
            else:
                yield from titles_outside_properties(value, f"{path}/{key}")


async def run_tools(
    tools: list[Tool], *calls: tuple[str, Any], context: ToolContext | None = None
) -> list[ToolResult]:
    """Run (tool name, JSON arguments) calls against these tools as the model's calls would be."""
    toolset = Toolset()
    toolset.add(Toolkit("kit", Path("kit"), tools))
    runner = ToolRunner(toolset, timeout=5)
    try:
        return await runner.run(
            [
                ToolCall(f"call_{i}", name, args if isinstance(args, str) else json.dumps(args))
                for i, (name, args) in enumerate(calls)
            ],
            context,
        )
    finally:
        runner.close()


def registered(func: Callable[..., Any], **presets: Any) -> list[Tool]:
    """`func` as toolkit "kit" offers it after `Toolbox().add(func, **presets)`."""
    box = Toolbox()
    box.add(func, **presets)
    return box.build("kit")


# --- a schema for each supported type ---------------------------------------------------------


EVERY_TYPE = schema_of(every_type)


@pytest.mark.parametrize(
    ("parameter", "expected"),
    [
        ("text", {"type": "string"}),
        ("count", {"type": "integer"}),
        ("ratio", {"type": "number"}),
        ("loud", {"type": "boolean"}),
        ("mode", {"type": "string", "enum": ["a", "b"]}),
        ("color", {"$ref": "#/$defs/Color"}),
        ("tags", {"type": "array", "items": {"type": "string"}}),
        ("scores", {"type": "object", "additionalProperties": {"type": "integer"}}),
        ("limit", {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        ("offset", {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
        ("address", {"$ref": "#/$defs/Address"}),
        ("retries", {"type": "integer", "default": 3}),
        ("label", {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}),
    ],
)
def test_each_supported_type_gets_its_json_schema(parameter: str, expected: dict[str, Any]) -> None:
    assert EVERY_TYPE["type"] == "object"
    assert EVERY_TYPE["properties"][parameter] == expected


def test_parameters_without_default_are_required_and_those_with_one_are_not() -> None:
    assert EVERY_TYPE["required"] == [
        "text", "count", "ratio", "loud", "mode", "color", "tags", "scores",
        "limit", "offset", "address",
    ]
    assert list(EVERY_TYPE["properties"]) == [*EVERY_TYPE["required"], "retries", "label"]


def test_every_generated_schema_is_valid_json_schema() -> None:
    Draft202012Validator.check_schema(EVERY_TYPE)
    for func in (google_weather, rest_weather, whoami, with_options, deliver):
        Draft202012Validator.check_schema(schema_of(func))


def test_enum_becomes_a_shared_definition_with_its_docstring() -> None:
    assert EVERY_TYPE["$defs"]["Color"] == {
        "type": "string",
        "enum": ["red", "blue"],
        "description": "A paint colour.",
    }


def test_pydantic_model_parameter_is_a_nested_schema_in_defs() -> None:
    address = EVERY_TYPE["$defs"]["Address"]

    assert address == {
        "type": "object",
        "description": "Where to deliver.",
        "properties": {
            "street": {"type": "string"},
            "title": {"type": "string", "default": "Mx"},
            "zip_code": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        },
        "required": ["street"],
    }
    validator = Draft202012Validator(schema_of(deliver))
    assert validator.is_valid({"address": {"street": "1 West Lake Rd", "zip_code": 310000}})
    assert not validator.is_valid({"address": {"zip_code": 310000}})  # street is required


def test_no_title_keys_are_left_but_a_property_named_title_survives() -> None:
    assert list(titles_outside_properties(EVERY_TYPE)) == []
    assert "title" in EVERY_TYPE["$defs"]["Address"]["properties"]


def test_a_default_whose_dict_has_a_title_key_is_shown_whole() -> None:
    # the default is a value, not a schema: stripping "title" from it misleads the model
    options = schema_of(with_options)["properties"]["options"]

    assert options["default"] == {"title": "Dr", "lang": "en"}


async def test_the_function_receives_python_values_not_json() -> None:
    arguments = {
        "text": "hello", "count": 2, "ratio": 1, "loud": True, "mode": "b", "color": "blue",
        "tags": ["x", "y"], "scores": {"a": 1}, "limit": None, "offset": 5,
        "address": {"street": "1 West Lake Rd"},
    }

    [result] = await run_tools(registered(every_type), ("kit__every_type", arguments))

    assert result.status == "ok", result.content
    assert json.loads(result.content) == {
        "text": "'hello'", "count": "2", "ratio": "1.0", "loud": "True", "mode": "'b'",
        "color": "<Color.BLUE: 'blue'>",
        "tags": "['x', 'y']", "scores": "{'a': 1}", "limit": "None", "offset": "5",
        "address": "Address(street='1 West Lake Rd', title='Mx', zip_code=None)",
        "retries": "3", "label": "None",  # defaults filled in
    }


async def test_a_value_outside_the_enum_is_refused_before_the_function_runs() -> None:
    tool = function_tool(every_type, name="kit__every_type")
    tool.func = lambda **kwargs: pytest.fail("the function ran with a bad colour")

    [result] = await run_tools([tool], ("kit__every_type", {
        "text": "", "count": 0, "ratio": 0, "loud": False, "mode": "a", "color": "green",
        "tags": [], "scores": {}, "limit": 1, "offset": 1, "address": {"street": "x"},
    }))

    assert result.status == "bad_arguments"
    assert "color" in result.content and "green" in result.content


# --- descriptions from the docstring ----------------------------------------------------------


@pytest.mark.parametrize("func", [google_weather, rest_weather], ids=["google", "rest"])
def test_docstring_gives_the_description_and_each_parameter_description(
    func: Callable[..., Any],
) -> None:
    tool = function_tool(func, name="kit__weather")

    assert tool.description == (
        "Get the weather forecast of a city.\n\n"
        "Uses the national weather service; forecasts beyond a week are guesses."
    )
    assert tool.parameters["properties"] == {
        "city": {"type": "string", "description": "City name, e.g. Hangzhou."},
        "days": {
            "type": "integer", "default": 1, "description": "How many days ahead to forecast."
        },
    }
    assert tool.parameters["required"] == ["city"]
    assert tool.schema()["function"]["name"] == "kit__weather"


def test_describe_function_returns_description_schema_and_arguments_model() -> None:
    description, schema, model = describe_function(google_weather)

    assert description.startswith("Get the weather forecast of a city.")
    assert set(schema["properties"]) == {"city", "days"}
    assert model.model_validate({"city": "Hangzhou"}).days == 1


def test_an_explicit_description_replaces_the_docstring() -> None:
    tool = function_tool(undocumented, name="kit__city", description="Echo a city.")

    assert tool.description == "Echo a city."


# --- the context parameter --------------------------------------------------------------------


@pytest.mark.parametrize("func", [whoami, whoami_optional], ids=["ToolContext", "ToolContext|None"])
async def test_context_parameter_is_hidden_from_the_model_and_receives_the_asker(
    func: Callable[..., Any],
) -> None:
    tool = function_tool(func, name="kit__whoami")
    asker = ToolContext(session_key="group_7", user_id="42", group_id="7", role="admin")

    assert set(tool.parameters["properties"]) == {"greeting"}
    assert "ctx" not in tool.parameters.get("required", [])
    assert "ctx" not in json.dumps(tool.schema())
    # the model naming the context parameter changes nothing
    [result] = await run_tools(
        [tool], ("kit__whoami", {"greeting": "hello", "ctx": {"role": "superuser"}}), context=asker
    )

    assert result.status == "ok", result.content
    assert result.content == "hello 42 (admin) in 7"


# --- presets ----------------------------------------------------------------------------------


def test_preset_is_absent_from_the_schema() -> None:
    [tool] = registered(search, api_key="secret-key-123")

    assert tool.parameters["properties"] == {"query": {"type": "string"}}
    assert tool.parameters["required"] == ["query"]
    assert "secret-key-123" not in json.dumps(tool.schema())
    assert "api_key" not in json.dumps(tool.schema())


async def test_preset_reaches_the_function_and_the_model_cannot_override_it() -> None:
    seen: list[str] = []

    def spy_search(query: str, api_key: str) -> str:
        """Search the web."""
        seen.append(api_key)
        return "three results"

    [result] = await run_tools(
        registered(spy_search, api_key="secret-key-123"),
        ("kit__spy_search", {"query": "cats", "api_key": "model-made-this-up"}),
    )

    assert result.status == "ok", result.content
    assert seen == ["secret-key-123"]


async def test_preset_secret_echoed_by_the_function_is_redacted() -> None:
    [result] = await run_tools(
        registered(search, api_key="secret-key-123"), ("kit__search", {"query": "cats"})
    )

    assert result.status == "ok"
    assert "secret-key-123" not in result.content
    assert result.content.startswith("results for cats")


async def test_preset_secret_in_an_exception_message_is_redacted_in_result_and_log() -> None:
    logged: list[str] = []
    sink = logger.add(lambda message: logged.append(str(message)), format="{message}")
    try:
        [result] = await run_tools(
            registered(search_and_fail, api_key="secret-key-123"),
            ("kit__search_and_fail", {"query": "cats"}),
        )
    finally:
        logger.remove(sink)

    assert result.status == "error"
    assert "PermissionError" in result.content
    assert "secret-key-123" not in result.content
    assert logged and not any("secret-key-123" in line for line in logged)


@pytest.mark.parametrize("func", [login, login_and_fail], ids=["returned-in-json", "in-KeyError"])
async def test_preset_password_with_quote_and_backslash_is_redacted_even_when_escaped(
    func: Callable[..., Any],
) -> None:
    # JSON and repr() escape `"` and `\`: the secret reaches the text in its escaped spelling
    password = 'Tr0ub"4dor\\3'
    [result] = await run_tools(
        registered(func, password=password), (f"kit__{func.__name__}", {"user": "me"})
    )

    assert "Tr0ub" not in result.content and "4dor" not in result.content, result.content


def test_a_function_taking_kwargs_accepts_any_preset() -> None:
    [tool] = registered(takes_anything, region="eu-west")

    assert tool.presets == {"region": "eu-west"}


# --- functions that cannot be tools ----------------------------------------------------------


@pytest.mark.parametrize(
    ("func", "words"),
    [
        (positional_only, ["city", "positional-only"]),
        (plain_class, ["plain_class()", "cannot be described", "Undescribable"]),
        (forward_ref, ["forward_ref()", "NoSuchType"]),
        (undocumented, ["undocumented()", "docstring"]),
    ],
    ids=["positional-only", "plain-class", "unresolvable-hint", "no-docstring"],
)
def test_function_that_cannot_be_described_is_refused_with_the_reason(
    func: Callable[..., Any], words: list[str]
) -> None:
    with pytest.raises(ToolDefinitionError) as raised:
        function_tool(func, name=func.__name__)

    for word in words:
        assert word in str(raised.value), f"{word!r} not in {raised.value}"


def test_preset_that_is_not_a_parameter_is_refused() -> None:
    refusal = r"preset 'apikey' is not a parameter of search\(\)"
    with pytest.raises(ToolDefinitionError, match=refusal):
        function_tool(search, name="search", presets={"apikey": "x"})
    with pytest.raises(ToolDefinitionError, match="apikey"):
        Toolbox().add(search, apikey="x")


def test_invalid_permission_is_refused_naming_the_allowed_ones() -> None:
    for register in (
        lambda: function_tool(search, name="search", permission="root"),
        lambda: Toolbox().add(search, permission="root"),
        lambda: Toolbox().tool(permission="root")(search),
    ):
        with pytest.raises(ToolDefinitionError) as raised:
            register()
        assert "'root'" in str(raised.value)
        assert "everyone, admin, superuser" in str(raised.value)


# --- registering with a Toolbox --------------------------------------------------------------


def test_bare_decorator_registers_under_the_function_name_for_everyone() -> None:
    tools = Toolbox()

    @tools.tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    assert ping() == "pong"  # the decorator gives the function back unchanged
    [tool] = tools.build("kit")
    assert (tool.name, tool.permission) == ("kit__ping", "everyone")
    assert tool.description == "Answer pong."
    assert [t.name for t in tools.build()] == ["ping"]


def test_decorator_with_options_sets_name_and_permission() -> None:
    tools = Toolbox()

    @tools.tool(permission="superuser", name="reboot_now")
    def reboot(delay: int = 0) -> str:
        """Reboot the server."""
        return f"rebooting in {delay}"

    assert reboot() == "rebooting in 0"
    [tool] = tools.build("kit")
    assert (tool.name, tool.permission) == ("kit__reboot_now", "superuser")
    assert tool.parameters["properties"] == {"delay": {"type": "integer", "default": 0}}


def test_a_tool_name_containing_the_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="__"):
        Toolbox().add(search, name="web__search")


# --- results with a status -------------------------------------------------------------------


async def test_tool_response_error_reaches_the_model_as_an_error() -> None:
    [result] = await run_tools(registered(find_city), ("kit__find_city", {"name": "Atlantis"}))

    assert result.status == "error"
    assert not result.ok
    assert result.content.startswith("Error:")
    assert "no city called Atlantis" in result.content


async def test_tool_response_success_serializes_its_content() -> None:
    results = await run_tools(
        [*registered(city_facts), *registered(deliver)],
        ("kit__city_facts", {"name": "Hangzhou"}),
        ("kit__deliver", {"address": {"street": "1 West Lake Rd"}}),
    )

    assert [r.status for r in results] == ["ok", "ok"]
    assert json.loads(results[0].content) == {"name": "Hangzhou", "districts": ["Yuhang", "Xihu"]}
    assert json.loads(results[1].content) == {
        "street": "1 West Lake Rd", "title": "Mx", "zip_code": None
    }


async def test_sync_and_async_functions_both_run() -> None:
    tools = Toolbox()

    @tools.tool
    async def later(seconds: float = 0.0) -> str:
        """Wait a moment."""
        await asyncio.sleep(seconds)
        return "waited"

    tools.add(google_weather, name="weather")
    results = await run_tools(
        tools.build("kit"), ("kit__later", {}), ("kit__weather", {"city": "Hangzhou", "days": 2})
    )

    assert [r.content for r in results] == ["waited", "Hangzhou: sunny for 2 day(s)"]
