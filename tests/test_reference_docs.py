"""The reference written from the code (scripts/gen_reference.py): every setting described in
both languages and in one section, and the committed files exactly what the code makes now."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

from nonebot_plugin_marsho.config import Config, FallbackEndpoint, Price
from scripts import gen_reference as gen

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "run python scripts/gen_reference.py and commit what it writes"


class WithNewSetting(Config):
    """Config with a setting added as a helper might, its Chinese description forgotten."""

    marsho_snooze_grace: float = Field(default=10800, ge=0)
    """Seconds a reminder may be late after the bot was down and still be sent."""


class WithDescribedSetting(Config):
    """Config with a setting added as the convention asks."""

    marsho_snooze_grace: float = Field(default=10800, ge=0)
    """Seconds a reminder may be late after the bot was down and still be sent.

    zh: 机器人停机期间错过的提醒，在这么多秒内仍会补发。"""


REMINDERS = gen.Section("Snoozes", "稍后提醒", ("marsho_snooze_grace",))


@pytest.mark.parametrize("model", [Config, FallbackEndpoint, Price])
def test_every_setting_has_an_english_and_a_chinese_description(model: type) -> None:
    for name, doc in gen.field_docs(model).items():
        assert doc.en, f"{model.__name__}.{name} has no English docstring"
        assert doc.zh, f"{model.__name__}.{name} has no 'zh: ' paragraph in its docstring"
        assert re.search(r"[\u4e00-\u9fff]", doc.zh), f"{model.__name__}.{name}'s zh: is not Chinese"


def test_every_setting_is_in_exactly_one_section() -> None:
    placed = [name for section in gen.SECTIONS for name in section.fields]
    assert sorted(placed) == sorted(Config.model_fields), "SECTIONS and Config's fields differ"
    assert gen.problems(Config) == []


def test_a_new_setting_without_chinese_is_named_and_stops_the_generator() -> None:
    found = gen.problems(WithNewSetting, [*gen.SECTIONS, REMINDERS])
    assert found == ["MARSHO_SNOOZE_GRACE has no Chinese description (a 'zh: ' paragraph in its docstring)"]
    with pytest.raises(ValueError, match="MARSHO_SNOOZE_GRACE has no Chinese description"):
        gen.settings(WithNewSetting, [*gen.SECTIONS, REMINDERS])


def test_a_described_setting_in_no_section_or_in_two_is_named() -> None:
    assert gen.problems(WithDescribedSetting, [*gen.SECTIONS, REMINDERS]) == []
    assert gen.problems(WithDescribedSetting) == [
        "MARSHO_SNOOZE_GRACE is in no section of scripts/gen_reference.py's SECTIONS"]
    twice = [*gen.SECTIONS, REMINDERS, gen.Section("Again", "再来", ("marsho_snooze_grace",))]
    assert gen.problems(WithDescribedSetting, twice) == [
        "MARSHO_SNOOZE_GRACE is in more than one section: Snoozes, Again"]
    gone = [*gen.SECTIONS, REMINDERS, gen.Section("Old", "旧", ("marsho_no_such_thing",))]
    assert gen.problems(WithDescribedSetting, gone) == ["MARSHO_NO_SUCH_THING in SECTIONS is no setting"]


def test_a_new_setting_in_its_section_reaches_env_example_and_both_pages() -> None:
    sections = [*gen.SECTIONS, REMINDERS]
    example = gen.env_example(WithDescribedSetting, sections)
    zh = gen.settings_page(WithDescribedSetting, "zh", sections)
    en = gen.settings_page(WithDescribedSetting, "en", sections)
    assert "# --- snoozes ---\n# Seconds a reminder may be late after the bot was down and still be sent. " \
           "Range: ≥0.\n# MARSHO_SNOOZE_GRACE=10800\n" in example
    assert "## 稍后提醒" in zh and "### MARSHO_SNOOZE_GRACE\n\n机器人停机期间错过的提醒，在这么多秒内仍会补发。" in zh
    assert "- 默认值：`10800`" in zh and "- 范围：≥ 0" in zh
    assert "## Snoozes" in en and "Seconds a reminder may be late" in en and "- Default: `10800`" in en


def test_a_docstring_is_read_as_english_example_and_chinese() -> None:
    doc = gen.parse_docstring('''Endpoints tried in order,
    JSON list.

    Example: [{"base_url": "http://127.0.0.1:11434/v1",
              "model": "qwen3:8b"}]

    zh: 依次尝试的备用
    接口，JSON 列表。''')
    assert doc.en == "Endpoints tried in order, JSON list."
    assert doc.zh == "依次尝试的备用接口，JSON 列表。"  # no space where a Chinese line was wrapped
    assert doc.example_value == '[{"base_url": "http://127.0.0.1:11434/v1", "model": "qwen3:8b"}]'


def test_every_example_is_a_value_the_setting_takes() -> None:
    for name, doc in gen.field_docs(Config).items():
        if not doc.example:
            continue
        written = doc.example_value
        try:
            value = json.loads(written)
        except ValueError:
            value = written  # as NoneBot reads it: JSON when it can be, else the text
        assert getattr(Config(**{name: value}), name) not in (None, "", [], {}), f"{name.upper()}={written}"


def test_every_setting_is_on_both_settings_pages_with_its_default() -> None:
    for lang in ("zh", "en"):
        page = (ROOT / "docs" / lang / "reference" / "settings.md").read_text(encoding="utf-8")
        for name in Config.model_fields:
            assert f"\n### {name.upper()}\n" in page, f"{name.upper()} is missing from docs/{lang}/reference/settings.md"
    assert "- Default: `https://api.openai.com/v1`" in page and "- Range: 0 – 64" in page


def test_every_command_is_on_both_commands_pages_with_its_help_line() -> None:
    from nonebot_plugin_marsho.chat.commands import REGISTRY
    from nonebot_plugin_marsho.i18n import CATALOGUES

    for lang, catalogue in (("zh", "zh-CN"), ("en", "en")):
        page = (ROOT / "docs" / lang / "reference" / "commands.md").read_text(encoding="utf-8")
        for command in REGISTRY.all():
            assert f"\n## marsho.{command.name}\n" in page
            assert CATALOGUES[catalogue][command.help_key].format(name="marsho") in page  # type: ignore[index]
    assert "| [marsho.status](#marshostatus) | superusers | any chat |" in page


def test_the_committed_files_are_what_the_generator_makes_now() -> None:
    files = gen.outputs(cli=False)
    stale = [str(path) for path in gen.drifted(files)]
    assert stale == [], f"out of date: {', '.join(stale)}; {REGENERATE}"


def test_the_cli_pages_are_the_clis_help_now() -> None:
    page = (ROOT / "docs" / "en" / "reference" / "cli.md").read_text(encoding="utf-8")
    written_by = re.search(r"<!-- argparse of Python (\d+\.\d+) -->", page)
    assert written_by, "docs/en/reference/cli.md does not say which Python wrote it"
    if written_by[1] != gen.python_version():
        pytest.skip(f"argparse lays out its help differently in Python {gen.python_version()} "
                    f"than in {written_by[1]}, which wrote the page")
    helps = gen.cli_helps()
    assert "usage: python -m nonebot_plugin_marsho call" in helps[("call",)]
    stale = [str(path) for path in gen.drifted({
        Path("docs") / lang / "reference" / "cli.md": gen.cli_page(lang, helps) for lang in ("zh", "en")})]
    assert stale == [], f"not the CLI's --help now: {', '.join(stale)}; {REGENERATE}"


def test_check_names_each_drifted_file_and_writing_fixes_it(tmp_path: Path, monkeypatch, capsys) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "kept.md").write_text("same\n", encoding="utf-8")
    (tmp_path / "docs" / "old.md").write_text("old\n", encoding="utf-8")
    files = {Path("docs/kept.md"): "same\n", Path("docs/old.md"): "new\n", Path("docs/en/new.md"): "made\n"}
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "outputs", lambda: files)
    monkeypatch.setattr(gen, "_quiet_nonebot", lambda: None)  # the test session keeps its log
    assert gen.main(["--check"]) == 1
    complaints = capsys.readouterr().err.splitlines()
    assert complaints == [f"{Path('docs/old.md')} is out of date: run python scripts/gen_reference.py",
                          f"{Path('docs/en/new.md')} is out of date: run python scripts/gen_reference.py"]
    assert (tmp_path / "docs" / "old.md").read_text(encoding="utf-8") == "old\n"  # --check writes nothing
    assert gen.main([]) == 0
    assert (tmp_path / "docs" / "old.md").read_text(encoding="utf-8") == "new\n"
    assert (tmp_path / "docs" / "en" / "new.md").read_text(encoding="utf-8") == "made\n"
    assert gen.main(["--check"]) == 0


def test_the_script_checks_the_repository_on_its_own(tmp_path: Path) -> None:
    """Run as the README says, in a clean environment (no MARSHO_*, no .env in its folder)."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_plugin_never_imports_the_generator() -> None:
    package = ROOT / "nonebot_plugin_marsho"
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(name.split(".")[0] == "scripts" for name in names), f"{path} imports scripts/"


def _commands_page(lang: str) -> str:
    return (ROOT / "docs" / lang / "reference" / "commands.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("lang", "catalogue"), [("zh", "zh-CN"), ("en", "en")])
def test_the_commands_pages_quote_the_help_as_the_bot_says_it(lang: str, catalogue: str) -> None:
    from nonebot_plugin_marsho.chat.render import usage_text
    from nonebot_plugin_marsho.i18n import Texts

    config = Config()  # the default settings: no @ line (MARSHO_AT), the list separator of the language
    header = usage_text(Texts(catalogue), config.trigger_names, config.marsho_at, ())  # type: ignore[arg-type]
    assert f"```text\n{header}\n```" in _commands_page(lang)
    assert Texts(catalogue)("usage.at") not in _commands_page(lang)  # type: ignore[arg-type]


@pytest.mark.parametrize(("lang", "admins", "superusers"), [
    ("zh", "群管理员、群主和超级用户", "超级用户"), ("en", "group admins and owners, and superusers", "superusers"),
])
def test_each_form_of_each_command_is_listed_with_who_may_use_it(lang: str, admins: str, superusers: str) -> None:
    page = _commands_page(lang)
    for form in ["`marsho.forget`", "`marsho.context on`", "`marsho.active keywords off`",
                 "`marsho.persona reset`", "`marsho.memory group forget "]:
        assert re.search(f"^- {re.escape(form)}.* — {admins}", page, re.MULTILINE), form
    for form in ["`marsho.memory of ", "`marsho.reminders all`", "`marsho.usage all`", "`marsho.quota user|group "]:
        assert re.search(f"^- {re.escape(form)}.* — {superusers}", page, re.MULTILINE), form
    assert f"| [marsho.forget](#marshoforget) | {admins} |" in page  # nobody else may use it
    # marsho.reset: everyone's own conversation, the admins' of a shared one
    assert len(re.findall(r"^- `marsho\.reset` — ", page, re.MULTILINE)) == 2


def test_every_form_says_what_it_does_in_both_languages() -> None:
    from nonebot_plugin_marsho.chat.commands import REGISTRY
    from nonebot_plugin_marsho.i18n import CATALOGUES

    for command in REGISTRY.all():
        assert command.forms, command.name
        for form in command.forms:
            for catalogue in CATALOGUES.values():
                assert catalogue.get(f"form.{command.name}.{form.key}"), (command.name, form.key)
