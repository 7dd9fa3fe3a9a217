"""The site's pages for people who extend Marsho work as written, in both languages: the first
toolkit and its own test, the toolkit examples, the web service, the MCP recipe and the
plugin-API examples (tests/docs_blocks.py reads the blocks; tests/test_docs.py checks the kinds
every page shares)."""

from __future__ import annotations

import importlib.util
import itertools
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nonebot_plugin_marsho.tools import (
    ToolCall,
    ToolContext,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)
from tests.docs_blocks import blocks, doc_block

LANGUAGES = ("zh", "en")
TESTS = Path(__file__).resolve().parent


def write_toolkit(root: Path, page: str, name: str) -> Path:
    """The page's `<name>/__init__.py` (and its tools.json and toolkit.json, if the page has
    them) written into `root/<name>`, as a reader would save them."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(doc_block(page, f"{name}/__init__.py"), encoding="utf-8")
    for beside in ("tools.json", "toolkit.json"):
        if any(block.title == f"{name}/{beside}" for block in blocks(page)):
            (folder / beside).write_text(doc_block(page, f"{name}/{beside}"), encoding="utf-8")
    return folder


def import_file(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- first-toolkit.md -------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_five_minute_toolkit_loads_and_counts_the_rs_in_strawberry(
    lang: str, tmp_path: Path
) -> None:
    write_toolkit(tmp_path, f"{lang}/first-toolkit.md", "letters")
    toolset = load_toolset([ToolsetSource(tmp_path, "data dir")])
    assert toolset.problems == []
    assert list(toolset.tools) == ["letters__count"]
    tool = toolset.tools["letters__count"]
    assert tool.parameters["required"] == ["text", "letter"]
    assert "strawberry" in tool.parameters["properties"]["text"]["description"]
    runner = ToolRunner(toolset)
    result = await runner.run_one(ToolCall("1", "letters__count", '{"text": "strawberry", "letter": "r"}'))
    runner.close()
    assert (result.status, result.content) == ("ok", "3")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_first_toolkits_own_tests_pass_beside_it(lang: str, tmp_path: Path) -> None:
    """test_letters.py, saved in the tools folder beside letters/ as the page says, passes."""
    page = f"{lang}/first-toolkit.md"
    write_toolkit(tmp_path, page, "letters")
    path = tmp_path / "test_letters.py"
    path.write_text(doc_block(f"{lang}/first-toolkit.md", "test_letters.py"), encoding="utf-8")
    module = import_file(path, f"docs_test_letters_{lang}")
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_first_toolkits_own_tests_fail_when_the_tool_counts_wrong(lang: str, tmp_path: Path) -> None:
    page = f"{lang}/first-toolkit.md"
    folder = write_toolkit(tmp_path, page, "letters")
    source = (folder / "__init__.py").read_text(encoding="utf-8")
    (folder / "__init__.py").write_text(source.replace(".count(", ".find("), encoding="utf-8")
    path = tmp_path / "test_letters.py"
    path.write_text(doc_block(f"{lang}/first-toolkit.md", "test_letters.py"), encoding="utf-8")
    module = import_file(path, f"docs_test_letters_wrong_{lang}")
    with pytest.raises(AssertionError):
        module.test_strawberry_has_three_rs()


# -- toolkits.md ------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_self_describing_toolkit_example_loads_and_runs(lang: str, tmp_path: Path) -> None:
    write_toolkit(tmp_path, f"{lang}/toolkits.md", "my-weather")
    # its toolkit.json keeps it off until enabled
    off = load_toolset([ToolsetSource(tmp_path, "docs")])
    assert off.tools == {} and "my-weather" in off.available
    toolset = load_toolset([ToolsetSource(tmp_path, "docs")], enabled=["my-weather"])
    assert toolset.problems == []
    assert set(toolset.tools) == {
        "my-weather__get_weather", "my-weather__forget_city", "my-weather__search"
    }
    assert toolset.tools["my-weather__forget_city"].permission == "superuser"
    assert "api_key" not in str(toolset.tools["my-weather__search"].schema())
    assert toolset.tools["my-weather__get_weather"].parameters["$defs"]["Unit"]["enum"] == [
        "celsius", "fahrenheit"]
    runner = ToolRunner(toolset)
    result = await runner.run_one(
        ToolCall("1", "my-weather__get_weather", '{"city": "Hangzhou", "unit": "fahrenheit"}')
    )
    assert result.ok and "Hangzhou" in result.content and "fahrenheit" in result.content
    denied = await runner.run_one(ToolCall("2", "my-weather__forget_city", '{"city": "Oslo"}'))
    assert denied.status == "denied"
    private = await runner.run_one(
        ToolCall("3", "my-weather__forget_city", '{"city": "Oslo"}'), ToolContext(user_id="7", role="superuser")
    )
    assert private.status == "error"
    allowed = await runner.run_one(
        ToolCall("4", "my-weather__forget_city", '{"city": "Oslo"}'),
        ToolContext(user_id="7", group_id="1", role="superuser"),
    )
    runner.close()
    assert allowed.ok and "Oslo" in allowed.content and "7" in allowed.content


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_env_presets_of_the_toolkits_page_win_over_the_toolbox(lang: str, tmp_path: Path) -> None:
    """The page's .env sets my-weather's api_key: the preset the model never sees."""
    import io
    import json

    from dotenv import dotenv_values

    write_toolkit(tmp_path, f"{lang}/toolkits.md", "my-weather")
    settings_block = next(block.text for block in blocks(f"{lang}/toolkits.md")
                          if block.language == "dotenv" and "MARSHO_TOOLKIT_SETTINGS" in block.text)
    settings = json.loads(dotenv_values(stream=io.StringIO(settings_block))["MARSHO_TOOLKIT_SETTINGS"])
    toolset = load_toolset([ToolsetSource(tmp_path, "docs")], enabled=["my-weather"],
                           settings={"my-weather": settings["my-weather"]})
    assert toolset.problems == []
    assert toolset.tools["my-weather__search"].presets == {"api_key": "sk-..."}


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_tools_json_example_loads_and_runs(lang: str, tmp_path: Path) -> None:
    write_toolkit(tmp_path, f"{lang}/toolkits.md", "marshoai-example")
    toolset = load_toolset([ToolsetSource(tmp_path, "docs")])
    assert toolset.problems == []
    assert set(toolset.tools) == {
        "marshoai-example__get_weather", "marshoai-example__get_current_time"
    }
    runner = ToolRunner(toolset)
    result = await runner.run_one(ToolCall("1", "marshoai-example__get_weather", '{"location": "Hangzhou"}'))
    runner.close()
    assert result.ok and "Hangzhou" in result.content and "25" in result.content


# -- webservices.md ---------------------------------------------------------------------------


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "the example service exited at start"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError("the example service did not start listening")


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_web_service_example_answers_with_a_chart(lang: str, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.tools.webservices import load_webservices

    port = free_port()
    service = doc_block(f"{lang}/webservices.md", "sales_service.py").replace("5000", str(port))
    config = doc_block(f"{lang}/webservices.md", "webservices.json").replace("5000", str(port))
    (tmp_path / "sales_service.py").write_text(service, encoding="utf-8")
    (tmp_path / "webservices.json").write_text(config, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(tmp_path / "sales_service.py")],
                               stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        # the token the page exports
        toolkit, problems = load_webservices(tmp_path / "webservices.json",
                                             environ={"SALES_TOKEN": "t0ken-123"})
        assert toolkit is not None and problems == []
        toolset = Toolset()
        toolset.add(toolkit)
        runner = ToolRunner(toolset)
        result = await runner.run_one(ToolCall("1", "services__sales", '{"shop": "north"}'))
        wrong, _ = load_webservices(tmp_path / "webservices.json", environ={"SALES_TOKEN": "guess"})
        assert wrong is not None
        refused = Toolset()
        refused.add(wrong)
        refused_runner = ToolRunner(refused)
        unauthorised = await refused_runner.run_one(ToolCall("2", "services__sales", '{"shop": "north"}'))
        runner.close()
        refused_runner.close()
    finally:
        process.terminate()
        process.wait(5)
    assert result.ok, result.content
    assert len(result.images) == 1 and result.images[0].startswith(b"\x89PNG")
    # the default of months (3) was POSTed: three rows in the model's summary
    assert all(month in result.content for month in (("一月", "二月", "三月") if lang == "zh"
                                                     else ("January", "February", "March")))
    assert unauthorised.status == "error" and "401" in unauthorised.content
    assert "guess" not in unauthorised.content


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_web_service_page_exports_the_token_its_file_uses(lang: str) -> None:
    exports = [block.text for block in blocks(f"{lang}/webservices.md")
               if block.language == "sh" and "export SALES_TOKEN=" in block.text]
    service = doc_block(f"{lang}/webservices.md", "sales_service.py")
    assert exports and "${SALES_TOKEN}" in doc_block(f"{lang}/webservices.md", "webservices.json")
    token = exports[0].split("export SALES_TOKEN=")[1].split()[0]
    assert f"Bearer {token}" in service


# -- mcp.md -----------------------------------------------------------------------------------


def pip_recipe(lang: str) -> str:
    """The page's mcp.json for the server installed with pip (the page has several mcp.json)."""
    [recipe] = [block.text for block in blocks(f"{lang}/mcp.md")
                if block.title == "mcp.json" and "mcp-server-time" in block.text]
    return recipe


def installed_like_pip(folder: Path) -> Path:
    """An executable where pip would put a server's console script in a venv of its own, with
    its own Python in the shebang: here it runs the suite's MCP server (tests/mcp_server.py,
    stdio), which answers `whoami` with the arguments it was started with."""
    script = folder / "bin" / "mcp-server-time"
    script.parent.mkdir(parents=True)
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, runpy, sys\n"
        "os.environ['MARSHO_TEST_TAG'] = ' '.join(sys.argv[1:])\n"
        "sys.argv = sys.argv[:1]\n"
        f"runpy.run_path({str(TESTS / 'mcp_server.py')!r}, run_name='__main__')\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_pip_recipe_names_the_venvs_own_executable_by_absolute_path(lang: str, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.tools.mcp import read_mcp_config

    path = tmp_path / "mcp.json"
    path.write_text(pip_recipe(lang), encoding="utf-8")
    servers, problems = read_mcp_config(path, environ={})
    assert problems == [] and list(servers) == ["time"]
    server = servers["time"]
    assert server.transport == "stdio" and Path(server.command).is_absolute()
    # the executable of the venv the page's sh block makes and installs into
    install = next(block.text for block in blocks(f"{lang}/mcp.md")
                   if block.language == "sh" and "pip install mcp-server-time" in block.text)
    venv = install.split("-m venv ")[1].split()[0]
    assert server.command == f"{venv}/bin/mcp-server-time"
    assert f"{venv}/bin/pip install mcp-server-time" in install
    assert server.permission == "everyone"


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_pip_recipe_runs_a_tool_call_through_the_absolute_command(lang: str, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.tools.mcp import McpManager, read_mcp_config

    venv = tmp_path / "venv"
    installed_like_pip(venv)
    path = tmp_path / "mcp.json"
    path.write_text(pip_recipe(lang).replace("/opt/mcp/time", str(venv)), encoding="utf-8")
    servers, problems = read_mcp_config(path, environ={})
    assert problems == []
    toolset = Toolset()
    manager = McpManager(servers, toolset, call_timeout=10)
    await manager.start(wait=60)
    try:
        assert manager.status()["time"] == "connected (8 tools)", manager.status()
        runner = ToolRunner(toolset, timeout=10)
        member = ToolContext(user_id="10001", group_id="20001", role="member")
        added = await runner.run_one(ToolCall("1", "time__add", '{"a": 2, "b": 3}'), member)
        started_with = await runner.run_one(ToolCall("2", "time__whoami", "{}"), member)
        runner.close()
    finally:
        await manager.stop()
    assert (added.status, added.content) == ("ok", "5")
    assert started_with.content == "--local-timezone Asia/Shanghai"


# -- plugin-api.md ----------------------------------------------------------------------------


_plugins = itertools.count()


def load_page_plugin(lang: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """my_plugin.py loaded by NoneBot as a plugin of the test bot, which has marsho loaded on
    the fake endpoint (tests/conftest.py)."""
    import nonebot

    name = f"docs_my_plugin_{lang}_{next(_plugins)}"  # a plugin's name loads once per process
    (tmp_path / f"{name}.py").write_text(doc_block(f"{lang}/plugin-api.md", "my_plugin.py"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = nonebot.load_plugin(name)
    assert plugin is not None
    return plugin.module


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_plugin_example_answers_its_command_with_a_tool_call(
    lang: str, app, fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fake_openai import text, tool_calls
    from tests.onebot import group_message

    module = load_page_plugin(lang, tmp_path, monkeypatch)
    fake.push(tool_calls(("get_weather", {"city": "Paris"})), text("Paris is 25 degrees and sunny."))
    command = "/天气 巴黎今天热吗？" if lang == "zh" else "/weather Is it hot in Paris today?"
    try:
        async with app.test_matcher(module.weather) as ctx:
            bot = ctx.create_bot()
            event = group_message(command)
            ctx.receive_event(bot, event)
            ctx.should_call_send(event, "Paris is 25 degrees and sunny.", result=None)
            ctx.should_finished(module.weather)
    finally:
        module.weather.destroy()
    first, second = fake.requests[-2:]
    assert [tool["function"]["name"] for tool in first["tools"]] == ["get_weather"]
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][-1]["content"] == command.split(" ", 1)[1]
    assert second["messages"][-1]["role"] == "tool" and "Paris" in second["messages"][-1]["content"]
    assert "25" in second["messages"][-1]["content"]


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_plugin_example_tells_the_chat_when_the_endpoint_fails(
    lang: str, app, fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fake_openai import error
    from tests.onebot import group_message

    module = load_page_plugin(lang, tmp_path, monkeypatch)
    fake.push(error(401, "invalid api key"))
    source = doc_block(f"{lang}/plugin-api.md", "my_plugin.py")
    notice = source.split("except EndpointError:")[1].split('finish("')[1].split('")')[0]
    try:
        async with app.test_matcher(module.weather) as ctx:
            bot = ctx.create_bot()
            event = group_message("/weather Paris" if lang == "en" else "/天气 巴黎")
            ctx.receive_event(bot, event)
            ctx.should_call_send(event, notice, result=None)
            ctx.should_finished(module.weather)
    finally:
        module.weather.destroy()


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_manual_tools_example_runs_the_tool_itself_and_submits_the_result(
    lang: str, fake, tmp_path: Path
) -> None:
    from tests.fake_openai import text, tool_calls

    path = tmp_path / "manual_tools.py"
    path.write_text(doc_block(f"{lang}/plugin-api.md", "manual_tools.py"), encoding="utf-8")
    module = import_file(path, f"docs_manual_tools_{lang}")
    fake.push(tool_calls(("get_weather", {"city": "Paris"}, "call_a"), ("get_weather", {"city": "Oslo"}, "call_b")),
              text("Paris and Oslo are both 25 degrees."))
    answer = await module.weather_by_hand("Paris or Oslo?")
    assert answer == "Paris and Oslo are both 25 degrees."
    tool_messages = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_a", module.weather_service("Paris")), ("call_b", module.weather_service("Oslo"))]


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_script_example_builds_its_own_client_and_asks_the_endpoint(lang: str, fake, tmp_path: Path) -> None:
    from tests.fake_openai import text

    source = doc_block(f"{lang}/plugin-api.md", "my_script.py")
    assert "timeout=" in source  # LLMClient has no default timeout: without it, a TypeError
    path = tmp_path / "my_script.py"
    path.write_text(source, encoding="utf-8")
    module = import_file(path, f"docs_my_script_{lang}")
    fake.push(text("About 384,400 km."))
    answer = await module.ask("How far is the Moon?", base_url=fake.base_url, api_key="sk-test")
    assert answer == "About 384,400 km."
    request = fake.requests[-1]
    assert request["model"] == "deepseek-chat"
    assert request["messages"][0]["role"] == "system"
    assert request["messages"][-1]["content"] == "How far is the Moon?"
