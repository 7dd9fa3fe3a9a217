"""Branches that no other test reached, found while splitting long functions into named steps
(issue 23): each test pins what a user or toolkit author sees there, so a later split cannot
change it unnoticed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from nonebug import App

from nonebot_plugin_marsho.chat import incoming
from nonebot_plugin_marsho.chat.incoming import Limits, read_question
from nonebot_plugin_marsho.chat.native import feishu_post, quoted_content
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.tools import charts
from tests.onebot import group_message, onebot_bot
from tests.test_incoming import asking, picture, quoting
from tests.test_loader import assert_names_file, load, only_error, tool_entry, write_toolkit

# --- tools/loader.py ---------------------------------------------------------------------------


def test_a_tools_json_function_that_is_not_an_object_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", tools=[{"type": "function", "function": "ping"}])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "'function' must be a JSON object",
                      "not a string")


def test_a_tools_json_entry_of_another_type_is_reported(tmp_path: Path) -> None:
    entry = {**tool_entry("kit__ping"), "type": "retrieval"}
    folder = write_toolkit(tmp_path, "kit", tools=[entry])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "'type' must be \"function\"", "'retrieval'")


def test_a_tools_json_entry_without_function_or_name_is_reported(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", tools=[{"description": "pings"}])

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "tools.json", "neither 'function' nor 'name'")


def test_required_beside_parameters_that_have_their_own_is_ignored_with_a_warning(
    tmp_path: Path,
) -> None:
    init = "def echo(a: str = '', b: str = ''):\n    return a + b\n"
    beside = {"type": "function", "required": ["b"], "function": {
        "name": "kit__echo", "description": "Echo",
        "parameters": {"type": "object", "required": ["a"],
                       "properties": {"a": {"type": "string"}, "b": {"type": "string"}}},
    }}
    folder = write_toolkit(tmp_path, "kit", init, [beside])

    toolset = load(tmp_path)

    assert toolset.errors == []
    assert toolset.tools["kit__echo"].parameters["required"] == ["a"]
    assert [w.message for w in toolset.warnings] == [
        "entry 1 (kit__echo): 'required' stands beside 'parameters', and 'parameters' has "
        "'required' too; the one inside it is used"
    ]
    assert toolset.warnings[0].path == folder / "tools.json"


def test_require_beside_parameters_that_have_required_is_ignored_with_a_warning(
    tmp_path: Path,
) -> None:
    init = "def echo(a: str = '', b: str = ''):\n    return a + b\n"
    beside = {"name": "kit__echo", "description": "Echo", "require": ["b"],
              "parameters": {"type": "object", "required": ["a"],
                             "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}}
    write_toolkit(tmp_path, "kit", init, [beside])

    toolset = load(tmp_path)

    assert toolset.errors == []
    assert toolset.tools["kit__echo"].parameters["required"] == ["a"]
    assert any(w.message.endswith("'require' stands beside 'parameters', and 'parameters' has "
                                  "'required' too; the one there is used")
               for w in toolset.warnings), [str(w) for w in toolset.warnings]


def test_a_tool_name_registered_twice_in_toolboxes_is_reported(tmp_path: Path) -> None:
    init = """\
        from nonebot_plugin_marsho.tools import Toolbox

        first = Toolbox()
        second = Toolbox()

        @first.tool
        def ping() -> str:
            '''Ping.'''
            return "pong"

        second.add(ping)
    """
    folder = write_toolkit(tmp_path, "kit", init, tools="")

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "tool name 'kit__ping' is registered twice")


def test_a_self_described_function_that_cannot_be_a_tool_is_reported(tmp_path: Path) -> None:
    init = "def ping(host: str, /) -> str:\n    '''Ping a host.'''\n    return host\n"
    folder = write_toolkit(tmp_path, "kit", init, tools="")

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "'host'", "positional-only")


def test_a_module_not_found_error_without_a_name_is_shown_as_raised(tmp_path: Path) -> None:
    folder = write_toolkit(tmp_path, "kit", "raise ModuleNotFoundError('no backend today')\n")

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py",
                      "import failed: ModuleNotFoundError: no backend today")


def test_a_missing_part_of_an_installed_package_is_told_apart_from_a_missing_package(
    tmp_path: Path,
) -> None:
    folder = write_toolkit(tmp_path, "kit", "import json.streaming\n")

    problem = only_error(load(tmp_path))

    assert_names_file(problem, folder / "__init__.py", "the module 'json.streaming' does not exist",
                      "'json' is installed, but has no such part")
    assert "pip install" not in problem.message


# --- tools/charts.py ---------------------------------------------------------------------------


def test_more_columns_than_a_chart_can_draw_is_a_chart_data_error() -> None:
    with pytest.raises(charts.ChartDataError, match="51 columns; at most 50 can be drawn"):
        charts.read_table([list(range(51))])


def test_rows_that_are_all_empty_are_a_chart_data_error() -> None:
    with pytest.raises(charts.ChartDataError, match="rows are empty"):
        charts.read_table([[], []])


def test_repeated_column_names_are_numbered_apart() -> None:
    table = charts.read_table([[1, 2, 3, 4]], ["x", "y", "x", "x"])

    assert table.headers == ["x", "y", "x (2)", "x (3)"]


def test_a_pie_of_zeros_is_a_chart_data_error() -> None:
    with pytest.raises(charts.ChartDataError, match="needs positive values; v has none"):
        charts.render_chart("pie", [["a", 0], ["b", 0]], ["k", "v"], "k")


# --- chat/native.py ----------------------------------------------------------------------------


def _quote_on(platform: str, msg: Any, **origin: Any) -> Any:
    """quoted_content of a reply on `platform` (a stand-in bot: only its adapter's name is read)."""
    bot = SimpleNamespace(adapter=SimpleNamespace(get_name=lambda: platform))
    reply = SimpleNamespace(msg=msg, origin=SimpleNamespace(**origin), id="r1")
    return quoted_content(bot, SimpleNamespace(), reply)  # type: ignore[arg-type]


def test_feishu_text_that_is_not_json_is_not_a_post() -> None:
    assert feishu_post("{not json") is None


def test_a_mention_inside_a_feishu_post_stays_and_a_leading_one_goes() -> None:
    post = {"content": [
        [{"tag": "at", "user_name": "Marsho"}, {"tag": "text", "text": "hi "},
         {"tag": "at", "user_name": "Ann"}],
        [{"tag": "at", "user_id": "ou_2"}, {"tag": "text", "text": " too"}],
    ]}

    assert feishu_post(post) == ("hi @Ann\n@ou_2 too", [])


def test_a_quoted_feishu_message_that_is_not_json_is_read_as_its_text() -> None:
    content = _quote_on("Feishu", "plain words")

    assert content is not None
    assert (content.text, content.images) == ("plain words", [])


def test_a_quote_with_nothing_to_read_is_none() -> None:
    assert _quote_on("OneBot V11", None) is None


# --- chat/incoming.py --------------------------------------------------------------------------


async def _question(app: App, event: Any) -> incoming.Question:
    async with app.test_api() as ctx:
        return await read_question(onebot_bot(ctx), event, "hello", vision=True, model="m",
                                   limits=Limits(), marsho_name="marsho", t=Texts("en"))


async def test_a_message_alconna_cannot_read_is_asked_as_its_text(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("no exporter for this adapter")

    monkeypatch.setattr(incoming.UniMessage, "of", unreadable)

    question = await _question(app, asking("marsho hello", picture("http://127.0.0.1:9/p.png")))

    assert question.content() == "hello"
    assert (question.images_seen, question.tips, question.quoted_text) == (0, [], "")


async def test_a_quote_the_platform_cannot_give_is_left_out(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(incoming, "quoted_content", lambda *args: None)

    question = await _question(app, quoting(group_message("marsho hello"), "earlier words"))

    assert question.content() == "hello" and question.quoted_text == ""


async def test_a_picture_failing_unexpectedly_is_a_network_failure_for_the_asker(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any) -> tuple[bytes, str]:
        raise RuntimeError("the adapter broke")

    monkeypatch.setattr(incoming, "_fetch", broken)
    t = Texts("en")

    question = await _question(app, asking("marsho hello", picture("http://127.0.0.1:9/p.png")))

    assert question.tips == [t("tip.image_failed", pictures_text=t.plural("count.pictures", 1),
                               reasons=t("media.network"))]
    assert question.content() == "hello\n" + t("image.failed_placeholder")
