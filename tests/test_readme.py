"""The README's examples work as written."""

from __future__ import annotations

import re
from pathlib import Path

from nonebot_plugin_marsho.tools import (
    ToolCall,
    ToolContext,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def code_after(heading: str, language: str) -> str:
    section = README[README.index(heading):]
    return re.search(rf"```{language}\n(.*?)```", section, re.DOTALL).group(1)


async def test_the_self_describing_toolkit_example_loads_and_runs(tmp_path: Path) -> None:
    folder = tmp_path / "my-weather"
    folder.mkdir()
    (folder / "__init__.py").write_text(code_after("### The simple way", "python"), encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "README")])
    assert toolset.problems == []
    assert set(toolset.tools) == {
        "my-weather__get_weather", "my-weather__forget_city", "my-weather__search"
    }
    assert toolset.tools["my-weather__forget_city"].permission == "superuser"
    assert "api_key" not in str(toolset.tools["my-weather__search"].schema())
    runner = ToolRunner(toolset)
    result = await runner.run_one(
        ToolCall("1", "my-weather__get_weather", '{"city": "Hangzhou", "unit": "fahrenheit"}')
    )
    assert result.content == "Hangzhou: 25 degrees fahrenheit"
    denied = await runner.run_one(ToolCall("2", "my-weather__forget_city", '{"city": "Oslo"}'))
    assert denied.status == "denied"
    allowed = await runner.run_one(
        ToolCall("3", "my-weather__forget_city", '{"city": "Oslo"}'),
        ToolContext(user_id="7", group_id="1", role="superuser"),
    )
    assert allowed.content == "Oslo removed by 7"
    runner.close()


async def test_the_tools_json_example_loads(tmp_path: Path) -> None:
    folder = tmp_path / "marshoai-example"
    folder.mkdir()
    section = "### The marshoai way"
    (folder / "__init__.py").write_text(code_after(section, "python"), encoding="utf-8")
    (folder / "tools.json").write_text(code_after(section, "json"), encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "README")])
    assert toolset.problems == []
    assert set(toolset.tools) == {
        "marshoai-example__get_weather", "marshoai-example__get_current_time"
    }


async def test_the_web_service_example_answers_with_a_chart(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys
    import time

    from nonebot_plugin_marsho.tools.webservices import load_webservices

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = code_after("## Web services as tools", "python").replace("5000", str(port))
    config = code_after("## Web services as tools", "json").replace("5000", str(port))
    (tmp_path / "service.py").write_text(service, encoding="utf-8")
    (tmp_path / "webservices.json").write_text(config, encoding="utf-8")
    process = subprocess.Popen([sys.executable, str(tmp_path / "service.py")])
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) and time.monotonic() < deadline:
            time.sleep(0.05)
        toolkit, problems = load_webservices(tmp_path / "webservices.json",
                                             environ={"SALES_TOKEN": "t0ken-123"})
        assert toolkit is not None and [p for p in problems if p.severity == "error"] == []
        toolset = Toolset()
        toolset.add(toolkit)
        runner = ToolRunner(toolset)
        result = await runner.run_one(ToolCall("1", "services__sales", '{"shop": "north"}'))
        runner.close()
    finally:
        process.terminate()
        process.wait(5)
    assert result.ok, result.content
    assert "月份" in result.content and len(result.images) == 1
    assert result.images[0].startswith(b"\x89PNG")



def test_the_pyproject_snippet_is_nb_clis_current_format_and_loads_the_plugin(tmp_path: Path) -> None:
    """nb-cli reads `plugins` and `adapters` as tables keyed by package (a list is its legacy
    format, which `nb run` warns about); NoneBot loads the plugin from it."""
    import os
    import subprocess
    import sys

    snippet = code_after("### In an existing NoneBot project", "toml")
    assert "[tool.nonebot.plugins]" in snippet and "plugins = [" not in snippet
    for project in (snippet, (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()):
        if "[tool.nonebot]" not in project:
            project = "[tool.nonebot]\nplugin_dirs = []\n\n" + project
        folder = tmp_path / str(abs(hash(project)))
        folder.mkdir()
        (folder / "pyproject.toml").write_text(project, encoding="utf-8")
        script = (
            "import nonebot\n"
            "nonebot.init(_env_file=('none.env',), driver='~none', localstore_data_dir='data')\n"
            "nonebot.load_from_toml('pyproject.toml')\n"
            "print(sorted(p.name for p in nonebot.get_loaded_plugins()))\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("MARSHO", "LOCALSTORE"))}
        done = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=60)
        assert "'nonebot_plugin_marsho'" in done.stdout, done.stdout + done.stderr
