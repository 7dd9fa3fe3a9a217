"""Every code block of the documentation site works as written (docs/zh and docs/en).

The rules a page follows (tests/docs_blocks.py reads the blocks; each failure names the page
and the line of the block's opening fence):

1. Every fenced block has a language. Chat lines a person types, log lines and other text are
   ```` ```text ```` (not run). Shell commands are ```` ```sh ```` (not bash/shell/console), a
   settings file ```` ```dotenv ```` (not env), Python ```` ```python ```` (not py).
2. ```` ```dotenv ```` blocks are read the way the bot reads `.env` (NoneBot's parser, then the
   plugin's own reading: marshoai keys, JSON values, Config's validation). Every key must be
   - a setting of `Config` (`MARSHO_*`; a misspelled one fails with the key it probably means),
   - a nonebot-plugin-marshoai key the plugin still reads (LEGACY_KEYS, for the migrating page),
   - a NoneBot key (HOST, PORT, SUPERUSERS, COMMAND_START, NICKNAME, DRIVER, LOG_LEVEL...),
     a nonebot-plugin-localstore key (LOCALSTORE_*), or a key of an adapter's config
     (ONEBOT_ACCESS_TOKEN, TELEGRAM_BOTS, QQ_BOTS, DISCORD_BOTS, KAIHEILA_BOTS, FEISHU_BOTS,
     SATORI_CLIENTS, CONSOLE_*...), its value valid for that adapter,
   - or a `${NAME}` that a json block of the same page uses (mcp.json, webservices.json).
   NoneBot's own keys are validated as NoneBot's Config reads them: SUPERUSERS is a list of
   strings (`SUPERUSERS=["123456789"]`; `[123456789]` stops NoneBot), numbers are fine only in
   the MARSHO_* lists.
3. ```` ```json ```` blocks titled `mcp.json`, `webservices.json`, `tools.json`, `toolkit.json` or
   `praises.json` (the title may have folders before it: `my_kit/tools.json`) load through the
   plugin's own reader for that file with no problem at all (a `${NAME}` they use counts as
   set). Any other json block must be valid JSON (comments allowed, as the plugin's files).
4. ```` ```python ```` blocks titled `<folder>/__init__.py` load as a toolkit named `<folder>`,
   with the same page's `<folder>/tools.json` and `<folder>/toolkit.json` blocks beside them
   when it has them, with no problem and at least one tool. Every other python block needs a
   title and a test of its own: a file in tests/ that reads it with
   `doc_block("<lang>/<page>", "<title>")` (the language may be an f-string field:
   `doc_block(f"{lang}/plugin-api.md", "my_plugin.py")`), which this test looks for.
5. ```` ```sh ```` blocks hold one command per line (`#` comments and `&&` chains allowed, no
   `$` prompt). Each is run where that is quick and offline, else checked against what it names:
   - `pip install` (also `.venv/bin/pip`, `python -m pip`, `pipx`, `uv pip`) installs this
     distribution: `.`, `-e ".[docs]"`, a path ending in the project's folder, the git URL of
     pyproject's Homepage, a `nonebot_plugin_marsho-*.whl`, `nonebot-plugin-marsho[extra]`; each
     extra declared in pyproject.toml. Another package only when pyproject.toml names it (a
     NoneBot adapter of the test extra: `pip install nonebot-adapter-telegram`), it is `nb-cli`,
     or a json block of the same page names it (an MCP server installed with pip);
   - a venv's program (`python`, `pip`, `pytest`, `mkdocs`) is written with its path
     (`.venv/bin/python`, or an absolute one): bare, it is not the venv's outside an activated
     venv; only `python3 -m venv` (which makes the venv) runs bare;
   - `python` (`.venv/bin/python`): `-m venv`, `-m pytest`, `-m mkdocs`,
     `-m nonebot_plugin_marsho <command> [flags]` or another module of the package with a
     `__main__` (`-m nonebot_plugin_marsho.store.migrations revision ...`), run with `--help`:
     the command and each flag must exist; or a script that exists (in the repository, or a block of the page titled with
     its name) and whose source names each `--flag` used;
   - `cp` runs in a temporary copy of the files it names (which must exist in the repository);
   - `git clone` clones pyproject's Homepage; `nb` installs this plugin or a NoneBot adapter
     pyproject names, or runs (`nb run`, `nb create`); `mkdocs` serves or builds (mkdocs.yml);
   - `ollama pull|run <model>` and `vllm serve <model>` name a model that a dotenv block of the
     same page sets (MARSHO_MODEL or a fallback); `cd`, `mkdir`, `export`, `source`, `curl`,
     `docker`, `litellm`, `uvx`, `npx`, `chmod`, `echo`, `cat`, `ls`, `which`, `pwd`, `tail`,
     `head`, `grep`, `touch`, `systemctl`, `journalctl` are accepted as written;
   - any other program fails: write it as text, or ask for a checker here.
6. ```` ```toml ```` blocks parse. Other languages (text, yaml, ...) are not run.
7. docs/zh and docs/en hold the same pages, and the two versions of a page have as many dotenv,
   sh, json and python blocks as each other.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib  # type: ignore[no-redef]

from tests.docs_blocks import DOCS, LANGUAGES, ROOT, Block, blocks, pages

ALL = blocks()
RUNNABLE = ("dotenv", "sh", "json", "python")
ALIASES = {"bash": "sh", "shell": "sh", "console": "sh", "zsh": "sh", "shell-session": "sh",
           "py": "python", "python3": "python", "env": "dotenv"}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DISTRIBUTION = PYPROJECT["project"]["name"]
HOMEPAGE = PYPROJECT["project"]["urls"]["Homepage"].rstrip("/")
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
FILE_READERS = ("mcp.json", "webservices.json", "tools.json", "toolkit.json", "praises.json")
KNOWN_PACKAGES = {"nb-cli"} | {
    re.split(r"[\[<>=!~;, ]", requirement.strip(), maxsplit=1)[0].lower()
    for requirement in [*PYPROJECT["project"]["dependencies"],
                        *(r for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra)]
}
"""What a pip install may name besides this distribution: nb-cli, and what pyproject.toml
depends on (an adapter of the test extra, mkdocs...)."""
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def of(language: str) -> list[Block]:
    return [block for block in ALL if block.language == language]


def ids(block: Block) -> str:
    return block.where


def same_page(block: Block, language: str | None = None) -> list[Block]:
    return [b for b in ALL if b.page == block.page and (language is None or b.language == language)]


def placeholders(block: Block) -> set[str]:
    """Every `${NAME}` the json blocks of the block's page use."""
    return {name for b in same_page(block, "json") for name in PLACEHOLDER.findall(b.text)}


# ---------------------------------------------------------------------------------------------
# every block


@pytest.mark.parametrize("block", ALL, ids=ids)
def test_every_block_names_its_language_the_way_the_site_does(block: Block) -> None:
    assert block.language, f"{block.where}: a block without a language (chat lines are ```text)"
    assert block.language not in ALIASES, (
        f"{block.where}: ```{block.language}: write ```{ALIASES[block.language]}")


def test_both_languages_have_the_same_pages() -> None:
    chinese = {page.removeprefix("zh/") for page in pages("zh")}
    english = {page.removeprefix("en/") for page in pages("en")}
    assert chinese - english == set(), "pages only in Chinese"
    assert english - chinese == set(), "pages only in English"


@pytest.mark.parametrize("page", [p.removeprefix("zh/") for p in pages("zh")
                                  if (DOCS / "en" / p.removeprefix("zh/")).is_file()])
def test_both_versions_of_a_page_have_the_same_runnable_blocks(page: str) -> None:
    counts = {language: {kind: len([b for b in blocks(f"{language}/{page}") if b.language == kind])
                         for kind in RUNNABLE} for language in LANGUAGES}
    assert counts["zh"] == counts["en"], f"{page}: blocks per kind differ between zh and en"


# ---------------------------------------------------------------------------------------------
# dotenv


def _adapter_configs() -> list[type[BaseModel]]:
    """The config models of NoneBot, localstore and every adapter the project installs."""
    import importlib

    import nonebot.config

    found: list[type[BaseModel]] = [nonebot.config.Env]
    for module_name, class_name in [
        ("nonebot_plugin_localstore.config", "Config"),
        ("nonebot.adapters.onebot.v11.config", "Config"),
        ("nonebot.adapters.onebot.v12.config", "Config"),
        ("nonebot.adapters.console.config", "Config"),
        ("nonebot.adapters.telegram.config", "AdapterConfig"),
        ("nonebot.adapters.discord.config", "Config"),
        ("nonebot.adapters.qq.config", "Config"),
        ("nonebot.adapters.kaiheila.config", "Config"),
        ("nonebot.adapters.feishu.config", "Config"),
        ("nonebot.adapters.satori.config", "Config"),
    ]:
        try:
            found.append(getattr(importlib.import_module(module_name), class_name))
        except ImportError:  # an adapter of the test extra that is not installed
            continue
    return found


def _keys_of(model: type[BaseModel]) -> set[str]:
    return {name for field_name, field in model.model_fields.items()
            for name in (field_name, field.alias) if name}


def _bad_lines(text: str) -> list[int]:
    """Lines (1-based, within the block) python-dotenv cannot parse."""
    from dotenv.parser import parse_stream

    return [binding.original.line for binding in parse_stream(io.StringIO(text)) if binding.error]


def read_dotenv(text: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """NoneBot's settings from `text` as its `.env`, the process environment left out."""
    import nonebot.config

    path = folder / ".env"
    path.write_text(text, encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(os, "environ", {})
        return nonebot.config.Config(_env_file=(str(path),), _env_file_encoding="utf-8").model_dump()


def _unknown_key(key: str, block: Block, known: set[str]) -> str | None:
    """Why `key` (lower case) is no key a reader of the page can use; None when it is one."""
    from nonebot_plugin_marsho.config import _KNOWN_LEGACY_KEYS, Config, misspelled_keys

    if key in Config.model_fields or key in _KNOWN_LEGACY_KEYS or key in known:
        return None
    if key.startswith("localstore_") or key.upper() in placeholders(block):
        return None
    if key.startswith("marsho_"):
        return misspelled_keys({key: False})[0]
    return f"{key.upper()} is neither a MARSHO_* setting nor a key of NoneBot, localstore or an adapter"


@pytest.mark.parametrize("block", of("dotenv"), ids=ids)
def test_every_dotenv_block_is_settings_the_bot_accepts(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.config import (
        Config,
        _RawSettings,
        apply_legacy_keys,
        describe_validation_error,
    )

    bad = _bad_lines(block.text)
    assert not bad, f"{block.where}: line {bad[0]} of the block is not KEY=value"
    from dotenv import dotenv_values

    configs = _adapter_configs()
    known = set().union(*(_keys_of(model) for model in configs))
    import nonebot.config

    known |= _keys_of(nonebot.config.Config)
    problems = [why for key in dotenv_values(stream=io.StringIO(block.text))
                if (why := _unknown_key(key.lower(), block, known))]
    assert not problems, f"{block.where}: " + "; ".join(problems)
    try:
        settings = read_dotenv(block.text, tmp_path, monkeypatch)
    except ValidationError as error:  # NoneBot's own Config refuses it: the bot would not start
        raise AssertionError(f"{block.where}: NoneBot refuses it: {error}") from None
    for model in configs:
        try:
            model.model_validate(settings)
        except ValidationError as error:
            raise AssertionError(f"{block.where}: {model.__module__}: {error}") from None
    data = _RawSettings.model_validate(settings).model_dump(exclude_unset=True)
    data, _notes = apply_legacy_keys(data)
    try:
        Config.model_validate(data)
    except ValidationError as error:
        raise AssertionError(f"{block.where}: {describe_validation_error(error)}") from None


# ---------------------------------------------------------------------------------------------
# json and toml


def _file_name(block: Block) -> str:
    return (block.title or "").rsplit("/", 1)[-1]


def _write(block: Block, folder: Path) -> Path:
    path = folder / _file_name(block)
    path.write_text(block.text, encoding="utf-8")
    return path


def _json_problems(block: Block, folder: Path) -> list[Any]:
    """The problems the plugin's reader for the block's file finds in it."""
    from nonebot_plugin_marsho.agent.praises import read_praises
    from nonebot_plugin_marsho.fileformat import FileFormatError
    from nonebot_plugin_marsho.tools.loader import _Problems, read_manifest, read_tools_json
    from nonebot_plugin_marsho.tools.mcp import read_mcp_config
    from nonebot_plugin_marsho.tools.webservices import load_webservices

    path = _write(block, folder)
    environ = dict.fromkeys(PLACEHOLDER.findall(block.text), "set-by-the-owner")
    name = _file_name(block)
    if name == "mcp.json":
        servers, problems = read_mcp_config(path, environ=environ)
        return problems or ([] if servers else ["no server"])
    if name == "webservices.json":
        toolkit, found = load_webservices(path, environ=environ)
        return list(found) or ([] if toolkit else ["no service"])
    if name in ("tools.json", "toolkit.json"):
        problems = _Problems(folder.name)
        if name == "tools.json":
            entries = read_tools_json(path, folder.name, problems)
            return problems.items or ([] if entries else ["no tool"])
        read_manifest(folder, problems)
        return problems.items
    try:
        return [] if read_praises(path) else ["nobody in it"]
    except FileFormatError as error:
        return error.messages


@pytest.mark.parametrize("block", of("json"), ids=ids)
def test_every_json_block_is_a_file_the_plugin_reads(block: Block, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.fileformat import strip_json_comments

    if _file_name(block) in FILE_READERS:
        folder = tmp_path / ((block.title or "").rsplit("/", 2)[-2] if "/" in (block.title or "") else "kit")
        folder.mkdir()
        problems = _json_problems(block, folder)
        assert problems == [], f"{block.where}: {block.title}: {problems}"
    else:
        try:
            json.loads(strip_json_comments(block.text))
        except json.JSONDecodeError as error:
            raise AssertionError(f"{block.where}: invalid JSON at line {error.lineno}: {error.msg}") from None


@pytest.mark.parametrize("block", of("toml"), ids=ids)
def test_every_toml_block_parses(block: Block) -> None:
    try:
        tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as error:
        raise AssertionError(f"{block.where}: {error}") from None


# ---------------------------------------------------------------------------------------------
# python


def _toolkit_folder(block: Block) -> str | None:
    parts = (block.title or "").split("/")
    return parts[-2] if len(parts) >= 2 and parts[-1] == "__init__.py" and parts[-2] else None


TOOLKITS = [block for block in of("python") if _toolkit_folder(block)]
OTHER_PYTHON = [block for block in of("python") if not _toolkit_folder(block)]


@pytest.mark.parametrize("block", TOOLKITS, ids=ids)
def test_every_toolkit_block_loads_as_a_toolkit(block: Block, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.tools import ToolsetSource, load_toolset

    name = _toolkit_folder(block)
    assert name is not None
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text(block.text, encoding="utf-8")
    prefix = (block.title or "").removesuffix("__init__.py")
    for beside in ("tools.json", "toolkit.json"):
        for other in same_page(block, "json"):
            if other.title == prefix + beside:
                (folder / beside).write_text(other.text, encoding="utf-8")
    toolset = load_toolset([ToolsetSource(tmp_path, "docs")], enabled=[name])
    assert toolset.problems == [], f"{block.where}: {[str(p) for p in toolset.problems]}"
    assert any(tool.startswith(f"{name}__") for tool in toolset.tools), f"{block.where}: no tool loaded"


@cache
def _test_sources() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "tests").glob("*.py"))


@pytest.mark.parametrize("block", OTHER_PYTHON, ids=ids)
def test_every_other_python_block_has_a_test_of_its_own(block: Block) -> None:
    assert block.title, f"{block.where}: a python block needs a title (the file it is) and a test"
    language, page = block.page.split("/", 1)
    claim = re.compile(r"""doc_block\(\s*f?["'](?:""" + re.escape(language) + r"""|\{\w+\})/"""
                       + re.escape(page) + r"""["']\s*,\s*["']""" + re.escape(block.title) + "[\"']")
    assert claim.search(_test_sources()), (
        f"{block.where}: no test reads it: add one calling doc_block({block.page!r}, {block.title!r})")


# ---------------------------------------------------------------------------------------------
# sh


def commands(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line in the block, words) of each simple command of an sh block: comments dropped,
    chains (`&&`, `||`, `;`, `|`) split, a trailing backslash continuing the line."""
    joined: list[tuple[int, str]] = []
    pending = ""
    for number, line in enumerate(text.splitlines(), 1):
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        joined.append((number, pending))
        pending = ""
    for number, line in joined:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in lexer:
            if token in ("&&", "||", ";", "|", "&"):
                if words:
                    yield number, words
                words = []
            else:
                words.append(token)
        if words:
            yield number, words


def _program(word: str) -> str:
    """`python` for python3, .venv/bin/python, .venv\\Scripts\\python.exe ..."""
    name = re.split(r"[/\\]", word)[-1].removesuffix(".exe")
    return "python" if re.fullmatch(r"python(3(\.\d+)?)?", name) else name


def _requirement(word: str, block: Block) -> str | None:
    """Why `word`, an argument of pip install, is not this distribution; None when it is."""
    extras = re.search(r"\[([^\]]*)\]", word)
    for extra in (extras[1].split(",") if extras else []):
        if extra.strip() not in EXTRAS:
            return f"{word}: pyproject.toml declares no extra {extra.strip()!r}"
    base = re.sub(r"\[[^\]]*\]", "", word).rstrip("/")
    name = re.split(r"[<>=!~;@ ]", base, maxsplit=1)[0]
    if base in (".", "") or base.endswith("/" + DISTRIBUTION) or name == DISTRIBUTION:
        return None
    if base.startswith("git+"):
        url = base.removeprefix("git+").split("@")[0].split("#")[0].removesuffix(".git")
        return None if url == HOMEPAGE else f"{word}: not the project's repository {HOMEPAGE}"
    if base.endswith(".whl"):
        wheel = DISTRIBUTION.replace("-", "_")
        return None if Path(base).name.startswith(wheel + "-") else f"{word}: not a {wheel} wheel"
    if name.lower() in KNOWN_PACKAGES or any(name in b.text for b in same_page(block, "json")):
        return None
    return f"{word}: pip installs something other than {DISTRIBUTION} (or a package its json names)"


def _check_pip(words: list[str], block: Block) -> list[str]:
    if not words or words[0] not in ("install", "wheel", "uninstall"):
        return [f"pip {' '.join(words[:1])}: only install, wheel and uninstall are checked"]
    targets = [w for w in words[1:] if not w.startswith("-")]
    return [why for word in targets if (why := _requirement(word, block))]


@cache
def _cli_help(module: str, *words: str) -> tuple[int, str]:
    """`python -m <module> <words> --help`, in an empty folder with no settings."""
    import tempfile

    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith(("MARSHO", "LOCALSTORE", "ONEBOT", "ENVIRONMENT"))}
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-m", module, *words, "--help"],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def _check_marsho_cli(module: str, words: list[str]) -> list[str]:
    """A command line of the package's own CLIs (`python -m nonebot_plugin_marsho`, its
    migrations): the command and each flag must be in its `--help`."""
    path = ROOT / module.replace(".", "/")
    if not ((path / "__main__.py").is_file() or path.with_suffix(".py").is_file()):
        return [f"python -m {module}: no such module in the package"]
    code, text = _cli_help(module)
    command = next((w for w in words if not w.startswith("-")), None)
    if command is not None:
        code, text = _cli_help(module, command)
    if code != 0:
        return [f"python -m {module} {command or ''}: {text.strip().splitlines()[-1:]}"]
    return [f"python -m {module} {command}: no flag {flag}"
            for flag in (w.split("=")[0] for w in words if w.startswith("-")) if flag not in text]


def _script(word: str, block: Block) -> str | None:
    """The source of the script `word` names: the repository's file or a block titled with it."""
    path = ROOT / word
    if path.is_file():
        return path.read_text(encoding="utf-8")
    return next((b.text for b in same_page(block) if b.title and b.title.endswith(word)), None)


def _check_python(words: list[str], block: Block) -> list[str]:
    options = [w for w in words if w in ("-q", "-u", "-X", "-O", "-B")]
    words = words[len(options):]
    if not words:
        return ["python with nothing to run"]
    if words[0] == "-m":
        module, rest = (words[1:2] or [""])[0], words[2:]
        if module == "pip":
            return _check_pip(rest, block)
        if module == "nonebot_plugin_marsho" or module.startswith("nonebot_plugin_marsho."):
            return _check_marsho_cli(module, rest)
        if module == "pytest":  # the tests it names exist (other words are options' values)
            return [f"python -m pytest {w}: no such file" for w in rest
                    if (w.startswith("tests") or ".py" in w) and not (ROOT / w.split("::")[0]).exists()]
        if module in ("venv", "mkdocs"):
            return []
        return [f"python -m {module}: no checker for this module"]
    if words[0] == "-c":
        return []
    source = _script(words[0], block)
    if source is None:
        return [f"python {words[0]}: no such file in the repository, nor a block titled so on the page"]
    return [f"python {words[0]} {flag}: the script does not know this flag"
            for flag in (w.split("=")[0] for w in words[1:] if w.startswith("--"))
            if f'"{flag}"' not in source and f"'{flag}'" not in source]


def _check_cp(words: list[str], tmp_path: Path) -> list[str]:
    arguments = [w for w in words if not w.startswith("-")]
    sources = arguments[:-1]
    missing = [s for s in sources if not (ROOT / s).exists()]
    if missing:
        return [f"cp {s}: no such file in the repository" for s in missing]
    for source in sources:
        (tmp_path / source).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / source).write_bytes((ROOT / source).read_bytes())
    done = subprocess.run(["cp", *words], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    return [] if done.returncode == 0 else [f"cp {' '.join(words)}: {done.stderr.strip()}"]


def _models_set(block: Block) -> str:
    return "\n".join(b.text for b in same_page(block, "dotenv"))


def _check_external(program: str, words: list[str], block: Block) -> list[str]:
    if program == "git":
        if words[:1] != ["clone"]:
            return []
        url = next((w for w in words[1:] if not w.startswith("-")), "").removesuffix(".git").rstrip("/")
        return [] if url == HOMEPAGE else [f"git clone {url}: not the project's repository {HOMEPAGE}"]
    if program == "nb":
        if words[:2] == ["plugin", "install"]:
            return [] if DISTRIBUTION in words else [f"nb plugin install: does not install {DISTRIBUTION}"]
        if words[:2] == ["adapter", "install"]:
            named = " ".join(PYPROJECT["project"]["dependencies"]
                             + PYPROJECT["project"]["optional-dependencies"]["test"])
            return [f"nb adapter install {w}: not an adapter pyproject.toml names" for w in words[2:]
                    if w not in named]
        return [] if words[:1] in (["run"], ["create"]) else [f"nb {' '.join(words)}: no checker"]
    if program == "mkdocs":
        if not (ROOT / "mkdocs.yml").is_file():
            return ["mkdocs: the repository has no mkdocs.yml"]
        return [] if words[:1] in (["serve"], ["build"]) else [f"mkdocs {' '.join(words[:1])}: no checker"]
    if program in ("ollama", "vllm") and len(words) >= 2 and words[0] in ("pull", "run", "serve"):
        model = words[1]
        return [] if model in _models_set(block) else [
            f"{program} {words[0]} {model}: no dotenv block of the page sets this model"]
    return []


ACCEPTED = {"cd", "mkdir", "export", "source", ".", "curl", "docker", "litellm", "uvx", "npx", "chmod",
            "echo", "cat", "ls", "which", "pwd", "tail", "head", "grep", "touch", "systemctl", "journalctl",
            "git", "nb", "mkdocs", "ollama", "vllm"}


VENV_PROGRAMS = ("python", "pip", "pip3", "pytest", "mkdocs")
"""Programs a page runs from the venv: written bare, they are whatever comes first on PATH
(often no such program at all outside an activated venv)."""


def _bare(words: list[str]) -> str | None:
    """Why `words` runs a venv's program without its path; None when it does not."""
    word = words[0]
    name = "python" if _program(word) == "python" else word
    if name not in VENV_PROGRAMS or re.search(r"[/\\]", word):
        return None
    if re.fullmatch(r"python3(\.\d+)?", word) and words[1:3] == ["-m", "venv"]:
        return None  # the one command that runs before there is a venv
    shown = "python" if name == "python" else name
    return (f"{word}: a bare {word} is not the bot's venv outside an activated venv: write "
            f".venv/bin/{shown} (or an absolute path to the venv)")


def check_command(words: list[str], block: Block, tmp_path: Path) -> list[str]:
    """Why the command `words` of an sh block does not work as written; [] when it does."""
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):  # VAR=value command
        words = words[1:]
    if not words:
        return []
    program, rest = _program(words[0]), words[1:]
    if words[0].startswith("$"):
        return ["a `$` prompt before the command: write the command alone"]
    if bare := _bare(words):
        return [bare]
    if program in ("pip", "pip3"):
        return _check_pip(rest, block)
    if program == "pipx" or (program == "uv" and rest[:1] == ["pip"]):
        rest = rest[1:] if program == "uv" else rest
        return _check_pip(rest, block)
    if program == "python":
        return _check_python(rest, block)
    if program == "cp":
        return _check_cp(rest, tmp_path)
    if program in ACCEPTED:
        return _check_external(program, rest, block)
    return [f"{words[0]}: no checker for this program (write it as text, or add one to tests/test_docs.py)"]


@pytest.mark.parametrize("block", of("sh"), ids=ids)
def test_every_sh_command_works_as_written(block: Block, tmp_path: Path) -> None:
    problems = [f"{block.page}:{block.line + number}: {why}"
                for number, words in commands(block.text)
                for why in check_command(words, block, tmp_path)]
    assert problems == [], "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# the checks themselves


def test_the_block_reader_finds_indented_blocks_their_titles_and_lines() -> None:
    from tests.docs_blocks import parse_blocks

    markdown = ('# Page\n\n```dotenv title=".env"\nMARSHO_MODEL=x\n```\n\n'
                '??? note "More"\n\n    ```sh\n    python bot.py --console\n    ```\n')
    first, second = parse_blocks("en/x.md", markdown)
    assert (first.line, first.language, first.title, first.text) == (3, "dotenv", ".env", "MARSHO_MODEL=x\n")
    assert (second.line, second.language, second.title) == (9, "sh", None)
    assert second.text == "python bot.py --console\n"


def test_a_misspelled_or_unknown_key_fails_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = Block("en/x.md", 1, "dotenv", ".env", "MARSHO_MODLE=x\nFOO_BAR=1\nPORT=8080\nMARSHOAI_TOKEN=t\n")
    with pytest.raises(AssertionError) as failed:
        test_every_dotenv_block_is_settings_the_bot_accepts(block, tmp_path, monkeypatch)
    assert "MARSHO_MODLE is not a setting; did you mean MARSHO_MODEL?" in str(failed.value)
    assert "FOO_BAR is neither" in str(failed.value) and "PORT" not in str(failed.value)
    assert "MARSHOAI_TOKEN" not in str(failed.value)


def test_a_bad_value_fails_as_the_bot_would_refuse_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = Block("en/x.md", 1, "dotenv", ".env", "MARSHO_MAX_HISTORY=many\n")
    with pytest.raises(AssertionError, match="MARSHO_MAX_HISTORY"):
        test_every_dotenv_block_is_settings_the_bot_accepts(block, tmp_path, monkeypatch)
    good = Block("en/x.md", 1, "dotenv", ".env", 'MARSHO_MAX_HISTORY=4\nSUPERUSERS=["1"]\n')
    (tmp_path / "good").mkdir()
    test_every_dotenv_block_is_settings_the_bot_accepts(good, tmp_path / "good", monkeypatch)


def test_a_numeric_superusers_fails_as_nonebot_refuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = Block("en/x.md", 1, "dotenv", ".env", "SUPERUSERS=[123456789]\n")
    with pytest.raises(AssertionError, match="(?s)NoneBot refuses it.*superusers"):
        test_every_dotenv_block_is_settings_the_bot_accepts(block, tmp_path, monkeypatch)
    numbers = Block("en/x.md", 1, "dotenv", ".env", 'MARSHO_ALLOWED_GROUPS=[123456789]\nSUPERUSERS=["1"]\n')
    (tmp_path / "numbers").mkdir()
    test_every_dotenv_block_is_settings_the_bot_accepts(numbers, tmp_path / "numbers", monkeypatch)


def test_commands_are_split_and_checked(tmp_path: Path) -> None:
    block = Block("en/x.md", 1, "sh", None, "")
    text = ("# a comment\npython3 -m venv .venv && .venv/bin/pip install -e \".[test]\"\n"
            "cp -n .env.example .env\n.venv/bin/python bot.py --console\n")
    assert [words[0] for _, words in commands(text)] == ["python3", ".venv/bin/pip", "cp", ".venv/bin/python"]
    assert all(check_command(words, block, tmp_path) == [] for _, words in commands(text))
    assert check_command([".venv/bin/pip", "install", ".[nope]"], block, tmp_path)
    assert check_command([".venv/bin/pip", "install", "requests"], block, tmp_path)
    assert check_command([".venv/bin/pip", "install", "nonebot-adapter-telegram"], block, tmp_path) == []
    assert check_command([".venv/bin/python", "bot.py", "--consol"], block, tmp_path)
    assert check_command(["cp", "no-such.example", ".env"], block, tmp_path)
    assert check_command([".venv/bin/python", "-m", "pytest", "-m", "not e2e", "-n", "0"], block, tmp_path) == []
    assert check_command([".venv/bin/python", "-m", "pytest", "tests/test_nowhere.py"], block, tmp_path)
    assert check_command(["rm", "-rf", "data"], block, tmp_path)
    assert check_command(["git", "clone", "https://example.com/other"], block, tmp_path)


def test_a_bare_venv_program_fails_naming_the_venv_path(tmp_path: Path) -> None:
    block = Block("en/x.md", 1, "sh", None, "")
    for words in (["python", "bot.py"], ["python3", "-m", "pytest"], ["pip", "install", "."],
                  ["pytest", "-q"], ["mkdocs", "serve"]):
        assert any(".venv/bin/" in why for why in check_command(words, block, tmp_path)), words
    assert check_command(["python3", "-m", "venv", ".venv"], block, tmp_path) == []
    assert check_command([".venv/bin/mkdocs", "serve"], block, tmp_path) == []
    assert check_command(["/srv/bot/.venv/bin/python", "-m", "pytest"], block, tmp_path) == []


@pytest.mark.e2e
def test_the_marsho_cli_is_checked_by_its_own_help(tmp_path: Path) -> None:
    block = Block("en/x.md", 1, "sh", None, "")
    assert check_command([".venv/bin/python", "-m", "nonebot_plugin_marsho", "tools", "--schemas"], block, tmp_path) == []
    assert check_command([".venv/bin/python", "-m", "nonebot_plugin_marsho", "tools", "--nope"], block, tmp_path)
    migrations = [".venv/bin/python", "-m", "nonebot_plugin_marsho.store.migrations", "revision", "--autogenerate",
                  "-m", "what changed"]
    assert check_command(migrations, block, tmp_path) == []
    assert check_command([".venv/bin/python", "-m", "nonebot_plugin_marsho.nowhere", "x"], block, tmp_path)


def test_an_unclaimed_python_block_fails() -> None:
    block = Block("en/x.md", 1, "python", "nobody_reads_me.py", "print(1)\n")
    with pytest.raises(AssertionError, match="no test reads it"):
        test_every_other_python_block_has_a_test_of_its_own(block)


@pytest.mark.parametrize(("lang", "language"), [("zh", "zh-CN"), ("en", "en")])
def test_the_configuration_page_quotes_what_a_member_reads_when_a_value_is_bad(lang: str, language: str) -> None:
    """A bad value stops every answer (chat/matchers.py `_not_ready`): members read one sentence
    without the key, which the page quotes as the bot says it."""
    from nonebot_plugin_marsho.i18n import text

    page = (DOCS / lang / "configuration.md").read_text(encoding="utf-8")
    said = text(language, "error.brief", reason=text(language, "brief.config"))
    assert said in " ".join(page.split()), f"docs/{lang}/configuration.md does not quote {said!r}"


def test_the_quick_start_says_how_to_get_english_replies() -> None:
    """The bot speaks Chinese by default: the English page sets MARSHO_LANG=en in step 2, the
    Chinese one names it."""
    first = next(b for b in blocks("en/getting-started.md") if b.language == "dotenv")
    assert "MARSHO_LANG=en\n" in first.text, first.where
    assert "`MARSHO_LANG=en`" in (DOCS / "zh" / "getting-started.md").read_text(encoding="utf-8")


def test_the_sidebar_does_not_repeat_the_sites_name_over_its_first_page() -> None:
    """mkdocs-material titles the sidebar with site_name; a first page titled by its heading
    ("# Marsho") read "Marsho › Marsho". It has a nav title, translated for each language."""
    yaml = pytest.importorskip("yaml")
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    first = site["nav"][0]
    assert isinstance(first, dict) and list(first.values()) == ["index.md"], first
    [title] = first
    assert title != site["site_name"]
    heading = (DOCS / "zh" / "index.md").read_text(encoding="utf-8").splitlines()[0].removeprefix("# ")
    i18n = next(p["i18n"] for p in site["plugins"] if isinstance(p, dict) and "i18n" in p)
    for language in i18n["languages"]:
        shown = (language.get("nav_translations") or {}).get(title, title)
        assert shown not in (site["site_name"], heading), language["locale"]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_development_page_runs_the_checks_ci_runs(lang: str) -> None:
    """The lint command a developer is given is the one .ci/run runs, and the page says .ci/run
    builds the site strictly."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    page = (DOCS / lang / "development.md").read_text(encoding="utf-8")
    ruff = [line.strip() for line in page.splitlines() if line.strip().startswith(".venv/bin/ruff check")]
    assert ruff and all(line in ci.splitlines() for line in ruff), ruff
    assert "mkdocs build --strict" in ci and "`mkdocs build --strict`" in page


def _flat(page: str) -> str:
    return " ".join((DOCS / page).read_text(encoding="utf-8").split())


@pytest.mark.parametrize(("lang", "language"), [("zh", "zh-CN"), ("en", "en")])
def test_the_providers_page_says_the_retry_after_cap_and_the_trials_as_the_code_does(lang: str,
                                                                                   language: str) -> None:
    from nonebot_plugin_marsho.agent.providers import PROBE_INTERVAL
    from nonebot_plugin_marsho.config import Config
    from nonebot_plugin_marsho.i18n import text

    page = _flat(f"{lang}/providers.md")
    section = page.split("{#retry-after}", 1)[1].split(" ## ", 1)[0]
    cap = Config.model_fields["marsho_retry_after_max"].default
    assert "`MARSHO_RETRY_AFTER_MAX`" in section and f"{cap:g}" in section
    assert f"{PROBE_INTERVAL:g}" in section
    for key, params in (("status.asked", {"reason": "", "seconds": 3600}), ("status.trial_in", {"seconds": 30}),
                        ("status.trial_running", {}), ("status.failing_state", {})):
        said = text(language, key, **params).strip().rstrip("。.")
        assert said in section, f"docs/{lang}/providers.md#retry-after does not quote {said!r}"


@pytest.mark.parametrize(("lang", "language"), [("zh", "zh-CN"), ("en", "en")])
def test_the_bill_page_quotes_the_line_of_the_groups_share(lang: str, language: str) -> None:
    from nonebot_plugin_marsho.i18n import text

    assert text(language, "bill.shared") in _flat(f"{lang}/bill.md")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_quick_starts_connection_box_quotes_the_onebot_adapters_own_messages(lang: str) -> None:
    """A wrong or missing token is told in the log with the adapter's words, which the page
    quotes so that a reader can search for them."""
    import inspect

    from nonebot.adapters.onebot.v11 import Adapter

    page = _flat(f"{lang}/getting-started.md")
    source = inspect.getsource(Adapter)
    for said in ("Authorization Header is invalid", "Missing Authorization Header", "/onebot/v11/ws"):
        assert said in source and f"`{said}`" in page, said
    assert "address already in use" in page and "connected`" in page


def _listed(text: str) -> set[str]:
    """The single characters a page lists in backticks (`` `[ ] < >` `` lists four)."""
    return {word for span in re.findall(r"`([^`]+)`", text) for word in span.split() if len(word) == 1}


def _rule(page: str, mark: str, allowed: dict[str, str]) -> tuple[set[str], set[str]]:
    """The characters the paragraph of `page` holding `mark` says are refused, and those it says
    are fine (after the page language's `allowed` words: what comes after is allowed)."""
    language = page.split("/", 1)[0]
    paragraph = next(p for p in (DOCS / page).read_text(encoding="utf-8").split("\n\n") if mark in p)
    refused, _, fine = paragraph.partition(allowed[language])
    return _listed(refused), _listed(fine)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_pages_list_exactly_what_a_persona_and_a_nickname_refuse(lang: str) -> None:
    from nonebot_plugin_marsho.agent.persona import (
        NICKNAME_FORBIDDEN,
        PERSONA_FORBIDDEN,
        NicknameError,
        PersonaError,
        check_nickname,
        check_persona,
    )

    def refuses(check: Any, error: type[Exception], c: str) -> bool:
        try:
            check(f"a{c}b")
        except error:
            return True
        return False

    single = {"zh": "单引号", "en": "Single quotes"}
    for page, mark, forbidden, check, error in (
            ("group.md", "300", PERSONA_FORBIDDEN, check_persona, PersonaError),
            ("talking.md", "MARSHO_NICKNAME_LIMIT", NICKNAME_FORBIDDEN, lambda t: check_nickname(t, 16), NicknameError)):
        refused, fine = _rule(f"{lang}/{page}", mark, single)
        # what the check really refuses (normalisation first: NFKC makes ″ two primes, kept as '')
        really = {c for c in forbidden if c.isprintable() and refuses(check, error, c)}
        assert really <= refused, f"{page}: refused but not listed: {sorted(really - refused)}"
        assert [c for c in refused if not refuses(check, error, c)] == [], f"{page}: listed but accepted"
        assert fine and [c for c in fine if refuses(check, error, c)] == [], f"{page}: said fine but refused"


_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef“”‘’…]")
_BLOCK_START = re.compile(r"^\s*([-*+] |\d+\. |\||#|!!!|\?\?\?|```|~~~|<|===|$)")


def soft_breaks(markdown: str) -> list[int]:
    """Lines (1-based) of prose that go on a paragraph between two Chinese characters: a browser
    shows such a line break as a stray space in the middle of a Chinese sentence."""
    found, fence, previous = [], False, ""
    for number, line in enumerate(markdown.split("\n"), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence, previous = not fence, ""
            continue
        tail = previous.rstrip()
        if (not fence and tail and not _BLOCK_START.match(line) and not previous.endswith("  ")
                and not tail.lstrip().startswith(("|", "#", "<")) and _CJK.match(tail[-1])
                and _CJK.match(line.lstrip()[0])):
            found.append(number)
        previous = "" if fence else line
    return found


@pytest.mark.parametrize("page", pages("zh"))
def test_chinese_prose_has_no_line_break_between_two_characters(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    assert soft_breaks(text) == [], f"docs/{page}: join these lines to the line above them"


_ASCII_QUOTE_BY_CJK = re.compile(r'[\u3400-\u9fff，。：；！？、]"|"[\u3400-\u9fff]')


def ascii_quotes(markdown: str) -> list[int]:
    """Lines (1-based) of Chinese prose quoting with ASCII quotes ("…") instead of “…”: code,
    inline code and admonition titles (whose syntax takes ASCII quotes) left out."""
    found, fence = [], False
    for number, line in enumerate(markdown.split("\n"), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence or line.lstrip().startswith(("!!!", "???", "===")):
            continue
        if _ASCII_QUOTE_BY_CJK.search(re.sub(r"`[^`]*`", "", line)):
            found.append(number)
    return found


@pytest.mark.parametrize("page", pages("zh"))
def test_chinese_prose_quotes_with_chinese_quotes(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    assert ascii_quotes(text) == [], f"docs/{page}: write “…” for these lines' \"…\""


def test_an_ascii_quote_in_chinese_prose_is_found() -> None:
    assert ascii_quotes('群管理员常会说"撤回那条"。\n\n```text\nmarsho "这里"\n```\n`"代码"`\n') == [1]
    assert ascii_quotes('!!! tip "连不上时"\n他说“好”。\n') == []


def test_a_line_break_inside_a_chinese_sentence_is_found() -> None:
    assert soft_breaks("先把接口\n设置好。\n\n- 列表\n- 第二项\n") == [2]
    assert soft_breaks("first line\nsecond line\n") == []
