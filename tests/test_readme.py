"""The README works as written: a short front door whose commands, settings and links hold.

Its code blocks are checked by the same rules as the site's (tests/test_docs.py); the examples
that moved to the site (toolkits, web services) are run there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import test_docs as docs_checks
from tests.docs_blocks import DOCS, LANGUAGES, ROOT, Block, parse_blocks

README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = parse_blocks("README.md", README)
MAX_LINES = 250
"""The README is a front door, not the reference: the reference is the site."""


def of(language: str) -> list[Block]:
    return [block for block in BLOCKS if block.language == language]


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= MAX_LINES


def test_the_quick_start_runs_what_ci_and_the_console_test_run() -> None:
    """The test command is the one .ci/run runs; the console is started as tests/test_console.py
    starts it; and the endpoint is set before the bot first starts."""
    shell = "\n".join(block.text for block in of("sh"))
    assert 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest' in shell
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]"' in ci
    assert ".venv/bin/python -m pytest" in ci
    assert ".venv/bin/python bot.py --console" in shell
    assert 'BOT_PY), "--console"' in (ROOT / "tests" / "test_console.py").read_text(encoding="utf-8")
    assert "cp -n .env.example .env" in shell
    assert shell.index("cp -n .env.example .env") < shell.index("bot.py")
    assert README.index("MARSHO_BASE_URL=") < README.index("bot.py --console")
    assert "Ctrl</kbd>+<kbd>/" in README and "Ctrl</kbd>+<kbd>Q" in README


@pytest.mark.parametrize("block", of("sh"), ids=lambda block: block.where)
def test_every_readme_command_works_as_written(block: Block, tmp_path: Path) -> None:
    problems = [f"README.md:{block.line + number}: {why}" for number, words in docs_checks.commands(block.text)
                for why in docs_checks.check_command(words, block, tmp_path)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("block", of("dotenv"), ids=lambda block: block.where)
def test_every_readme_dotenv_block_is_settings_the_bot_accepts(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs_checks.test_every_dotenv_block_is_settings_the_bot_accepts(block, tmp_path, monkeypatch)


def test_the_readme_has_no_block_the_site_would_have_to_run() -> None:
    """Toolkits, web services and other code live on the site, where tests run them."""
    assert {block.language for block in BLOCKS} <= {"sh", "dotenv", "toml", "text"}
    for block in of("toml"):
        docs_checks.test_every_toml_block_parses(block)


def _planned_pages() -> set[str]:
    """The pages mkdocs.yml's nav lists (each page is in every language folder)."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1]
    return set(re.findall(r"^\s*-\s+(?:[^:\n]+:\s+)?([\w/.-]+\.md)\s*$", nav, re.MULTILINE))


def test_the_readme_links_into_the_site_in_both_languages() -> None:
    """Every relative link names a page of the site's nav (which `mkdocs build --strict` makes
    exist in both languages) or a file of the repository."""
    planned = _planned_pages()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert local, "the README links nowhere into the site"
    for link in local:
        if link.startswith("docs/") and link.endswith(".md"):  # a page; else a file (a picture)
            language, _, page = link.removeprefix("docs/").partition("/")
            assert language in LANGUAGES and (page in planned or (DOCS / language / page).is_file()), link
        else:
            assert (ROOT / link).exists(), link
    for language in LANGUAGES:
        assert f"docs/{language}/getting-started.md" in local


def test_the_pyproject_snippet_is_nb_clis_current_format_and_loads_the_plugin(tmp_path: Path) -> None:
    """nb-cli reads `plugins` and `adapters` as tables keyed by package (a list is its legacy
    format, which `nb run` warns about); NoneBot loads the plugin from it."""
    import os
    import subprocess
    import sys

    [snippet] = [block.text for block in of("toml") if "[tool.nonebot.plugins]" in block.text]
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


README_PICTURE = ROOT / "docs" / "readme-chat.svg"
"""The README's one picture, committed (scripts/docs_pictures.py --readme makes it)."""


def test_the_readme_shows_a_chat_picture_with_the_question_and_the_answer() -> None:
    from tests.test_docs_pictures import pictures, screen_lines

    assert "](docs/readme-chat.svg)" in README
    lines = screen_lines(README_PICTURE)
    chat = pictures.SCENES[pictures.README_LANG]["chat"]
    assert any(chat.question in line for line in lines), lines
    assert any(chat.answer in line for line in lines), lines
    assert "docs_pictures.py --readme docs/readme-chat.svg" in README


def test_the_readme_picture_is_the_steady_one_the_script_makes() -> None:
    """Committed, it must not change with the clock: the script's steady() has been applied."""
    from tests.test_docs_pictures import pictures

    svg = README_PICTURE.read_text(encoding="utf-8")
    assert pictures.steady(svg) == svg
    assert pictures.local_fonts(svg) == svg  # no web font to fetch; fonts that hold Chinese


def test_the_readme_picture_gives_chinese_its_two_cells() -> None:
    from rich.cells import cell_len

    from tests.test_docs_pictures import text_elements

    elements = text_elements(README_PICTURE.read_text(encoding="utf-8"))
    cell = 20 * 0.61  # rich's cell: 20 px high, 0.61 of that wide
    assert any(cell_len(text) > len(text) for text, _ in elements)
    assert [(text, width) for text, width in elements if width != pytest.approx(cell_len(text) * cell)] == []
