"""The README's examples work as written."""

from __future__ import annotations

import re
from pathlib import Path

from nonebot_plugin_marsho.tools import (
    ToolCall,
    ToolContext,
    ToolRunner,
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
