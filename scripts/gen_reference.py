"""Writes the reference that must not drift from the code: `.env.example` and the docs' settings
pages from `Config` (each field's docstring, default, type, range and choices), the commands
pages from the command registry and the i18n catalogues, and the CLI pages from its `--help`.

    .venv/bin/python scripts/gen_reference.py           # write every file
    .venv/bin/python scripts/gen_reference.py --check   # exit 1 naming each file that differs

A field's docstring is its English description; after a blank line, an optional `Example: `
paragraph (a value as it is written in `.env`, its lines kept in `.env.example`) and its Chinese
description, a paragraph starting `zh: `. Each field belongs to exactly one of SECTIONS.

Only this script and the tests import it: the plugin never does.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

ROOT = Path(__file__).resolve().parent.parent
Lang = Literal["en", "zh"]


class Section(NamedTuple):
    """A group of settings: its title in English and in Chinese, and its fields in order."""

    en: str
    zh: str
    fields: tuple[str, ...]


SECTIONS: list[Section] = [
    Section("The LLM endpoint (any OpenAI-compatible one)", "模型接口（任何兼容 OpenAI 的接口）", (
        "marsho_base_url", "marsho_api_key", "marsho_model", "marsho_timeout", "marsho_max_response_bytes",
        "marsho_max_answer_chars", "marsho_max_concurrent_requests", "marsho_stream",
        "marsho_reasoning_effort",
    )),
    Section("When the provider fails", "接口出错时", (
        "marsho_retries", "marsho_retry_budget", "marsho_retry_after_max", "marsho_api_keys",
        "marsho_fallbacks", "marsho_model_quirks",
    )),
    Section("How people talk to it", "怎样和它说话", (
        "marsho_name", "marsho_aliases", "marsho_at", "marsho_lang", "marsho_nickname_limit", "marsho_poke",
        "marsho_poke_cooldown", "marsho_debounce_seconds",
    )),
    Section("Persona and time", "人设与时间", (
        "marsho_system_prompt", "marsho_additional_prompt", "marsho_time_prompt", "marsho_timezone",
        "marsho_praises_file",
    )),
    Section("Pictures", "图片", (
        "marsho_vision_models", "marsho_max_images", "marsho_image_max_bytes", "marsho_image_timeout",
        "marsho_image_allow_private",
    )),
    Section("How answers are sent", "回答的发送方式", (
        "marsho_long_answer", "marsho_split_chars", "marsho_max_split_messages", "marsho_max_forward_nodes",
        "marsho_send_reasoning", "marsho_tool_progress", "marsho_render_latex", "marsho_render_inline_latex",
        "marsho_render_markdown_images", "marsho_segmented_reply", "marsho_segments",
        "marsho_typing_indicator",
    )),
    Section("History and summaries", "历史记录与摘要", (
        "marsho_max_history", "marsho_history_tokens", "marsho_session_scope", "marsho_summary",
        "marsho_summary_model", "marsho_summary_tokens", "marsho_database_url",
    )),
    Section("Long-term memory", "长期记忆", (
        "marsho_memory", "marsho_memory_scope", "marsho_memory_per_user", "marsho_memory_per_group",
        "marsho_memory_per_member", "marsho_memory_chars", "marsho_memory_recall", "marsho_memory_days",
    )),
    Section("A group's recent chat and persona", "群聊上下文与群人设", (
        "marsho_group_context_default", "marsho_group_context", "marsho_group_context_ttl",
        "marsho_group_persona",
    )),
    Section("Replies without being called", "主动插话", (
        "marsho_active_default", "marsho_active_max", "marsho_active_judge_model", "marsho_active_cooldown",
        "marsho_active_per_hour", "marsho_active_quiet_hours", "marsho_ignored_users",
    )),
    Section("Fair use and who is answered (superusers are exempt)",
            "频率限制与回答范围（超级用户不受限制）", (
        "marsho_user_rate_limit", "marsho_group_rate_limit", "marsho_rate_window", "marsho_user_queue",
        "marsho_allowed_groups", "marsho_denied_groups", "marsho_allowed_users", "marsho_denied_users",
    )),
    Section("Other bots and loops", "其他机器人与循环", (
        "marsho_bot_detection", "marsho_chat_answers_per_minute", "marsho_chat_pause_seconds",
    )),
    Section("The bill: usage and quotas (superusers are exempt from quotas)",
            "账单：用量与配额（超级用户不受配额限制）", (
        "marsho_user_daily_tokens", "marsho_group_daily_tokens", "marsho_daily_tokens",
        "marsho_quota_fallback_model", "marsho_usage_retention_days", "marsho_prices",
    )),
    Section("Tools", "工具", (
        "marsho_toolkit_dirs", "marsho_disabled_toolkits", "marsho_enabled_toolkits", "marsho_disabled_tools",
        "marsho_toolkit_settings", "marsho_tool_permissions", "marsho_webservices_file", "marsho_mcp_file",
        "marsho_tool_mode", "marsho_tool_mode_by_model", "marsho_max_tool_rounds", "marsho_tool_timeout",
        "marsho_max_parallel_tools", "marsho_max_tool_result_bytes", "marsho_max_tool_calls",
        "marsho_calls_chars",
    )),
    Section("Group actions: mute, unmute, kick, recall", "群管理：禁言、解禁、踢人、撤回", (
        "marsho_group_actions", "marsho_group_actions_kick", "marsho_group_actions_per_hour",
    )),
    Section("Reminders and scheduled questions", "提醒与定时提问", (
        "marsho_reminder_min_interval", "marsho_reminder_grace", "marsho_reminders_per_user",
        "marsho_reminders_per_group",
    )),
    Section("Documents and the knowledge base", "文档与资料库", (
        "marsho_kb", "marsho_file_max_bytes", "marsho_file_max_pages", "marsho_file_timeout",
        "marsho_kb_max_documents", "marsho_kb_max_passages", "marsho_kb_passage_chars", "marsho_kb_recall",
        "marsho_embedding_model",
    )),
]
"""The settings' groups, in the order of .env.example and the settings pages. A new setting goes
into one of them (its field name in `fields`), or into a new Section of its own."""

LONG_DEFAULT = 100
"""A default longer than this (written as in .env) is not put on .env.example's line: its
Example is, and the description says what the default holds."""


# --- reading the docstrings -------------------------------------------------------------------

def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def join_lines(lines: Sequence[str]) -> str:
    """A paragraph's lines as one line: a space between them, none between two Chinese
    characters (a line of Chinese is wrapped anywhere)."""
    text = ""
    for line in (line.strip() for line in lines):
        if text and line:
            text += "" if _wide(text[-1]) and _wide(line[0]) else " "
        text += line
    return text


@dataclass(frozen=True)
class FieldDoc:
    """A field's docstring, read apart: its English and Chinese descriptions, and its example."""

    en: str = ""
    zh: str = ""
    example: tuple[str, ...] = ()
    """The example's lines as written; `example_value` gives the one-line value."""

    @property
    def example_value(self) -> str:
        """The example on one line, as `.env` takes it (JSON written compactly)."""
        text = join_lines(self.example)
        try:
            return json.dumps(json.loads(text), ensure_ascii=False)
        except ValueError:
            return text


def parse_docstring(text: str) -> FieldDoc:
    """English paragraphs, then an optional `Example: ` paragraph, then `zh: ` and the rest."""
    en: list[str] = []
    zh: list[str] = []
    example: tuple[str, ...] = ()
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines = paragraph.split("\n")
        if zh or paragraph.startswith("zh:"):
            zh.append(join_lines([lines[0].removeprefix("zh:"), *lines[1:]]))
        elif paragraph.startswith("Example:"):
            example = (lines[0].removeprefix("Example:").strip(), *lines[1:])
        else:
            en.append(join_lines(lines))
    return FieldDoc(" ".join(en), "".join(zh), example)


def _class_docs(cls: type) -> dict[str, FieldDoc]:
    """The docstring under each annotated name of one class's own body."""
    node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(node, ast.ClassDef)
    docs = {}
    for statement, after in zip(node.body, [*node.body[1:], None], strict=True):
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            text = ""
            if (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                text = after.value.value
            docs[statement.target.id] = parse_docstring(text)
    return docs


def field_docs(model: type[BaseModel]) -> dict[str, FieldDoc]:
    """Every field's docstring, from the source of `model` and of the models it derives from."""
    docs: dict[str, FieldDoc] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            docs.update(_class_docs(cls))
    return {name: docs.get(name, FieldDoc()) for name in model.model_fields}


# --- what a field is --------------------------------------------------------------------------

def _no_none(annotation: Any) -> tuple[Any, bool]:
    """The annotation without `None`, and whether it allowed None."""
    if get_origin(annotation) in (Union, UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        rest = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007
        return rest, len(args) < len(get_args(annotation))
    return annotation, False


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The models a setting's value holds (a list's items, a dict's values)."""
    annotation, _ = _no_none(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in nested_models(arg)]


def choices(annotation: Any) -> list[Any]:
    """The values a Literal (or a list's items, a dict's values) may take."""
    annotation, _ = _no_none(annotation)
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    origin = get_origin(annotation)
    if origin in (list, dict):
        return choices(get_args(annotation)[-1])
    return []


_KINDS: dict[Any, dict[str, str]] = {
    str: {"en": "text", "zh": "文本"},
    int: {"en": "integer", "zh": "整数"},
    float: {"en": "number", "zh": "数字"},
    bool: {"en": "true / false", "zh": "true / false"},
    Path: {"en": "file path", "zh": "文件路径"},
    Literal: {"en": "one of the choices", "zh": "以下选项之一"},
    BaseModel: {"en": "object", "zh": "对象"},
}


def _kind(annotation: Any) -> Any:
    """The key of _KINDS for an annotation that is no list or dict (None: none fits)."""
    if get_origin(annotation) is Literal:
        return Literal
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return BaseModel
    return annotation if annotation in _KINDS else None


def type_label(annotation: Any, lang: Lang) -> str:
    """What kind of value a setting takes, for a bot owner: `integer`, `JSON list (each: text)`..."""
    annotation, _ = _no_none(annotation)
    kind = _kind(annotation)
    if kind is not None:
        return _KINDS[kind][lang]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin not in (list, dict):
        return {"en": "value", "zh": "值"}[lang]
    name = {"en": "JSON list" if origin is list else "JSON object",
            "zh": "JSON 列表" if origin is list else "JSON 对象"}[lang]
    inner = _kind(_no_none(args[-1])[0])
    if inner is None:
        return name
    each = _KINDS[inner][lang]
    if lang == "en":
        return f"{name} (each {'item' if origin is list else 'value'}: {each})"
    return f"{name}（每{'项' if origin is list else '个值'}为{each}）"


def bounds(field: FieldInfo) -> str:
    """The range Field's constraints allow: `1 – 64`, `≥ 0`, `> 0`, `at most 8 characters`."""
    low = high = ""
    length = ""
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            low = f"≥ {item.ge:g}"
        elif isinstance(item, annotated_types.Gt):
            low = f"> {item.gt:g}"
        elif isinstance(item, annotated_types.Le):
            high = f"≤ {item.le:g}"
        elif isinstance(item, annotated_types.Lt):
            high = f"< {item.lt:g}"
        elif isinstance(item, annotated_types.MaxLen):
            length = f"≤ {item.max_length}"
    if low.startswith("≥") and high.startswith("≤"):
        return f"{low[2:]} – {high[2:]}"
    return ", ".join(filter(None, [low, high, length]))


def default_of(field: FieldInfo) -> Any:
    """The field's default value (PydanticUndefined when it must be given)."""
    return field.get_default(call_default_factory=True)


def env_value(value: Any) -> str:
    """A value as it is written in `.env`: JSON for lists and objects, `true`/`false`, numbers
    without a needless `.0`, text as it is; None (unset) as nothing."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return str(value)
    return json.dumps(to_jsonable_python(value, exclude_none=True), ensure_ascii=False)


@dataclass(frozen=True)
class Setting:
    """One field of Config as the reference shows it."""

    name: str
    field: FieldInfo
    doc: FieldDoc

    @property
    def env(self) -> str:
        return self.name.upper()

    @property
    def default(self) -> str:
        return env_value(default_of(self.field))

    @property
    def line_value(self) -> str:
        """What .env.example's commented line shows: the default, or the example for a long one."""
        return self.doc.example_value if len(self.default) > LONG_DEFAULT else self.default


# --- checks -----------------------------------------------------------------------------------

def problems(model: type[BaseModel], sections: Sequence[Section] | None = None) -> list[str]:
    """What keeps the reference from being written: a field without its English or Chinese
    description, in no section or in two, a section naming no field, a long default with no
    example, a documented nested model with an undocumented field."""
    found = []
    docs = field_docs(model)
    placed: dict[str, list[str]] = {}
    for section in SECTIONS if sections is None else sections:
        for name in section.fields:
            placed.setdefault(name, []).append(section.en)
    for name, field in model.model_fields.items():
        env = name.upper()
        found += [f"{env} has no English description (its docstring)"] * (not docs[name].en)
        found += [f"{env} has no Chinese description (a 'zh: ' paragraph in its docstring)"] * (
            not docs[name].zh)
        if name not in placed:
            found.append(f"{env} is in no section of scripts/gen_reference.py's SECTIONS")
        elif len(placed[name]) > 1:
            found.append(f"{env} is in more than one section: {', '.join(placed[name])}")
        if len(env_value(default_of(field))) > LONG_DEFAULT and not docs[name].example:
            found.append(f"{env}'s default is too long for .env.example's line: give it an 'Example: '")
        found += [f"{env}'s {nested.__name__}.{problem}" for nested in _own_models(model, field)
                  for problem in _nested_problems(nested)]
    found += [f"{name.upper()} in SECTIONS is no setting"
              for name in placed if name not in model.model_fields]
    return found


def _own_models(model: type[BaseModel], field: FieldInfo) -> list[type[BaseModel]]:
    """The nested models of a field that are defined beside `model` (whose docs we keep)."""
    return [nested for nested in nested_models(field.annotation) if nested.__module__ == model.__module__]


def _nested_problems(nested: type[BaseModel]) -> list[str]:
    docs = field_docs(nested)
    return [f"{name} has no {'English' if not doc.en else 'Chinese'} description"
            for name, doc in docs.items() if not doc.en or not doc.zh]


def settings(model: type[BaseModel],
             sections: Sequence[Section] | None = None) -> list[tuple[Section, list[Setting]]]:
    """Each section (of SECTIONS unless given) with its settings; ValueError naming every problem
    when there is one."""
    sections = SECTIONS if sections is None else sections
    found = problems(model, sections)
    if found:
        raise ValueError("the settings reference cannot be written:\n" + "\n".join(f"- {p}" for p in found))
    docs = field_docs(model)
    return [(section, [Setting(name, model.model_fields[name], docs[name]) for name in section.fields])
            for section in sections]


# --- .env.example -----------------------------------------------------------------------------

ENV_HEADER = """\
# Copy to .env (cp .env.example .env) and edit it. Every MARSHO_* line is commented out at its
# default, so the copy changes nothing until you remove the "# " before a key and set it: at least
# MARSHO_BASE_URL, MARSHO_API_KEY and MARSHO_MODEL. Moving from nonebot-plugin-marshoai? Append your
# old MARSHOAI_* lines at the end: the startup log names each one it reads and each it ignores.
# (Written by scripts/gen_reference.py from nonebot_plugin_marsho/config.py: edit the docstrings
# there, not this file. The settings are described in docs/en/reference/settings.md.)

# --- the bot (NoneBot) ---
# where the bot listens; point your OneBot v11 implementation's reverse WebSocket at
# ws://HOST:PORT/onebot/v11/ws
HOST=127.0.0.1
PORT=8080
# who may use owner-only commands, JSON list of QQ numbers as strings: ["123456789"] (NoneBot
# does not start with [123456789]; on other platforms: the user ids the platform gives, such as a
# Telegram or Discord user id); `.venv/bin/python bot.py --console` adds the console
SUPERUSERS=[]
# ONEBOT_ACCESS_TOKEN=           # must match the access token of your OneBot implementation
# COMMAND_START=["/",""]         # marsho answers "marsho ..." and "/marsho ..." whatever this is
"""
"""The file's promise and NoneBot's own settings, which are not ours to describe from Config."""


def _comment(text: str) -> list[str]:
    """`text` as comment lines of at most 98 characters (markdown's backticks dropped)."""
    return textwrap.wrap(text.replace("`", ""), width=98, initial_indent="# ", subsequent_indent="# ",
                         break_long_words=False, break_on_hyphens=False)


def env_example(model: type[BaseModel], sections: Sequence[Section] | None = None) -> str:
    """.env.example: NoneBot's lines, then each section's settings commented out at their
    default, each under its description (and its example)."""
    lines = [ENV_HEADER.rstrip("\n")]
    for section, members in settings(model, sections):
        lines += ["", f"# --- {section.en[0].lower()}{section.en[1:]} ---"]
        for setting in members:
            limits = bounds(setting.field).replace(" ", "")  # never wrapped apart
            lines += _comment(f"{setting.doc.en} Range: {limits}." if limits else setting.doc.en)
            example = setting.doc.example
            if example and setting.line_value != setting.doc.example_value:
                # the lines as aligned under `Example: ` (9 characters) in the docstring
                lines += [f"# e.g. {example[0]}", *(f"# {line[4:]}" for line in example[1:])]
            lines.append(f"# {setting.env}={setting.line_value}")
    return "\n".join(lines) + "\n"


# --- the settings pages -----------------------------------------------------------------------

WORDS: dict[str, dict[Lang, str]] = {
    "type": {"en": "Type", "zh": "类型"},
    "default": {"en": "Default", "zh": "默认值"},
    "range": {"en": "Range", "zh": "范围"},
    "choices": {"en": "Choices", "zh": "可选值"},
    "example": {"en": "Example", "zh": "示例"},
    "empty": {"en": "empty", "zh": "空"},
    "unset": {"en": "unset", "zh": "不设置"},
    "required": {"en": "required", "zh": "必填"},
    "long_default": {"en": "the list below", "zh": "见下方列表"},
    "default_list": {"en": "The default list", "zh": "默认列表"},
    "fields": {"en": "Fields of each entry", "zh": "每一项的字段"},
    "generated": {"en": "This page is written by `scripts/gen_reference.py` from the code; edit the "
                        "code, not the page.",
                  "zh": "本页由 `scripts/gen_reference.py` 根据代码生成；要修改请改代码，不要直接改本页。"},
}


_CJK_END = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef“”‘’…]$")
_CJK_START = re.compile(r"^[\u3000-\u303f\u3400-\u9fff\uff00-\uffef“”‘’…]")


def prose(text: str) -> str:
    """The text with each line break between two Chinese characters joined: the source wraps
    its lines, but a browser shows such a break as a stray space inside a Chinese sentence."""
    lines: list[str] = []
    for line in text.split("\n"):
        if lines and _CJK_END.search(lines[-1]) and _CJK_START.match(line):
            lines[-1] += line
        else:
            lines.append(line)
    return "\n".join(lines)

SETTINGS_INTRO: dict[Lang, str] = {
    "en": """\
# Settings reference

Every setting goes in the bot's `.env` file, one `KEY=value` line each, and every one is optional:
a key left out keeps its default. Lists and objects are written as JSON on one line. Restart the
bot after changing `.env`. `.env.example` holds every key below, commented out at its default: copy
it to `.env` and remove the `# ` before the keys you set.

A value that cannot work (`MARSHO_TIMEOUT=soon`) never stops the bot, but Marsho answers no
question until you fix `.env` and restart: the log names the key and what is wrong with it, a
superuser who calls Marsho is told the same, and everyone else reads only that her settings are
wrong and the owner has the details in the log (`marsho.help` still works). A `MARSHO_*` key that
is no setting is named in the log with the closest one.
""",
    "zh": """\
# 设置参考

所有设置都写在机器人的 `.env` 文件里，每项一行 `KEY=value`，并且每一项都可以不写：不写就用默认值。
列表和对象用 JSON 写在一行里。改了 `.env` 之后要重启机器人。`.env.example` 列出了下面所有的设置，
每行都按默认值注释掉了：把它复制成 `.env`，去掉要设置的那几行前面的 `# ` 即可。

写错的值（如 `MARSHO_TIMEOUT=soon`）不会让机器人启动失败，
但在你改好 `.env` 并重启之前，Marsho 不回答任何问题：日志会指出是哪一项、错在哪里，
超级用户叫她时也会收到同样的说明，其他人只会收到“我的配置有误。详细信息在机器人主人的日志里”
（`marsho.help` 照常可用）。
写错名字的 `MARSHO_*` 设置会在日志里提示，并给出最接近的正确名字。
""",
}


def _anchor(title: str) -> str:
    """The section's id, the same on both pages: the English title's words, joined by `-`."""
    words = "".join(c if c.isalnum() else " " for c in title.split("(")[0].casefold().replace("'", ""))
    return "-".join(words.split())


def _title(section: Section, lang: Lang) -> str:
    return section.en if lang == "en" else section.zh


def _default_label(setting: Setting, lang: Lang) -> str:
    value = default_of(setting.field)
    if value is PydanticUndefined:
        return WORDS["required"][lang]
    if value is None:
        return WORDS["unset"][lang]
    if len(setting.default) > LONG_DEFAULT:
        return WORDS["long_default"][lang]
    return f"`{setting.default}`" if setting.default else WORDS["empty"][lang]


def _facts(field: FieldInfo, default: str, lang: Lang) -> list[str]:
    """Type, default, range and choices, as the items of a list."""
    sep = ": " if lang == "en" else "："
    facts = [f"{WORDS['type'][lang]}{sep}{type_label(field.annotation, lang)}",
             f"{WORDS['default'][lang]}{sep}{default}"]
    if bounds(field):
        facts.append(f"{WORDS['range'][lang]}{sep}{bounds(field)}")
    if choices(field.annotation):
        listed = (", " if lang == "en" else "、").join(f"`{choice}`" for choice in choices(field.annotation))
        facts.append(f"{WORDS['choices'][lang]}{sep}{listed}")
    return facts


def _nested_entry(name: str, field: FieldInfo, doc: FieldDoc, lang: Lang) -> str:
    """One field of a nested model: `- `api_key` (text, default empty): its description`."""
    value = default_of(field)
    if value is PydanticUndefined:
        default = WORDS["required"][lang]
    elif value is None:
        default = WORDS["unset"][lang]
    else:
        written = f"`{env_value(value)}`" if env_value(value) else WORDS["empty"][lang]
        default = f"default {written}" if lang == "en" else f"默认为 {written}".replace("为 空", "为空")
    kind = type_label(field.annotation, lang)
    if choices(field.annotation):
        kind = " | ".join(f"`{choice}`" for choice in choices(field.annotation))
    if lang == "en":
        return f"- `{name}` ({kind}, {default}): {doc.en}"
    return f"- `{name}`（{kind}，{default}）：{doc.zh}"


def _setting_entry(setting: Setting, model: type[BaseModel], lang: Lang) -> list[str]:
    """A setting's part of its page: heading, description, facts, its entries' fields, example."""
    lines = [f"### {setting.env}", "", setting.doc.en if lang == "en" else setting.doc.zh, ""]
    lines += [f"- {fact}" for fact in _facts(setting.field, _default_label(setting, lang), lang)]
    if len(setting.default) > LONG_DEFAULT:
        values = default_of(setting.field)
        sep = ": " if lang == "en" else "："
        lines += ["", f"{WORDS['default_list'][lang]}{sep}" + " ".join(f"`{value}`" for value in values)]
    for nested in _own_models(model, setting.field):
        docs = field_docs(nested)
        lines += ["", f"{WORDS['fields'][lang]}{':' if lang == 'en' else '：'}", ""]
        lines += [_nested_entry(name, field, docs[name], lang) for name, field in nested.model_fields.items()]
    if setting.doc.example:
        lines += ["", f'```dotenv title="{WORDS["example"][lang]}"',
                  f"{setting.env}={setting.doc.example_value}", "```"]
    return [*lines, ""]


def settings_page(model: type[BaseModel], lang: Lang, sections: Sequence[Section] | None = None) -> str:
    """docs/<lang>/reference/settings.md: the sections listed, then each with its settings."""
    grouped = settings(model, sections)
    lines = [prose(SETTINGS_INTRO[lang])]
    lines += [f"- [{_title(section, lang)}](#{_anchor(section.en)})" for section, _ in grouped]
    lines += ["", f"<!-- {WORDS['generated']['en']} -->", ""]
    for section, members in grouped:
        lines += [f'<a id="{_anchor(section.en)}"></a>', "", f"## {_title(section, lang)}", ""]
        for setting in members:
            lines += _setting_entry(setting, model, lang)
    lines += ["---", "", WORDS["generated"][lang]]
    return "\n".join(lines) + "\n"


# --- the commands pages -----------------------------------------------------------------------

WHO: dict[str, dict[Lang, str]] = {
    "member": {"en": "everyone", "zh": "所有人"},
    "admin": {"en": "group admins and owners, and superusers", "zh": "群管理员、群主和超级用户"},
    "superuser": {"en": "superusers", "zh": "超级用户"},
}
WHERE: dict[str, dict[Lang, str]] = {
    "anywhere": {"en": "any chat", "zh": "任何聊天"},
    "groups": {"en": "groups and channels only", "zh": "仅群聊和频道"},
    "private": {"en": "private chats only", "zh": "仅私聊"},
}
COMMAND_WORDS: dict[str, dict[Lang, str]] = {
    "command": {"en": "Command", "zh": "命令"},
    "who": {"en": "Who", "zh": "谁能用"},
    "where": {"en": "Where", "zh": "在哪里用"},
    "aliases": {"en": "Also written", "zh": "也可以写作"},
    "forms": {"en": "How to write it", "zh": "写法"},
    "some": {"en": "some forms: {who}", "zh": "部分写法：{who}"},
    "always": {"en": "Answered even while the settings are wrong or the model is not ready.",
               "zh": "即使配置有误、模型还没准备好，也会回答。"},
}
COMMANDS_INTRO: dict[Lang, str] = {
    "en": """\
# Commands

A command is a trigger word (MARSHO_NAME or one of MARSHO_ALIASES, in any case), a dot and the
command's name: `marsho.reset`, `小棉.reset`. The bot's command prefix (COMMAND_START, such as `/`)
may come before it or not. The dot may be typed full-width (`marsho．reset`), and a Chinese full
stop works before a command written alone (`marsho。reset`). Who may use each command, and where,
is checked before it runs; a refusal says why.

What `marsho.help` says first:
""",
    "zh": """\
# 命令

命令的写法是触发词（MARSHO_NAME 或 MARSHO_ALIASES 中的任意一个，不分大小写）、一个点和命令名：
`marsho.reset`、`小棉.reset`。前面可以带也可以不带机器人的命令前缀（COMMAND_START，如 `/`）。
点也可以用全角（`marsho．reset`）；命令后面不带其他内容时，用中文句号也行（`marsho。reset`）。
每个命令运行之前都会检查谁能用、在哪里用；不允许时会说明原因。

`marsho.help` 开头的说明：
""",
}
CATALOGUE: dict[Lang, str] = {"en": "en", "zh": "zh-CN"}


PLACEHOLDERS: dict[Lang, dict[str, str]] = {
    "en": {},
    "zh": {"<number>": "<编号>", "<user id>": "<用户 ID>", "<group id>": "<群号>", "<nickname>": "<昵称>",
           "<text>": "<设定>", "<model>": "<模型名>", "<word>": "<词>", "<tokens|": "<token数|"},
}
"""A form's placeholders as the Chinese help writes them (`usage.*` of the zh-CN catalogue)."""


def _who(command: Any, lang: Lang) -> str:
    """Who may use a command: the least of its forms, and who may use the others."""
    from nonebot_plugin_marsho.chat.commands.registry import RANK

    whos = sorted({form.who for form in command.forms} or {command.who}, key=RANK.__getitem__)
    shown = WHO[whos[0]][lang]
    if len(whos) > 1:
        some = COMMAND_WORDS["some"][lang].format(who=("; " if lang == "en" else "；").join(
            WHO[who][lang] for who in whos[1:]))
        shown += f" ({some})" if lang == "en" else f"（{some}）"
    return shown


def _form_line(full: str, form: Any, texts: dict[str, str], key: str, lang: Lang) -> str:
    """One form: `- `marsho.memory group` — who; where: what it does`."""
    args = form.args
    for placeholder, said in PLACEHOLDERS[lang].items():
        args = args.replace(placeholder, said)
    written = f"{full} {args}".strip()
    who = WHO[form.who][lang]
    if form.where != "anywhere":
        who += ("; " if lang == "en" else "；") + WHERE[form.where][lang]
    return f"- `{written}` — {who}{': ' if lang == 'en' else '：'}{texts[key]}"


def commands_page(lang: Lang) -> str:
    """docs/<lang>/reference/commands.md: every command of the registry, in the help's order,
    each form with who may use it and what it does."""
    from nonebot_plugin_marsho import i18n
    from nonebot_plugin_marsho.chat.commands import REGISTRY
    from nonebot_plugin_marsho.chat.render import usage_text
    from nonebot_plugin_marsho.config import Config

    config = Config()
    texts = i18n.CATALOGUES[CATALOGUE[lang]]  # type: ignore[index]
    fill = {"name": config.marsho_name}
    words = {key: value[lang] for key, value in COMMAND_WORDS.items()}
    header = usage_text(i18n.Texts(CATALOGUE[lang]), config.trigger_names, config.marsho_at, ())  # type: ignore[arg-type]
    lines = [prose(COMMANDS_INTRO[lang]), "```text", header]
    lines += ["```", "", f"| {words['command']} | {words['who']} | {words['where']} |", "| --- | --- | --- |"]
    commands = REGISTRY.all()
    for command in commands:
        full = f"{config.marsho_name}.{command.name}"
        anchor = full.replace(".", "")
        lines.append(f"| [{full}](#{anchor}) | {_who(command, lang)} | {WHERE[command.where][lang]} |")
    lines += ["", f"<!-- {WORDS['generated']['en']} -->", ""]
    sep = ": " if lang == "en" else "："
    for command in commands:
        full = f"{config.marsho_name}.{command.name}"
        lines += [f"## {full}", "", "```text", texts[command.help_key].format(**fill), "```", "",
                  f"- {words['who']}{sep}{_who(command, lang)}",
                  f"- {words['where']}{sep}{WHERE[command.where][lang]}"]
        if command.aliases:
            aliases = ", ".join(f"`{config.marsho_name}.{alias}`" for alias in command.aliases)
            lines.append(f"- {words['aliases']}{sep}{aliases}")
        if not command.needs_model:
            lines.append(f"- {words['always']}")
        if command.forms:
            lines += ["", f"{words['forms']}{sep.strip()}", ""]
            lines += [_form_line(full, form, texts, f"form.{command.name}.{form.key}", lang)
                      for form in command.forms]
        lines.append("")
    lines += ["---", "", WORDS["generated"][lang]]
    return "\n".join(lines) + "\n"


# --- the CLI pages ----------------------------------------------------------------------------

CLI_COMMANDS = ((), ("tools",), ("call",), ("ask",), ("import-memory",))
"""`python -m nonebot_plugin_marsho` and each of its commands, whose `--help` the pages hold."""
CLI_INTRO: dict[Lang, str] = {
    "en": """\
# Command line

`python -m nonebot_plugin_marsho` checks the toolkits, calls one tool, asks once or imports
nonebot-plugin-marshoai's memories, with the settings of `.env` in the current folder, exactly as
the bot would. Run it in the bot's folder, with the bot's Python. Its `--help`:
""",
    "zh": """\
# 命令行

`python -m nonebot_plugin_marsho` 可以检查工具包、调用单个工具、问一次问题，或导入
nonebot-plugin-marshoai 的记忆，使用的是当前目录下 `.env` 的配置，和机器人运行时完全一样。
请在机器人的目录里、用机器人的 Python 运行。下面是它的 `--help`（英文）：
""",
}


_HELPS = """\
import contextlib, io, json, sys
from nonebot_plugin_marsho.__main__ import main
helps = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*args, "--help"])
    helps.append(out.getvalue().rstrip())
print(json.dumps(helps))
"""


def cli_helps(commands: Sequence[tuple[str, ...]] = CLI_COMMANDS) -> dict[tuple[str, ...], str]:
    """`python -m nonebot_plugin_marsho <command> --help` of each command, as a terminal 100
    columns wide shows it (one interpreter for all: each start costs a second)."""
    env = {"PATH": os.environ.get("PATH", ""), "COLUMNS": "100", "NO_COLOR": "1", "PYTHON_COLORS": "0"}
    with tempfile.TemporaryDirectory() as folder:  # no .env of anyone's
        done = subprocess.run([sys.executable, "-c", _HELPS, json.dumps(commands)], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=120, check=True)
    return dict(zip(commands, json.loads(done.stdout), strict=True))


def python_version() -> str:
    """The Python whose argparse wrote the CLI pages (its layout differs between versions)."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def cli_page(lang: Lang, helps: dict[tuple[str, ...], str]) -> str:
    """docs/<lang>/reference/cli.md: the `--help` of the CLI and of each of its commands."""
    lines = [prose(CLI_INTRO[lang])]
    for args, text in helps.items():
        if args:
            lines += [f"## {' '.join(args)}", ""]
        lines += ["```text", text, "```", ""]
    lines += [f"<!-- argparse of Python {python_version()} -->", "", "---", "", WORDS["generated"][lang]]
    return "\n".join(lines) + "\n"


# --- writing ----------------------------------------------------------------------------------

def outputs(cli: bool = True) -> dict[Path, str]:
    """Every file this script writes, by its path in the repository, with its content now."""
    from nonebot_plugin_marsho.config import Config

    files = {Path(".env.example"): env_example(Config)}
    helps = cli_helps() if cli else {}
    for lang in ("zh", "en"):
        folder = Path("docs") / lang / "reference"
        files[folder / "settings.md"] = settings_page(Config, lang)
        files[folder / "commands.md"] = commands_page(lang)
        if cli:
            files[folder / "cli.md"] = cli_page(lang, helps)
    return files


def drifted(files: dict[Path, str], root: Path | None = None) -> Iterator[Path]:
    """The files whose committed text (under `root`, the repository's) is not what the code
    makes now."""
    for path, text in files.items():
        target = (ROOT if root is None else root) / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            yield path


def _quiet_nonebot() -> None:
    """Importing the commands outside a bot: no adapter warnings, no plugin log."""
    import warnings

    from nonebot.log import logger

    warnings.filterwarnings("ignore", message="(Failed to get nonebot adapters|No adapters found)")
    logger.remove()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming each file that differs from what the code makes")
    args = parser.parse_args(argv)
    _quiet_nonebot()
    try:
        files = outputs()
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    stale = list(drifted(files))
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run python scripts/gen_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        (ROOT / path).parent.mkdir(parents=True, exist_ok=True)
        (ROOT / path).write_text(files[path], encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
