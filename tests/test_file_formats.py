"""The JSON files owners and toolkit authors write (tools.json, toolkit.json, webservices.json,
mcp.json, praises.json) are read one way: a typical mistake is one message naming the file, the
entry and the field; `${NAME}` follows one rule in web services and MCP servers; a tool's name
follows one rule wherever it is checked."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.agent import conversation
from nonebot_plugin_marsho.agent.praises import Liked, PraisesError, read_praises
from nonebot_plugin_marsho.fileformat import FileFormatError, read_json
from nonebot_plugin_marsho.tools import Toolbox, ToolsetSource, load_toolset, model, naming
from nonebot_plugin_marsho.tools.mcp import read_mcp_config
from nonebot_plugin_marsho.tools.webservices import load_webservices

PING = "def ping():\n    return 'pong'\n"


# --- each format's mistakes, as the owner reads them -------------------------------------------


def tools_json(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "__init__.py").write_text(PING, encoding="utf-8")
    (folder / "tools.json").write_text(text, encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])
    return folder / "tools.json", [str(p) for p in toolset.errors]


def toolkit_json(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "__init__.py").write_text('def ping():\n    """Answer pong."""\n', encoding="utf-8")
    (folder / "toolkit.json").write_text(text, encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])
    return folder / "toolkit.json", [str(p) for p in toolset.errors]


def webservices_json(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    path = tmp_path / "webservices.json"
    path.write_text(text, encoding="utf-8")
    _, problems = load_webservices(path, environ={})
    return path, [str(p) for p in problems if p.severity == "error"]


def mcp_json(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    path = tmp_path / "mcp.json"
    path.write_text(text, encoding="utf-8")
    return path, read_mcp_config(path, environ={})[1]


def praises_json(tmp_path: Path, text: str) -> tuple[Path, list[str]]:
    path = tmp_path / "praises.json"
    path.write_text(text, encoding="utf-8")
    try:
        read_praises(path)
    except PraisesError as error:
        return path, str(error).splitlines()
    return path, []


def service(**fields: Any) -> str:
    entry = {"name": "ask", "description": "Ask", "url": "https://example.com/ask", **fields}
    return json.dumps({"toolkit": "svc", "tools": [entry]})


def tool(**function: Any) -> str:
    return json.dumps([{"type": "function", "function": {"name": "kit__ping", **function}}])


MISTAKES: list[tuple[str, Callable[[Path, str], tuple[Path, list[str]]], str, str]] = [
    # (case, reader, file text, the one message after "<file>: ")
    ("tools.json wrong type", tools_json, tool(description=5),
     "entry 1 (kit__ping): 'description' must be a string, not a number"),
    ("tools.json missing field", tools_json, '[{"type": "function", "function": {"description": "d"}}]',
     "entry 1: 'name' is missing"),
    ("tools.json unknown permission", tools_json,
     '[{"type": "function", "function": {"name": "kit__ping"}, "permission": "root"}]',
     "entry 1 (kit__ping): 'permission' must be one of 'everyone', 'admin' or 'superuser', not 'root'"),
    ("tools.json bad tool name", tools_json, tool(name="kit__pi ng"),
     "entry 1 (kit__pi ng): 'name' must be 1-64 letters, digits, '_' or '-' (what OpenAI-compatible "
     "endpoints accept) with the toolkit's name before it, not 'kit__pi ng'"),
    ("tools.json syntax error", tools_json, '[\n  {"type": "function",,}\n]',
     "invalid JSON at line 2, column 23: Expecting property name enclosed in double quotes"),
    ("toolkit.json wrong type", toolkit_json, '{"enabled_by_default": "no"}',
     "'enabled_by_default' must be true or false, not a string"),
    ("toolkit.json syntax error", toolkit_json, '{"sends": "x"\n"enabled_by_default": false}',
     "invalid JSON at line 2, column 1: Expecting ',' delimiter"),
    ("webservices.json wrong type", webservices_json, service(timeout="5"),
     "tools[0] (ask): 'timeout' must be a number, not a string"),
    ("webservices.json missing field", webservices_json,
     '{"tools": [{"name": "ask", "description": "Ask"}]}', "tools[0] (ask): 'url' is missing"),
    ("webservices.json unknown permission", webservices_json, service(permission="root"),
     "tools[0] (ask): 'permission' must be one of 'everyone', 'admin' or 'superuser', not 'root'"),
    ("webservices.json bad tool name", webservices_json, service(name="a__b"),
     "tools[0] (a__b): 'name' must not contain '__' (it separates toolkit and function), not 'a__b'"),
    ("webservices.json syntax error", webservices_json, '{"tools": [\n  // a comment\n  {]}',
     "invalid JSON at line 3, column 4: Expecting property name enclosed in double quotes"),
    ("mcp.json wrong type", mcp_json, '{"mcpServers": {"fs": {"command": "x", "disabled": "yes"}}}',
     "MCP server 'fs': 'disabled' must be true or false, not a string"),
    ("mcp.json missing field", mcp_json, '{"mcpServers": {"fs": {"args": ["-y"]}}}',
     "MCP server 'fs': needs a 'command' (a local server) or a 'url' (a remote one)"),
    ("mcp.json unknown permission", mcp_json,
     '{"mcpServers": {"fs": {"command": "x", "permission": "root"}}}',
     "MCP server 'fs': 'permission' must be one of 'everyone', 'admin' or 'superuser', not 'root'"),
    ("mcp.json syntax error", mcp_json, '{"mcpServers": {\n  "fs": {"command": "x"}\n  "web": {}\n}}',
     "invalid JSON at line 3, column 3: Expecting ',' delimiter"),
    ("praises.json wrong type", praises_json, '{"like": [{"name": "Alice", "advantages": ["kind"]}]}',
     "like[0] (Alice): 'advantages' must be a string, not a list"),
    ("praises.json missing field", praises_json, '{"like": [{"name": "Alice"}, {"advantages": "x"}]}',
     "like[1]: 'name' is missing"),
    ("praises.json syntax error", praises_json, '{"like": [\n  {"name": "Alice"},\n]}',
     "invalid JSON at line 3, column 1: Expecting value"),
]


@pytest.mark.parametrize(("case", "reader", "text", "expected"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_typical_mistake_is_one_message_naming_file_entry_and_field(
    tmp_path: Path, case: str, reader: Callable[[Path, str], tuple[Path, list[str]]], text: str,
    expected: str,
) -> None:
    path, messages = reader(tmp_path, text)
    assert messages == [f"{path}: {expected}"]


@pytest.mark.parametrize("reader", [tools_json, toolkit_json, webservices_json, mcp_json, praises_json],
                         ids=lambda reader: reader.__name__.replace("_", "."))
def test_every_format_accepts_comments_and_a_byte_order_mark(
    tmp_path: Path, reader: Callable[[Path, str], tuple[Path, list[str]]]
) -> None:
    text = {
        tools_json: tool(description="Answer pong"),
        toolkit_json: '{"enabled_by_default": true}',
        webservices_json: service(),
        mcp_json: '{"mcpServers": {"fs": {"command": "x"}}}',
        praises_json: '{"like": [{"name": "Alice"}]}',
    }[reader]
    assert reader(tmp_path, "\ufeff// written in Notepad\n/* a block\n comment */" + text)[1] == []


def test_a_file_that_is_not_utf8_says_so(tmp_path: Path) -> None:
    path = tmp_path / "praises.json"
    path.write_bytes('{"like": [{"name": "Zoë"}]}'.encode("latin-1"))
    with pytest.raises(FileFormatError) as caught:
        read_json(path)
    assert str(caught.value) == f"{path}: not UTF-8 text (byte 22): save it as UTF-8"


def test_praises_names_are_trimmed_and_a_bare_list_is_read(tmp_path: Path) -> None:
    path, _ = praises_json(tmp_path, '[{"name": " Alice ", "advantages": " kind "}, {"name": "Bob"}]')
    assert read_praises(path) == [Liked("Alice", "kind"), Liked("Bob")]


# --- ${NAME}: one rule for web services and MCP servers ----------------------------------------


def two_services(tmp_path: Path) -> Path:
    path = tmp_path / "webservices.json"
    entries = [
        {"name": "locked", "url": "https://example.com/a", "description": "d",
         "headers": {"Authorization": "Bearer ${MARSHO_TEST_TOKEN}"}},
        {"name": "open", "url": "https://example.com/b", "description": "d"},
    ]
    path.write_text(json.dumps({"toolkit": "svc", "tools": entries}), encoding="utf-8")
    return path


def two_servers(tmp_path: Path) -> Path:
    path = tmp_path / "mcp.json"
    servers = {"locked": {"command": "x", "env": {"TOKEN": "${MARSHO_TEST_TOKEN}"}},
               "open": {"command": "y"}}
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def webservices_with(path: Path, environ: dict[str, str]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """(secrets of each loaded service by name, error messages)."""
    toolkit, problems = load_webservices(path, environ=environ)
    loaded = {t.name.removeprefix("svc__"): t.func.service.secrets for t in (toolkit.tools if toolkit else [])}
    return loaded, [str(p) for p in problems if p.severity == "error"]


def mcp_with(path: Path, environ: dict[str, str]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    servers, problems = read_mcp_config(path, environ=environ)
    return {name: server.secrets for name, server in servers.items()}, problems


ENV_READERS = [("webservices.json", two_services, webservices_with, "tools[0] (locked): 'headers.Authorization'"),
               ("mcp.json", two_servers, mcp_with, "MCP server 'locked': 'env.TOKEN'")]


@pytest.mark.parametrize(("write", "read", "where"), [r[1:] for r in ENV_READERS], ids=[r[0] for r in ENV_READERS])
def test_an_unset_variable_keeps_only_its_entry_from_loading_and_is_named(
    tmp_path: Path, write: Callable[[Path], Path], read: Callable[..., Any], where: str
) -> None:
    path = write(tmp_path)
    loaded, errors = read(path, {})
    assert list(loaded) == ["open"]
    assert errors == [f"{path}: {where} uses the environment variable MARSHO_TEST_TOKEN, which is not set"]


@pytest.mark.parametrize(("write", "read", "where"), [r[1:] for r in ENV_READERS], ids=[r[0] for r in ENV_READERS])
def test_a_set_variable_is_expanded_when_the_file_is_read_and_kept_for_redaction(
    tmp_path: Path, write: Callable[[Path], Path], read: Callable[..., Any], where: str
) -> None:
    loaded, errors = read(write(tmp_path), {"MARSHO_TEST_TOKEN": "tok-5ecret"})
    assert errors == [] and set(loaded) == {"locked", "open"}
    assert "tok-5ecret" in loaded["locked"]
    assert naming.redact("the server said: bad token tok-5ecret", loaded["locked"]) == (
        "the server said: bad token [redacted]"
    )


def test_the_expanded_values_reach_the_service_and_the_server(tmp_path: Path) -> None:
    environ = {"MARSHO_TEST_TOKEN": "tok-5ecret"}
    toolkit, _ = load_webservices(two_services(tmp_path), environ=environ)
    assert toolkit is not None
    assert toolkit.tools[0].func.service.headers == {"Authorization": "Bearer tok-5ecret"}
    servers, _ = read_mcp_config(two_servers(tmp_path), environ=environ)
    assert servers["locked"].env == {"TOKEN": "tok-5ecret"}
    assert "tok-5ecret" not in repr(servers["locked"])


def test_a_disabled_server_needs_no_variable(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"off": {"command": "${MARSHO_TEST_UNSET}", "disabled": true}}}',
                    encoding="utf-8")
    servers, problems = read_mcp_config(path, environ={})
    assert problems == [] and servers["off"].disabled


def test_expansion_names_every_missing_variable_once() -> None:
    environment = naming.Environment({"ONE": "1111"})
    assert environment.expand("x ${ONE} $NOT_A_REF ${ONE}") == "x 1111 $NOT_A_REF 1111"
    assert environment.secrets == ["1111", "1111"]
    with pytest.raises(ValueError, match=r"^uses the environment variables TWO, THREE, which are not set$"):
        environment.expand("${TWO} ${THREE} ${TWO}")


# --- one name rule -----------------------------------------------------------------------------

NAMES = [
    ("ping", True), ("get-weather_2", True), ("x" * 59, True),  # kit__ + 59 = 64 characters
    ("x" * 60, False), ("get weather", False), ("get.weather", False), ("天气", False),
    ("get__weather", False),
]


def accepted_in_tools_json(tmp_path: Path, function: str) -> bool:
    folder = tmp_path / "json" / "kit"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(PING, encoding="utf-8")
    entry = {"type": "function", "function": {"name": f"kit__{function}", "description": "d"}}
    (folder / "tools.json").write_text(json.dumps([entry]), encoding="utf-8")
    toolset = load_toolset([ToolsetSource(folder.parent, "a test")])
    # a name the rule accepts may still lack its function in __init__.py: not the name's fault
    return not any("'name'" in p.message for p in toolset.errors)


def accepted_in_a_toolbox(tmp_path: Path, function: str) -> bool:
    folder = tmp_path / "box" / "kit"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent(f"""\
        from nonebot_plugin_marsho.tools import Toolbox

        tools = Toolbox()

        def ping() -> str:
            '''Answer pong.'''
            return "pong"

        tools.add(ping, name={function!r})
        """), encoding="utf-8")
    return not load_toolset([ToolsetSource(folder.parent, "a test")]).errors


def accepted_in_webservices(tmp_path: Path, function: str) -> bool:
    path = tmp_path / "webservices.json"
    entry = {"name": function, "url": "https://example.com/x", "description": "d"}
    path.write_text(json.dumps({"toolkit": "kit", "tools": [entry]}), encoding="utf-8")
    return load_webservices(path, environ={})[0] is not None


@pytest.mark.parametrize(("function", "valid"), NAMES, ids=[n[0][:12] for n in NAMES])
def test_a_tool_name_is_accepted_or_refused_alike_wherever_it_is_checked(
    tmp_path: Path, function: str, valid: bool
) -> None:
    verdicts = {
        "tools.json": accepted_in_tools_json(tmp_path, function),
        "Toolbox": accepted_in_a_toolbox(tmp_path, function),
        "webservices.json": accepted_in_webservices(tmp_path, function),
    }
    assert verdicts == dict.fromkeys(verdicts, valid)


@pytest.mark.parametrize(("toolkit", "valid"), [("kit", True), ("k" * 58, True), ("k" * 61, False),
                                                ("my__kit", False), ("my kit", False)])
def test_a_toolkit_name_is_accepted_or_refused_alike_as_a_folder_and_in_webservices(
    tmp_path: Path, toolkit: str, valid: bool
) -> None:
    folder = tmp_path / "kits" / toolkit
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text('def ping():\n    """Answer pong."""\n', encoding="utf-8")
    as_folder = not load_toolset([ToolsetSource(folder.parent, "a test")]).errors
    path = tmp_path / "webservices.json"
    entry = {"name": "p", "url": "https://example.com/x", "description": "d"}
    path.write_text(json.dumps({"toolkit": toolkit, "tools": [entry]}), encoding="utf-8")
    in_webservices = load_webservices(path, environ={})[0] is not None
    assert (as_folder, in_webservices) == (valid, valid)


def test_a_documented_function_with_a_double_underscore_is_a_load_problem_not_a_crash(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "__init__.py").write_text('def get__weather():\n    """Weather."""\n', encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "a test")])
    [problem] = toolset.errors
    assert problem.path == folder / "__init__.py" and "'get__weather'" in problem.message


def test_the_name_rules_have_one_definition() -> None:
    assert model.TOOL_NAME_PATTERN is naming.TOOL_NAME_PATTERN
    assert conversation.TOOL_NAME_PATTERN is naming.TOOL_NAME_PATTERN
    assert model.SEPARATOR is naming.SEPARATOR
    with pytest.raises(ValueError, match="__"):
        Toolbox().add(print, name="web__search")


# --- one schema normalisation ------------------------------------------------------------------


def test_tools_json_and_webservices_normalise_parameters_alike(tmp_path: Path) -> None:
    parameters = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                  "properties": {"q": {"type": "string"}}}
    folder = tmp_path / "kits" / "kit"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("def ping(q=''):\n    return q\n", encoding="utf-8")
    entry = {"type": "function", "function": {"name": "kit__ping", "description": "d",
                                              "parameters": parameters}}
    (folder / "tools.json").write_text(json.dumps([entry]), encoding="utf-8")
    from_json = load_toolset([ToolsetSource(folder.parent, "a test")]).tools["kit__ping"].parameters
    path = tmp_path / "webservices.json"
    service_entry = {"name": "ping", "url": "https://example.com/x", "description": "d",
                     "parameters": parameters}
    path.write_text(json.dumps({"toolkit": "kit", "tools": [service_entry]}), encoding="utf-8")
    toolkit, _ = load_webservices(path, environ={})
    assert toolkit is not None
    expected = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert from_json == toolkit.tools[0].parameters == naming.normalize_parameters(parameters) == expected
