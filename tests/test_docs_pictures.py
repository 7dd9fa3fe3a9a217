"""The docs' pictures (scripts/docs_pictures.py): every one made for both languages, by the
running plugin, whatever the developer's environment says; and the mkdocs hook that makes them
at build time."""

from __future__ import annotations

import html
import importlib
import io
import os
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (scripts/ is no package)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)


pictures = script("docs_pictures")


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The script run once into a fresh docs folder, with a developer's settings exported that
    must change nothing."""
    out = tmp_path_factory.mktemp("docs")
    env = {**os.environ, "MARSHO_MODEL": "the-developers-model", "MARSHO_LANG": "ja",
           "MARSHO_BASE_URL": "http://10.255.255.1/v1", "MARSHO_API_KEY": "sk-the-developers-key"}
    done = subprocess.run([sys.executable, str(SCRIPTS / "docs_pictures.py"), "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-4000:]
    yield out


def screen_lines(svg: Path) -> list[str]:
    """The text of a console screenshot, a line per row of the screen."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for element in ElementTree.parse(svg).iter("{http://www.w3.org/2000/svg}text"):
        if element.text and element.get("y") is not None:
            rows.setdefault(float(element.get("y", 0)), []).append((float(element.get("x", 0)), element.text))
    return [html.unescape("".join(t for _, t in sorted(row))).replace("\xa0", " ")
            for _, row in sorted(rows.items())]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC), f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def shows(lines: list[str], text: str) -> bool:
    return any(text in line for line in lines)


e2e = pytest.mark.e2e
"""The tests that read the pictures: they start the script, which starts two bots."""


@e2e
def test_every_picture_is_made_for_both_languages(docs: Path) -> None:
    for path in pictures.picture_paths(docs):
        assert path.is_file() and path.stat().st_size > 0, path
        if path.suffix == ".svg":
            assert ElementTree.parse(path).getroot().tag == "{http://www.w3.org/2000/svg}svg"
        else:
            assert png_size(path) == (800, 500)
    assert sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*") if p.is_file()) == sorted(
        p.relative_to(docs).as_posix() for p in pictures.picture_paths(docs))


@e2e
@pytest.mark.parametrize(("lang", "other"), [("zh", "en"), ("en", "zh")])
def test_the_chat_picture_shows_the_question_and_the_answer_in_its_language(
        docs: Path, lang: str, other: str) -> None:
    lines = screen_lines(docs / lang / "assets" / "pictures" / "chat.svg")
    scene = pictures.SCENES[lang]["chat"]
    assert shows(lines, scene.question), lines
    assert shows(lines, scene.answer), lines
    assert not shows(lines, pictures.SCENES[other]["chat"].answer)


@e2e
@pytest.mark.parametrize("name", ["chat.svg", "status.svg"])
def test_the_console_pictures_give_chinese_its_two_cells(docs: Path, name: str) -> None:
    from rich.cells import cell_len

    elements = text_elements((docs / "zh" / "assets" / "pictures" / name).read_text(encoding="utf-8"))
    cell = 20 * 0.61  # rich's cell: 20 px high, 0.61 of that wide
    assert any(cell_len(text) > len(text) for text, _ in elements)
    assert [(text, width) for text, width in elements
            if width != pytest.approx(cell_len(text) * cell)] == []


@e2e
@pytest.mark.parametrize(("lang", "title"), [("zh", "模型服务"), ("en", "Model endpoints")])
def test_the_status_picture_shows_the_bots_own_endpoint_not_the_developers(
        docs: Path, lang: str, title: str) -> None:
    lines = screen_lines(docs / lang / "assets" / "pictures" / "status.svg")
    assert shows(lines, "marsho.status"), lines
    assert shows(lines, title), lines
    assert shows(lines, "deepseek-chat") and shows(lines, "http://127.0.0.1:"), lines
    assert not any("the-developers-model" in line or "10.255.255.1" in line for line in lines)
    # the console's Ctrl+L cleared the earlier questions off the screen
    assert not shows(lines, pictures.SCENES[lang]["chat"].answer)


@e2e
def test_the_usage_and_chart_pictures_differ_by_language(docs: Path) -> None:
    for name in ("usage.png", "chart.png"):
        zh, en = ((docs / lang / "assets" / "pictures" / name).read_bytes() for lang in ("zh", "en"))
        assert zh != en, name  # titles and axis names in the bot's language


def text_elements(svg: str) -> list[tuple[str, float]]:
    """(text, textLength) of each text element of a screenshot."""
    return [(html.unescape(element.text or ""), float(element.get("textLength", 0)))
            for element in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")
            if element.get("textLength") is not None]


def a_screenshot(*lines: str) -> str:
    """An SVG of `lines` as rich exports it, which is how Textual saves its screenshots."""
    from rich.console import Console

    console = Console(record=True, width=40, file=io.StringIO(), color_system="truecolor")
    for line in lines:
        console.print(line, style="bold red")
    return console.export_svg(title="marsho")


def test_a_chinese_lines_text_is_as_wide_as_the_cells_it_covers() -> None:
    from rich.cells import cell_len

    svg = pictures.fit_cells(a_screenshot("hello", "通用 私聊 📺 频道列表"))
    elements = dict(text_elements(svg))
    cell = elements["hello"] / len("hello")
    chinese = next(text for text in elements if "通用" in text)
    assert cell_len(chinese) > len(chinese)  # two cells a character: the case rich gets wrong
    assert elements[chinese] == pytest.approx(cell_len(chinese) * cell)
    assert elements["hello"] == pytest.approx(5 * cell)  # a line of one-cell characters stays


def test_a_steady_picture_has_a_fixed_clock_and_fixed_ids_of_the_same_length() -> None:
    svg = a_screenshot("02:53:20", "12:34", "> 回复4635bc9dcc871d41的消息", "5 英里约等于 8.05 公里。")
    steady = pictures.steady(svg)
    texts = [text for text, _ in text_elements(steady)]
    assert "12:00:00" in texts and "12:00" in texts
    assert any("回复0123456789abcdef的消息" in text for text in texts)
    assert any("8.05" in text for text in texts)  # the answer itself is left alone
    assert re.findall(r"terminal-\d+", steady) == []
    assert [len(t) for t, _ in text_elements(svg)] == [len(t) for t in texts]
    assert pictures.steady(steady) == steady


def test_the_screens_fonts_hold_chinese_and_fetch_nothing() -> None:
    svg = pictures.local_fonts(a_screenshot("hello"))
    assert "@font-face" not in svg and "cdnjs" not in svg
    screen_font = next(rule for rule in re.findall(r"font-family:[^;]*;", svg) if "Fira Code" in rule)
    assert "Noto Sans Mono CJK SC" in screen_font and "WenQuanYi Micro Hei Mono" in screen_font
    assert screen_font.endswith("monospace;")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_chart_picture_is_of_the_webservices_pages_own_example(lang: str) -> None:
    import json
    import urllib.request

    from tests.docs_blocks import doc_block

    page = (REPO / "docs" / lang / "webservices.md").read_text(encoding="utf-8")
    question, chart = pictures.page_example(lang)
    assert pictures.SCENES[lang]["chart"].question == question and f"\n{question}\n" in page
    assert chart["type"] == "chart" and chart["data"]
    service_source = doc_block(f"{lang}/webservices.md", "sales_service.py")
    assert all(f'["{month}", {figure}]' in service_source  # the page's service answers the same figures
               for month, figure in chart["data"])
    service = pictures._sales_service()
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{service.server_address[1]}/sales/{lang}",
                                         data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read()) == chart
    finally:
        service.shutdown()
        service.server_close()


def test_the_workers_environment_holds_nothing_of_the_developers(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MARSHO_MODEL", "the-developers-model")
    monkeypatch.setenv("DRIVER", "~fastapi")
    monkeypatch.setenv("SUPERUSERS", '["12345"]')
    env = pictures.worker_env("en", "http://127.0.0.1:1/v1", tmp_path, tmp_path / "webservices.json")
    assert env["MARSHO_MODEL"] == "deepseek-chat" and env["MARSHO_LANG"] == "en"
    assert "DRIVER" not in env and "SUPERUSERS" not in env
    assert env["LOCALSTORE_DATA_DIR"].startswith(str(tmp_path))
    assert env["HOME"] == str(tmp_path)  # no matplotlibrc or font cache of the developer's


def test_usage_rows_are_the_same_every_run_and_cover_the_chart() -> None:
    from datetime import datetime, timezone

    now = datetime(2026, 12, 2, 12, tzinfo=timezone.utc)
    rows = pictures.usage_rows(now)
    assert rows == pictures.usage_rows(now)
    days = {row.day for row in rows}
    assert len(days) >= 20 and max(days) == "2026-12-02" and min(days) >= "2026-11-03"  # in 30 days


def test_a_worker_that_fails_is_told_with_the_pictures_it_did_not_make(tmp_path: Path) -> None:
    folder = tmp_path / "en" / "assets" / "pictures"
    folder.mkdir(parents=True)
    (folder / "chat.svg").write_text("<svg/>", encoding="utf-8")
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", "print('starting'); print('docs_pictures: en/chart.png: no chart drawn')"
             "; raise SystemExit(1)"], stdout=output, stderr=subprocess.STDOUT)
    told = pictures._finished("en", folder, process, log)
    assert "en/chart.png, en/usage.png, en/status.svg" in told
    assert "en/chat.svg" not in told.split("\n")[0]
    assert "no chart drawn" in told and "starting" in told


def test_the_script_exits_with_the_message_when_a_picture_fails(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    def failing(out: Path, languages: Any = None) -> list[Path]:
        raise pictures.PictureError("docs_pictures: zh: not made: zh/usage.png (exit 1)")

    monkeypatch.setattr(pictures, "make_pictures", failing)
    assert pictures.main(["--out", str(tmp_path)]) == 1
    assert "zh/usage.png" in capsys.readouterr().err


# --- the mkdocs hook -------------------------------------------------------------------------------

@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[list[str]]]:
    """scripts/mkdocs_hooks.py with its script's runs recorded instead of made."""
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
    module = script("mkdocs_hooks")
    runs: list[list[str]] = []

    def run(args: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        runs.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(module.subprocess, "run", run)
    return module, runs


def test_the_hook_makes_the_pictures_into_the_docs_folder_when_one_is_missing(
        hooks: tuple[ModuleType, list[list[str]]], tmp_path: Path) -> None:
    module, runs = hooks
    module.on_pre_build({"docs_dir": str(tmp_path)})
    [args] = runs
    assert args[0] == sys.executable and Path(args[1]) == SCRIPTS / "docs_pictures.py"
    assert args[2:] == ["--out", str(tmp_path)]


def test_the_hook_keeps_pictures_newer_than_their_sources(
        hooks: tuple[ModuleType, list[list[str]]], tmp_path: Path) -> None:
    module, runs = hooks
    newest = module._newest_source()
    for path in pictures.picture_paths(tmp_path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        os.utime(path, (newest + 10, newest + 10))
    module.on_pre_build({"docs_dir": str(tmp_path)})  # mkdocs serve's next build
    assert runs == []
    stale = pictures.picture_paths(tmp_path)[-1]
    os.utime(stale, (newest - 10, newest - 10))
    module.on_pre_build({"docs_dir": str(tmp_path)})
    assert len(runs) == 1


def test_the_hook_fails_the_build_with_the_scripts_message(
        hooks: tuple[ModuleType, list[list[str]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from mkdocs.exceptions import PluginError

    module, _ = hooks

    def failing(args: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 1, "", "docs_pictures: en: not made: en/status.svg")

    monkeypatch.setattr(module.subprocess, "run", failing)
    with pytest.raises(PluginError, match="en/status.svg"):
        module.on_pre_build({"docs_dir": str(tmp_path)})


def test_mkdocs_puts_files_made_in_pre_build_on_the_site(tmp_path: Path) -> None:
    """What the hook relies on (mkdocs 1.6): a file made in on_pre_build is on the built site."""
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Hello\n\n![chat](assets/pictures/chat.svg)\n")
    (tmp_path / "hook.py").write_text(
        "from pathlib import Path\n\n"
        "def on_pre_build(config, **_):\n"
        "    made = Path(config['docs_dir']) / 'assets' / 'pictures' / 'chat.svg'\n"
        "    made.parent.mkdir(parents=True, exist_ok=True)\n"
        "    made.write_text('<svg xmlns=\"http://www.w3.org/2000/svg\"/>')\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nhooks:\n  - hook.py\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "assets" / "pictures" / "chat.svg").is_file()
