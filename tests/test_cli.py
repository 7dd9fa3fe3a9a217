"""`python -m nonebot_plugin_marsho` (issue 3 item 8) as a toolkit author or a bot owner runs it:
a real subprocess in a folder holding a `.env`, toolset folders built under tmp, and for `ask`
a fake endpoint of its own on loopback."""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI, text, tool_calls

SECRET = "sk-cli-secret-0042"
MCP_SERVER = Path(__file__).resolve().parent / "mcp_server.py"
ODD_SERVER = Path(__file__).resolve().parent / "mcp_odd_server.py"
MCP_TOKEN = "mcp-cli-token-0042"

CALC = '''
    """Toolkit `calc`: self-describing functions registered in a Toolbox."""
    import time
    from pathlib import Path

    from nonebot_plugin_marsho.tools import Toolbox, ToolContext

    tools = Toolbox()
    MARKER = Path(__file__).parent / "napped"
    WAKE = Path(__file__).parent / "wake"  # the test creates it once it has read the other results


    @tools.tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b


    @tools.tool
    def boom() -> str:
        """Always fails."""
        raise RuntimeError("kaboom")


    @tools.tool
    def nap() -> str:
        """Rest a moment."""
        began = time.monotonic()
        while not WAKE.exists() and time.monotonic() - began < 20:
            time.sleep(0.01)
        MARKER.write_text("done")
        return "rested"


    @tools.tool(permission="superuser")
    def vault(api_key: str, context: ToolContext) -> str:
        """Open the vault (owner only)."""
        return f"opened for {context.role}" if api_key == "%s" else "wrong key"
''' % SECRET

WEATHER_JSON = """
    [
        {
            "type": "function",
            "function": {
                "name": "weather__today",  // the marshoai tools.json format, comments allowed
                "description": "Weather of a city today.",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}},
                    "required": ["location"]
                }
            }
        }
    ]
"""

WEATHER = """
    async def today(location: str) -> str:
        return f"{location}: sunny, 21°C"
"""


def write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(content).lstrip(), encoding="utf-8")


def make_project(folder: Path, toolset_dirs: list[Path], **settings: str) -> Path:
    """A bot folder whose `.env` points at the toolsets and keeps localstore under it."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        "LOCALSTORE_DATA_DIR": str(folder / "data"),
        "LOCALSTORE_CACHE_DIR": str(folder / "cache"),
        "LOCALSTORE_CONFIG_DIR": str(folder / "config"),
        "MARSHO_TOOLKIT_DIRS": json.dumps([str(d) for d in toolset_dirs]),
        "MARSHO_API_KEY": "cli-key",
        "MARSHO_MODEL": "cli-model",
        "MARSHO_TIMEOUT": "5",
        "MARSHO_TOOL_TIMEOUT": "5",
        **settings,
    }
    (folder / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    return folder


def clean_environ() -> dict[str, str]:
    """The test runner's environment minus anything that would override the `.env`."""
    return {
        key: value for key, value in os.environ.items()
        if not key.upper().startswith(("MARSHO_", "LOCALSTORE_"))
        and key.upper() not in {"ENVIRONMENT", "DRIVER"}
    }


def marsho(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nonebot_plugin_marsho", *args],
        cwd=cwd, env={**clean_environ(), "MARSHO_CLI_MCP_TOKEN": MCP_TOKEN}, capture_output=True,
        text=True, encoding="utf-8", timeout=timeout,
    )


def free_port() -> int:
    """A port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def cli_fake(endpoint: FakeOpenAI) -> Iterator[FakeOpenAI]:
    endpoint.reset()
    yield endpoint
    endpoint.reset()


@pytest.fixture(scope="module")
def good_toolset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("good-toolset")
    write(root / "calc" / "__init__.py", CALC)
    write(root / "weather" / "__init__.py", WEATHER)
    write(root / "weather" / "tools.json", WEATHER_JSON)
    return root


@pytest.fixture(scope="module")
def broken_toolset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("broken-toolset")
    write(root / "fine" / "__init__.py", '''
        def hello() -> str:
            """Say hello."""
            return "hello"
    ''')
    write(root / "badjson" / "__init__.py", "def ping():\n    return 'pong'\n")
    write(root / "badjson" / "tools.json", """
        [
          {"type": "function", "function": {"name": "badjson__ping", "description": "ping"}}
          {"oops": true}
        ]
    """)
    write(root / "badimport" / "__init__.py", """
        import os

        raise RuntimeError("missing dependency foo")
    """)
    write(root / "mismatch" / "__init__.py", "def lookup(location: str) -> str:\n    return location\n")
    write(root / "mismatch" / "tools.json", """
        [{"type": "function", "function": {"name": "mismatch__lookup", "description": "Look up",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}}]
    """)
    return root


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, good_toolset: Path, endpoint: FakeOpenAI
) -> Path:
    return make_project(
        tmp_path_factory.mktemp("bot"), [good_toolset],
        MARSHO_BASE_URL=endpoint.base_url,
        MARSHO_SYSTEM_PROMPT="You are a CLI test.",
        MARSHO_TOOLKIT_SETTINGS=json.dumps({"calc": {"api_key": SECRET}}, separators=(",", ":")),
    )


@pytest.fixture(scope="module")
def broken_project(
    tmp_path_factory: pytest.TempPathFactory, broken_toolset: Path, endpoint: FakeOpenAI
) -> Path:
    return make_project(tmp_path_factory.mktemp("broken-bot"), [broken_toolset],
                        MARSHO_BASE_URL=endpoint.base_url)


def odd(mode: str, **entry: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(ODD_SERVER), mode], **entry}


@pytest.fixture(scope="module")
def mcp_project(tmp_path_factory: pytest.TempPathFactory, good_toolset: Path) -> Path:
    """A bot whose mcp.json has a working server, one whose tool needs MCP tasks, and one of each
    way a server fails to start."""
    folder = tmp_path_factory.mktemp("mcp-bot")
    config = folder / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "fine": {"command": sys.executable, "args": [str(MCP_SERVER)],
                 "env": {"MARSHO_TEST_TAG": "${MARSHO_CLI_MCP_TOKEN}"}},
        "odd": odd("tasks", permission="everyone"),
        "hung": odd("hang"),
        "junk": odd("garbage"),
        "dies": odd("exit"),
        "off": {"command": "nothing", "disabled": True},
    }}), encoding="utf-8")
    return make_project(folder, [good_toolset], MARSHO_MCP_FILE=str(config))


@pytest.fixture(scope="module")
def unreachable_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


Runs = dict[str, subprocess.CompletedProcess[str]]

CALL_ERRORS = {
    "bad-arguments": (["calc__add", '{"a": "x", "b": 1}'], "'x' is not of type 'integer'"),
    "unknown-tool": (["calc__nope", "{}"], "no tool named 'calc__nope'"),
    "tool-raises": (["calc__boom"], "RuntimeError: kaboom"),
}


# `runs` starts twenty CLI processes, four at a time, in the set-up of the first test that reads it
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, project: Path, broken_project: Path,
    good_toolset: Path, unreachable_url: str, mcp_project: Path,
) -> Runs:
    """The commands that need no scripted endpoint, run at the same time (each is a separate
    process of 1-2 s, mostly imports: one after the other they would take ~13 s)."""
    unreachable = make_project(tmp_path_factory.mktemp("unreachable-bot"), [good_toolset],
                               MARSHO_BASE_URL=unreachable_url)
    missing_mcp = make_project(tmp_path_factory.mktemp("missing-mcp-bot"), [good_toolset],
                               MARSHO_MCP_FILE=str(mcp_project / "no-such-mcp.json"))
    broken_mcp = make_project(tmp_path_factory.mktemp("broken-mcp-bot"), [good_toolset])
    group_actions = make_project(tmp_path_factory.mktemp("group-actions-bot"), [good_toolset],
                                 MARSHO_GROUP_ACTIONS="true")
    write(broken_mcp / "data" / "nonebot_plugin_marsho" / "mcp.json",
          '{"mcpServers": {"a": {"command": "x"},}')
    commands: dict[str, tuple[Path, list[str]]] = {
        "tools": (project, ["tools"]),
        "tools-broken": (broken_project, ["tools"]),
        "tools-group-actions": (group_actions, ["tools"]),
        "call-add": (project, ["call", "calc__add", '{"a": 2, "b": 40}']),
        "call-vault": (project, ["call", "calc__vault"]),
        **{f"call-{key}": (project, ["call", *args]) for key, (args, _) in CALL_ERRORS.items()},
        "ask-unreachable": (unreachable, ["ask", "hi"]),
        "tools-mcp": (mcp_project, ["tools", "--wait", "6"]),
        "tools-mcp-missing": (missing_mcp, ["tools"]),
        "tools-mcp-broken": (broken_mcp, ["tools"]),
        "call-mcp": (mcp_project, ["call", "fine__add", '{"a": 2, "b": 40}']),
        "call-mcp-env": (mcp_project, ["call", "fine__whoami"]),
        "call-mcp-tasks": (mcp_project, ["call", "odd__later"]),
        "call-mcp-dies": (mcp_project, ["call", "dies__anything"]),
        "help": (tmp_path_factory.mktemp("no-env"), ["--help"]),
    }
    with ThreadPoolExecutor(4) as pool:
        futures = {key: pool.submit(marsho, cwd, *args) for key, (cwd, args) in commands.items()}
    return {key: future.result() for key, future in futures.items()}


# --- tools --------------------------------------------------------------------------------------

def test_tools_lists_good_toolkits_and_exits_0(runs: Runs, good_toolset: Path) -> None:
    done = runs["tools"]
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in ["✓ calc", "✓ weather", "✓ clock", "calc__add: Add two integers.",
                 "calc__vault  [superuser]: Open the vault", "weather__today: Weather of a city"]:
        assert line in out
    assert str(good_toolset / "calc") in out
    # the test's two toolkits plus every built-in one that is on by default
    assert re.search(r"^\d+ toolkits, \d+ tools, 0 errors", out, re.MULTILINE)
    assert SECRET not in out + done.stderr


def test_tools_lists_the_built_in_toolkits_the_bot_adds_at_startup(runs: Runs) -> None:
    # memory, reminders and (MARSHO_GROUP_ACTIONS) group are added by the bot as it starts, not
    # loaded from a folder: marsho.tools lists them, and so must the CLI
    out = runs["tools"].stdout
    assert "✓ memory  (built-in)" in out
    assert "✓ reminders  (built-in)" in out
    assert "reminders__add" in out
    assert "✓ group  (built-in)" not in out  # MARSHO_GROUP_ACTIONS is off by default
    done = runs["tools-group-actions"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✓ group  (built-in)" in done.stdout
    assert "group__mute" in done.stdout and "group__kick" not in done.stdout  # MARSHO_GROUP_ACTIONS_KICK


def test_tools_names_the_file_and_problem_of_each_broken_toolkit_and_exits_1(
    runs: Runs, broken_toolset: Path
) -> None:
    done = runs["tools-broken"]
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "✓ fine" in out  # the good one still loads and is listed
    assert "✗ badjson" in out
    assert f"{broken_toolset / 'badjson' / 'tools.json'}: invalid JSON at line 3" in out
    assert "✗ badimport" in out
    assert str(broken_toolset / "badimport" / "__init__.py") in out
    assert "RuntimeError: missing dependency foo" in out and "line 3" in out
    assert "✗ mismatch" in out
    assert str(broken_toolset / "mismatch" / "tools.json") in out
    assert "'required' lists 'city'" in out
    assert "0 errors" not in out


# --- tools: MCP servers ----------------------------------------------------------------------

def test_tools_starts_every_mcp_server_lists_its_tools_and_states_and_exits_1_on_a_failure(
    runs: Runs,
) -> None:
    done = runs["tools-mcp"]
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    python = sys.executable
    assert f"✓ fine  (MCP stdio: {python}): connected (8 tools)" in out
    assert "    fine__add(a: integer, b: integer)  [superuser]: Add two whole numbers." in out
    assert "    odd__plain(text: string): Answer at once." in out  # permission "everyone"
    assert "✗ later: not offered: it requires MCP tasks" in out
    assert "odd__later" not in out
    assert "✗ hung  (MCP stdio: " in out and "no answer to the MCP handshake in 6 s" in out
    assert "(its stderr: loading the index...)" in out
    assert "✗ junk  (MCP stdio: " in out
    assert "it wrote non-JSON to stdout: 'Serving HTTP on 0.0.0.0 port 8000" in out
    assert "✗ dies  (MCP stdio: " in out and "it exited with code 7 during the MCP handshake" in out
    assert "Error: FOO_API_KEY is not set" in out
    assert "- off  (MCP stdio: nothing; disabled in mcp.json)" in out
    assert re.search(r"^\d+ toolkits, \d+ tools, 3 errors, 1 warnings$", out, re.MULTILINE), out
    assert MCP_TOKEN not in out + done.stderr


def test_tools_exits_1_when_marsho_mcp_file_names_no_file(runs: Runs, mcp_project: Path) -> None:
    done = runs["tools-mcp-missing"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"✗ MARSHO_MCP_FILE={mcp_project / 'no-such-mcp.json'} names no file" in done.stdout
    assert "0 errors" not in done.stdout


def test_tools_exits_1_when_mcp_json_is_broken(runs: Runs) -> None:
    done = runs["tools-mcp-broken"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert "mcp.json: invalid JSON at line 1" in done.stdout
    assert "1 errors" in done.stdout


def test_call_runs_an_mcp_servers_tool(runs: Runs) -> None:
    done = runs["call-mcp"]
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr
    tagged = runs["call-mcp-env"]  # its env's ${NAME} is read from the shell, and hidden
    assert (tagged.returncode, tagged.stdout) == (0, "[redacted]\n"), tagged.stderr


def test_call_of_a_tool_that_needs_mcp_tasks_says_so_and_exits_1(runs: Runs) -> None:
    done = runs["call-mcp-tasks"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert "odd__later requires MCP tasks" in done.stderr


def test_call_of_a_server_that_fails_to_start_says_why_and_exits_1(runs: Runs) -> None:
    done = runs["call-mcp-dies"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the MCP server dies did not start: it exited with code 7" in done.stderr
    assert "Error: FOO_API_KEY is not set" in done.stderr


# --- call ---------------------------------------------------------------------------------------

def test_call_prints_only_the_result_on_stdout(runs: Runs) -> None:
    done = runs["call-add"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "42\n"


def test_call_runs_as_the_model_would_with_presets_and_the_owners_context(runs: Runs) -> None:
    vault = runs["call-vault"]  # a superuser tool; arguments default to {}
    assert (vault.returncode, vault.stdout) == (0, "opened for superuser\n"), vault.stderr
    assert SECRET not in vault.stdout + vault.stderr


@pytest.mark.parametrize("case", list(CALL_ERRORS))
def test_call_exits_1_with_the_error(runs: Runs, case: str) -> None:
    done = runs[f"call-{case}"]
    expected = CALL_ERRORS[case][1]
    assert done.returncode == 1, done.stdout + done.stderr
    assert expected in done.stdout + done.stderr


# --- ask ----------------------------------------------------------------------------------------

def test_ask_prints_each_call_and_result_as_it_happens_then_the_answer(
    project: Path, good_toolset: Path, cli_fake: FakeOpenAI
) -> None:
    marker, wake = good_toolset / "calc" / "napped", good_toolset / "calc" / "wake"
    marker.unlink(missing_ok=True)
    wake.unlink(missing_ok=True)
    cli_fake.push(
        tool_calls(("calc__add", {"a": 2, "b": 3}, "c1"), ("calc__nap", {}, "c2"),
                   ("weather__today", {"location": "Paris"}, "c3")),
        text("2 + 3 = 5, and I rested. Paris is sunny."),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "nonebot_plugin_marsho", "ask", "what is 2+3? then rest"],
        cwd=project, env=clean_environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, encoding="utf-8",
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        while (line := lines.get(timeout=60)) is not None:
            seen.append(line)
            if line.startswith(("→ weather__today", "← calc__add", "← weather__today")):
                # printed while nap still sleeps, before the results went back to the model
                assert not marker.exists(), seen
                assert len(cli_fake.requests) == 1, seen
            if any(s.startswith("← calc__add") for s in seen) and any(s.startswith("← weather__today") for s in seen):
                wake.touch()  # nap sleeps until the other results were read, however slow the machine
        returncode = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = process.stderr.read() if process.stderr else ""
    assert returncode == 0, "\n".join(seen) + stderr
    assert seen[:3] == ['→ calc__add({"a": 2, "b": 3})', "→ calc__nap({})",
                        '→ weather__today({"location": "Paris"})']
    # each result as soon as its call finishes: nap's comes last, then the answer
    quick = sorted(re.sub(r"\[ok, [\d.]+ s\]", "[ok]", line) for line in seen[3:5])
    assert quick == ["← calc__add [ok]: 5", "← weather__today [ok]: Paris: sunny, 21°C"]
    assert seen[5].startswith("← calc__nap [ok, ") and seen[5].endswith(": rested")
    assert seen[6:] == ["2 + 3 = 5, and I rested. Paris is sunny."]
    first, second = cli_fake.requests
    assert first["model"] == "cli-model"
    assert first["_headers"]["authorization"] == "Bearer cli-key"
    system = first["messages"][0]
    # the configured prompt alone (the same every turn), and (as in chats) the date and time of
    # the turn in a note after the question
    assert system == {"role": "system", "content": "You are a CLI test."}
    question = first["messages"][-1]
    assert question["role"] == "user" and question["content"].startswith("what is 2+3? then rest\n\n")
    assert time.strftime("%Y-") in question["content"]
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert {"calc__add", "calc__nap", "calc__vault", "weather__today", "clock__now"} <= offered
    assert [(m["tool_call_id"], m["content"]) for m in second["messages"] if m["role"] == "tool"] \
        == [("c1", "5"), ("c2", "rested"), ("c3", "Paris: sunny, 21°C")]
    assert SECRET not in json.dumps(cli_fake.requests)


def test_ask_with_an_unreachable_endpoint_names_marsho_base_url(
    runs: Runs, unreachable_url: str
) -> None:
    done = runs["ask-unreachable"]
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MARSHO_BASE_URL" in done.stderr
    assert unreachable_url in done.stderr
    assert done.stdout == ""


# --- help ---------------------------------------------------------------------------------------

def test_help_describes_the_commands(runs: Runs) -> None:
    done = runs["help"]  # run in a folder without .env
    assert done.returncode == 0, done.stderr
    assert "usage: python -m nonebot_plugin_marsho" in done.stdout
    for command in ("tools", "call", "ask"):
        assert command in done.stdout


def test_ask_waits_for_the_mcp_servers_and_offers_their_tools(
    tmp_path: Path, good_toolset: Path, cli_fake: FakeOpenAI
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "fine": {"command": sys.executable, "args": [str(MCP_SERVER)]},
    }}), encoding="utf-8")
    bot = make_project(tmp_path / "bot", [good_toolset], MARSHO_BASE_URL=cli_fake.base_url,
                       MARSHO_MCP_FILE=str(config))
    cli_fake.push(tool_calls(("fine__echo", {"text": "hi"}, "c1")), text("It said hi."))
    done = marsho(bot, "ask", "echo hi")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "← fine__echo [ok, " in done.stdout and done.stdout.endswith("It said hi.\n")
    offered = {tool["function"]["name"] for tool in cli_fake.requests[0]["tools"]}
    assert "fine__echo" in offered
