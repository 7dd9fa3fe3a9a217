"""Languages: every fixed reply in zh-CN (the default) and en, chosen by MARSHO_LANG.

The rest of the suite runs in English (tests/conftest.py sets marsho_lang="en"); the Chinese
tests here use a bot of their own with the `chinese` fixture (`configured(marsho_lang="zh-CN")`):
there is no global language, each bot has its texts (`Texts`).
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Iterator
from pathlib import Path

import pytest
from nonebug import App
from pydantic import ValidationError

from nonebot_plugin_marsho import i18n
from nonebot_plugin_marsho.agent.documents import CODES, KINDS
from nonebot_plugin_marsho.chat.commands import REGISTRY
from nonebot_plugin_marsho.chat.fairuse import seconds_text
from nonebot_plugin_marsho.chat.render import error_text, usage_text
from nonebot_plugin_marsho.config import Config, describe_validation_error
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.i18n import EN, ZH, Texts
from tests.conftest import SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, error
from tests.onebot import group_message, onebot_bot, private_message, reply_call

PACKAGE = Path(__file__).resolve().parent.parent / "nonebot_plugin_marsho"

CALL = r"""(?<!def )(?<!class )(?:\b(?:t|texts|self|ServerStatus|SettingError|plural)\(\s*|\btext\(\s*(?:[\w.]+|"[^"]*")\s*,\s*|\b(?:code|hint)=)"""
"""Where a key is named: a call of the texts, whatever holds them (`t = app.texts` then
`t("key")`; `app.texts("key")`, `delivery.texts(...)`; `self("key")` in Texts itself; a count's
`t.plural("key", n)`), the key after the language in `text(language, "key")`, an MCP server's
`ServerStatus("key")`, a refused setting's `SettingError("key")`, or an error's `code=`/`hint=`."""
LITERAL_CALL = re.compile(CALL + r"""(["'])([^"'\\]+)\1\s*[,)]""")
"""`t("key")`, `app.texts('key', name=...)`, `MarshoError(code="key", hint="key")`: a key spelled out."""
ANY_CALL = re.compile(CALL + r"""([^,)]+)""")
"""Any such call or error code, with (the start of) its key argument."""

COMMANDS = ("reset", "tools", "calls", "history", "nickname", "context", "forget", "persona", "active", "help",
            "usage", "model", "export", "status", "quota", "memory", "actions", "reminders", "kb", "resume")
DYNAMIC_KEYS: dict[str, list[str]] = {
    # the first argument as written -> every key it can name
    'f"usage.{command}"': [f"usage.{c}" for c in COMMANDS],
    'f"endpoint.{status}"': [f"endpoint.{s}" for s in (401, 403, 404, 429)],
    'f"endpoint.{status}.hint"': [f"endpoint.{s}.hint" for s in (401, 403, 404, 429)],
    'f"media.{result.kind}"': [f"media.{k}" for k in (
        "too_large", "timeout", "not_image", "http", "blocked", "network", "bad_url")],
    'f"bill.{name}"': ["bill.today", "bill.week", "bill.month"],
    'f"actions.tool_{action}"': [f"actions.tool_{a}" for a in ("mute", "unmute", "kick", "recall")],
    'f"quota.used_up_{over.scope}"': ["quota.used_up_user", "quota.used_up_group", "quota.used_up_all"],
    'f"quota.set_{scope}"': ["quota.set_user", "quota.set_group"],
    'f"quota.changed_{scope}"': ["quota.changed_user", "quota.changed_group"],
    'f"quota.default_{scope}"': ["quota.default_user", "quota.default_group"],
    "'tools.' + tool.permission": ["tools.admin", "tools.superuser"],
    'f"mcp.{self.state}"': [f"mcp.{state}" for state in (
        "idle", "connecting", "connected", "retrying", "disabled", "stopped")],
    '"mcp.disabled" if config.disabled else "mcp.idle"': ["mcp.disabled", "mcp.idle"],
    # chat/render.brief_text(t, reason): what members are told instead of a failure's detail
    "reason": [f"brief.{k}" for k in (
        "key", "busy", "timeout", "down", "failed", "unusable", "refused", "too_large", "database", "config",
        "toolkits", "budget", "internal")],
    # chat/commands/registry.py Command.refused: a form's own refusal, else the common one
    "form.refusal or common": sorted({form.refusal for command in REGISTRY.all() for form in command.forms
                                      if form.refusal} | {"command.superusers", "command.admins"}),
    # scripts/gen_reference.py: what each form does, on the commands pages
    'f"form.{command.name}.{form.key}"': [f"form.{command.name}.{form.key}" for command in REGISTRY.all()
                                          for form in command.forms],
    # chat/shared_files.py: a file not had or not read, added to the knowledge base or read for a question
    'f"{purpose}.too_large"': ["kb.too_large", "file.too_large"],
    'f"{purpose}.too_large_unknown"': ["kb.too_large_unknown", "file.too_large_unknown"],
    'f"{purpose}.no_url"': ["kb.no_url", "file.no_url"],
    'f"{purpose}.download_failed"': ["kb.download_failed", "file.download_failed"],
    'f"{purpose}.error.{code}"': [f"{purpose}.error.{code}" for purpose in ("kb", "file") for code in CODES],
    # agent/asked_files.py: a file's kind
    'f"file.kind.{extracted.kind}"': [f"file.kind.{kind}" for kind in KINDS],
}


def without_docstrings(source: str) -> str:
    """The source with each docstring's lines blanked: their `t("key", ...)` are examples."""
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for number in range(first.lineno - 1, first.end_lineno or first.lineno):
                    lines[number] = ""
    return "\n".join(lines)


def _sources() -> dict[str, str]:
    """Every module's source, without its docstrings."""
    return {str(path.relative_to(PACKAGE)): without_docstrings(path.read_text(encoding="utf-8"))
            for path in sorted(PACKAGE.rglob("*.py"))}


def literal_keys() -> dict[str, set[str]]:
    """Each key spelled out in a `t(...)` call, with the files that use it."""
    used: dict[str, set[str]] = {}
    for name, source in _sources().items():
        for match in LITERAL_CALL.finditer(source):
            used.setdefault(match.group(2), set()).add(name)
    return used


def dynamic_calls() -> dict[str, set[str]]:
    """The first argument of each `t(...)` call whose key is computed, with its files."""
    found: dict[str, set[str]] = {}
    for name, source in _sources().items():
        for match in ANY_CALL.finditer(source):
            argument = match.group(1).strip()
            # exceptions.py passes its own `code=code, hint=hint` on (and formats `code` and
            # `self.hint`), Texts formats any `key`; render.py's error_text translates any
            # error's code, each of which this scan finds where it is raised (config.py's
            # `error.key`: a SettingError's, found where it is raised)
            passed_on = ("code", "hint", "self.hint", "key", "error.code", "error.hint", "error.key")
            if not re.fullmatch(r"""(["'])[^"'\\]+\1""", argument) and argument not in passed_on:
                found.setdefault(argument, set()).add(name)
    return found


def placeholders(text: str) -> set[tuple[str, str | None, str | None]]:
    return {(field, conversion, spec) for _, field, spec, conversion in string.Formatter().parse(text)
            if field is not None}


@pytest.fixture
def chinese() -> Iterator[None]:
    """Handlers use a bot speaking zh-CN for this test; the suite's English one afterwards."""
    with configured(marsho_lang="zh-CN"):
        yield


# the catalogues


def test_both_catalogues_hold_the_same_keys() -> None:
    assert sorted(set(EN) - set(ZH)) == [], "missing from ZH"
    assert sorted(set(ZH) - set(EN)) == [], "missing from EN"
    assert set(i18n.CATALOGUES) == set(i18n.LANGUAGES) == {"zh-CN", "en"}


@pytest.mark.parametrize("key", sorted(EN))
def test_each_text_has_the_same_placeholders_in_both_languages(key: str) -> None:
    assert placeholders(EN[key]) == placeholders(ZH[key])


@pytest.mark.parametrize("catalogue", [EN, ZH], ids=["en", "zh-CN"])
def test_no_text_is_empty_or_escapes_braces(catalogue: dict[str, str]) -> None:
    assert [key for key, value in catalogue.items() if not value.strip()] == []
    # t() formats only when given parameters, so an escaped {{ would show doubled in some texts
    assert [key for key, value in catalogue.items() if "{{" in value or "}}" in value] == []


def test_seven_weekdays_monday_first() -> None:
    assert len(EN["weekday"].split("|")) == len(ZH["weekday"].split("|")) == 7
    assert all(day.strip() for day in EN["weekday"].split("|") + ZH["weekday"].split("|"))
    assert Texts("en").weekday(0) == "Monday" and Texts("en").weekday(6) == "Sunday"


def test_weekday_in_chinese() -> None:
    assert Texts("zh-CN").weekday(0) == "星期一" and Texts("zh-CN").weekday(6) == "星期日"


# the code against the catalogues


def test_the_scan_finds_the_calls() -> None:
    """The regexes still match the code (a silent scan would make the next tests vacuous)."""
    used = literal_keys()
    assert len(used) > 50
    assert "chat/render.py" in used["reply.empty"] and "chat/fairuse.py" in used["seconds"]
    assert "chat/render.py" in used["count.messages"]  # t.plural("...", n)
    assert "chat/matchers.py" in used["config.broken"]  # t = app.texts, then t("...")
    assert "chat/outgoing.py" in used["reply.reasoning_title"]  # delivery.texts('...') in an f-string
    assert "chat/poke.py" in used["poke.someone"]  # app.texts("...")
    assert "chat/app.py" in used["problem.starting"]  # self.texts("...")
    assert "config.py" in used["config.invalid"]  # i18n.text(language, "...")
    assert "agent/model/retry.py" in used["endpoint.no_key.hint"]  # hint="..."
    assert "agent/persona.py" in used["nickname.too_long"]  # NicknameError(code="...")
    assert "tools/mcp.py" in used["mcp.connected"]  # ServerStatus("...")
    assert "i18n.py" in used["weekday"] and "i18n.py" in used["list.separator"]  # self("...")
    assert "key" not in used  # i18n.py's docstrings' examples are skipped
    assert "exceptions.py" not in used["store.read"]  # and so is exceptions.py's


def test_every_literal_key_used_in_the_code_exists() -> None:
    missing = {key: sorted(files) for key, files in literal_keys().items() if key not in EN}
    assert missing == {}


def test_every_computed_key_is_known_and_exists() -> None:
    unknown = {arg: sorted(files) for arg, files in dynamic_calls().items() if arg not in DYNAMIC_KEYS}
    assert unknown == {}, "a texts call computes its key: add its expansions to DYNAMIC_KEYS"
    missing = [key for keys in DYNAMIC_KEYS.values() for key in keys if key not in EN]
    assert missing == []


def test_the_known_expansions_match_the_code() -> None:
    """DYNAMIC_KEYS follows the values the code can produce."""
    from nonebot_plugin_marsho.chat import matchers as matcher_module
    from nonebot_plugin_marsho.chat.media import KINDS
    from nonebot_plugin_marsho.tools.model import PERMISSIONS

    assert set(COMMANDS) == set(matcher_module.COMMANDS)
    assert {f"media.{k}" for k in KINDS} == set(DYNAMIC_KEYS['f"media.{result.kind}"'])
    assert {f"tools.{p}" for p in PERMISSIONS if p != "everyone"} == set(
        DYNAMIC_KEYS["'tools.' + tool.permission"])
    mcp = (PACKAGE / "tools" / "mcp.py").read_text(encoding="utf-8")
    [literal] = re.findall(r"self\.state: Literal\[([^]]+)\]", mcp)  # every state a server has
    states = set(re.findall(r'"([a-z]+)"', literal))
    assert {f"mcp.{state}" for state in states} == set(DYNAMIC_KEYS['f"mcp.{self.state}"'])


KNOWN_UNUSED: set[str] = set()
"""Keys no code uses yet, kept on purpose (a title for the answer's forward message)."""


def test_no_catalogue_key_is_unused() -> None:
    used = set(literal_keys()) | {key for keys in DYNAMIC_KEYS.values() for key in keys}
    assert sorted(set(EN) - used - KNOWN_UNUSED) == []
    assert sorted(KNOWN_UNUSED & used) == [], "now used: take it out of KNOWN_UNUSED"
    assert KNOWN_UNUSED <= set(EN)


# MARSHO_LANG


def test_chinese_is_the_default() -> None:
    assert Config().marsho_lang == "zh-CN"


@pytest.mark.parametrize(
    ("value", "language"),
    [("zh_CN", "zh-CN"), ("zh", "zh-CN"), ("ZH-hans", "zh-CN"), (" zh-cn ", "zh-CN"),
     ("zh-CN", "zh-CN"), ("en-US", "en"), ("english", "en"), ("EN", "en"), ("en_GB", "en")],
)
def test_language_aliases_are_read(value: str, language: str) -> None:
    assert Config.model_validate({"marsho_lang": value}).marsho_lang == language


@pytest.mark.parametrize("value", ["fr", "", "zh-TW-ish", 1])
def test_an_unknown_language_names_marsho_lang(value: object) -> None:
    with pytest.raises(ValidationError) as caught:
        Config.model_validate({"marsho_lang": value})
    assert "MARSHO_LANG=" in describe_validation_error(caught.value)


def test_texts_refuse_unknown_languages() -> None:
    with pytest.raises(ValueError, match="fr"):
        Texts("fr")  # type: ignore[arg-type]


def test_reading_the_config_gives_its_language() -> None:
    from nonebot_plugin_marsho.config import read_config

    config, problem, notes = read_config()  # conftest's settings: marsho_lang="en"
    assert (config.marsho_lang, problem, notes) == ("en", "", [])


def test_a_bad_setting_is_reported_in_the_language_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot import get_driver

    from nonebot_plugin_marsho.config import read_config

    monkeypatch.setattr(get_driver().config, "marsho_timeout", "soon")  # marsho_lang is still "en"
    config, problem, _ = read_config()
    assert config == Config()  # the defaults, and what to fix
    assert problem.startswith("invalid settings in .env: ") and "MARSHO_TIMEOUT='soon'" in problem
    monkeypatch.setattr(get_driver().config, "marsho_lang", "zh_CN")
    _, problem, _ = read_config()
    assert problem.startswith(".env 中的设置无效：") and "MARSHO_TIMEOUT='soon'" in problem


def test_a_chinese_hint_follows_its_message_without_a_space() -> None:
    failure = EndpointError(code="endpoint.429", hint="endpoint.429.hint", detail="x")
    assert error_text(Texts("zh-CN"), failure) == "接口正在限流（429：x）。请稍后再试。"
    assert error_text(Texts("en"), failure) == (
        "The endpoint is rate-limiting us (429: x). Try again in a moment.")


def test_an_error_is_logged_in_english_whatever_the_chat_language(chinese: None) -> None:
    failure = EndpointError(code="endpoint.429", hint="endpoint.429.hint", detail="x")
    assert str(failure) == "The endpoint is rate-limiting us (429: x). Try again in a moment."
    assert failure.code == "endpoint.429" and failure.params == {"detail": "x"}


# Texts


def test_texts_follow_the_language() -> None:
    zh, en = Texts("zh-CN"), Texts("en")
    assert zh("reset.empty") == "这段对话本来就是空的。"
    assert zh("reset.done", turns_text=zh.plural("count.turns", 3)) == "好了：我忘掉了这段对话（3 轮）。"
    assert seconds_text(zh, 12.1) == "13 秒" and seconds_text(zh, 0.2) == "1 秒"
    assert en("reset.empty") == "This conversation was already empty."
    assert seconds_text(en, 12.1) == "13 s"
    assert zh.join(["a", "b"]) == "a、b" and en.join(["a", "b"]) == "a, b"
    assert Texts().language == "zh-CN"  # the default, as MARSHO_LANG's


def test_a_key_missing_from_chinese_falls_back_to_english(monkeypatch: pytest.MonkeyPatch) -> None:
    zh = Texts("zh-CN")
    monkeypatch.delitem(ZH, "reset.done")
    assert zh("reset.done", turns_text="2 turns") == "Done: I forgot this conversation (2 turns)."
    assert zh("reset.empty") == "这段对话本来就是空的。"
    with pytest.raises(KeyError):
        zh("no.such.key")


# end to end, in Chinese


async def test_the_name_alone_answers_with_chinese_usage(
    app: App, fake: FakeOpenAI, marsho, chinese: None
) -> None:
    usage = usage_text(Texts("zh-CN"), marsho.config.trigger_names, marsho.config.marsho_at)
    assert usage.startswith("有问题就问我：marsho <问题>")
    assert "marsho.reset  忘掉这段对话" in usage
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, usage), result={"message_id": 1})
    assert fake.requests == []


async def test_resetting_an_empty_private_chat_in_chinese(
    app: App, fake: FakeOpenAI, plugin_engine, chinese: None
) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = private_message("marsho.reset")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "这段对话本来就是空的。"), result={"message_id": 1})
    assert fake.requests == []


async def test_an_endpoint_error_is_explained_in_chinese(
    app: App, fake: FakeOpenAI, plugin_engine, chinese: None
) -> None:
    fake.push(error(429, "slow down"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho 你好")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "抱歉，没能回答：模型服务正忙，请稍后再试。详细信息在机器人主人的日志里。"),
                            result={"message_id": 1})
    assert len(fake.requests) == 1


async def test_the_owner_gets_the_endpoints_words_in_chinese(
    app: App, fake: FakeOpenAI, plugin_engine, chinese: None
) -> None:
    fake.push(error(429, "slow down"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho 你好", user_id=int(SUPERUSER_ID))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "抱歉，没能得到回答：接口正在限流（429：slow down）。请稍后再试。"),
                            result={"message_id": 1})


async def test_english_is_back_after_the_chinese_tests(
    app: App, fake: FakeOpenAI, plugin_engine, marsho
) -> None:
    assert marsho.config.marsho_lang == marsho.texts.language == "en"
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = private_message("marsho.reset")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "This conversation was already empty."),
                            result={"message_id": 1})
    assert usage_text(marsho.texts, ["marsho"], False).startswith("Ask me anything: marsho <question>")


# the built-in tools in Chinese (marsho.tools); the model reads them in English


CJK = re.compile(r"[\u3400-\u9fff]")


def every_built_in_tool(marsho) -> list:
    """Every tool of every built-in toolkit: the folders' (all enabled), memory, group, reminders."""
    from nonebot_plugin_marsho.__main__ import _with_builtins
    from nonebot_plugin_marsho.tools import BUILTIN_TOOLSET, load_toolset
    from nonebot_plugin_marsho.tools.loader import ToolsetSource

    folders = sorted(path.name for path in BUILTIN_TOOLSET.iterdir() if (path / "__init__.py").is_file())
    with configured(marsho_group_actions=True, marsho_group_actions_kick=True) as app:
        toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], (), enabled=folders)
        _with_builtins(app, toolset)
    return [tool for toolkit in toolset.toolkits for tool in toolkit.tools]


def test_every_built_in_tool_has_its_line_in_chinese(marsho) -> None:
    tools = every_built_in_tool(marsho)
    assert len(tools) >= 30
    untranslated = [tool.name for tool in tools if not CJK.search(tool.summary_in("zh-CN"))]
    assert untranslated == [], "add the first line of each one's description to i18n.TOOL_SUMMARIES"
    assert all(tool.summary_in("en") == tool.summary for tool in tools)
    stale = set(i18n.TOOL_SUMMARIES["zh-CN"]) - {tool.summary for tool in tools}
    assert stale == set(), "no built-in tool's description starts so any more"


def test_a_listing_in_chinese_leaves_what_the_model_reads_alone(marsho, plugin_engine) -> None:
    toolset = plugin_engine.toolset
    before = toolset.schemas()
    listed = toolset.listed_in("zh-CN")
    roll = listed.tools["dice__roll"]
    assert roll.summary == "按骰子记法掷骰子，列出每颗骰子的点数和总数。"
    assert toolset.schemas() == before
    assert toolset.tools["dice__roll"].summary.startswith("Roll dice")


async def test_marsho_tools_lists_the_built_in_tools_in_chinese(app: App, plugin_engine, chinese: None) -> None:
    from nonebot_plugin_marsho.chat.app import running
    from nonebot_plugin_marsho.chat.render import tools_text
    from tests.test_persona import exchange

    mcp = running.get().mcp
    listing = tools_text(Texts("zh-CN"), plugin_engine.toolset.listed_in("zh-CN"),
                         mcp.status() if mcp else None, owner=False)
    assert "  - dice__roll: 按骰子记法掷骰子，列出每颗骰子的点数和总数。" in listing.split("\n")
    await exchange(app, (private_message("marsho.tools"), listing))


# Chinese texts: no English sentence, no ASCII comma inside them


CJK_COMMA = re.compile(r"[\u3400-\u9fff\uff00-\uffef\u3000-\u303f][,;] *[\u3400-\u9fff]")
"""An ASCII comma or semicolon between Chinese characters: Chinese takes `，` and `；`."""


def test_no_chinese_text_has_an_ascii_comma_between_chinese_characters() -> None:
    assert CJK_COMMA.search("次请求, 每") is not None  # what it catches
    found = {key: value for key, value in ZH.items() if CJK_COMMA.search(value)}
    found |= {english: line for english, line in i18n.TOOL_SUMMARIES["zh-CN"].items() if CJK_COMMA.search(line)}
    assert found == {}


@pytest.mark.parametrize(("settings", "english", "chinese"), [
    ({"marsho_base_url": "https://api.example.com/v1/chat/completions"}, "give the base URL without",
     "请填写不带 /chat/completions 的基础网址"),
    ({"marsho_timezone": "Mars/Base"}, "is not an IANA time zone", "不是 IANA 时区名"),
    ({"marsho_timeout": "soon"}, "Input should be a valid number", "应为数字"),
    ({"marsho_session_scope": "x"}, "Input should be 'group', 'user_in_group' or 'user'",
     "应为以下之一：'group'、'user_in_group'、'user'"),
    ({"marsho_max_images": 16, "marsho_history_tokens": 1000}, "lower the one or raise the other",
     "请调低前者或调高后者"),
])
def test_a_bad_setting_is_described_in_the_chats_language(settings: dict, english: str, chinese: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Config.model_validate(settings)
    assert english in describe_validation_error(caught.value, "en")
    said = describe_validation_error(caught.value, "zh-CN")
    assert chinese in said and english not in said
    assert not re.search(r"[A-Za-z]+ [a-z]+ [a-z]+", re.sub(r"'[^']*'|https?://\S+|MARSHO_\w+", "", said)), said
