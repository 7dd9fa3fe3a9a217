"""Every setting of the plugin: one Config read from `.env`, each key `MARSHO_*`."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nonebot.typing import origin_is_union
from nonebot.utils import type_is_complex
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from . import i18n
from .agent.model.base import StreamMode, ToolMode
from .agent.providers import RETRY_AFTER_MAX, RETRY_BUDGET
from .agent.quirks import QuirkOverride
from .i18n import Language
from .store.session import SessionScope
from .tools.model import Permission

DEFAULT_VISION_MODELS = [
    "gpt-4o*", "chatgpt-4o*", "gpt-4.1*", "gpt-4-turbo*", "gpt-4-vision*", "gpt-5*", "o1", "o1-2*",
    "o3*", "o4*", "claude-3*", "claude-*-4*", "claude-4*", "gemini-*", "gemma-3*", "grok-*vision*",
    "grok-4*", "qwen*-vl*", "qvq*", "qwen*-omni*", "glm-4v*", "glm-4.*v*", "*vision*", "*-vl-*",
    "*-vl", "llava*", "minicpm-v*", "pixtral*", "mistral-medium*", "mistral-small-3*", "doubao-*vision*",
    "doubao-seed-1*", "step-1v*", "step-1o*", "moonshot-v1-*-vision*", "kimi-k2.5*", "llama-4*",
    "llama3.2-vision*", "internvl*", "yi-vision*", "hunyuan-vision*", "hunyuan-t1-vision*",
]
"""Model names (shell-style patterns, any case) that can read pictures, for MARSHO_VISION_MODELS."""


def language_alias(value: Any) -> Any:
    """`zh`, `zh_CN`, `zh-Hans`, `en-US`... are read as the language they name."""
    if isinstance(value, str):
        folded = value.strip().replace("_", "-").casefold()
        if folded in ("zh", "zh-cn", "zh-hans", "zh-sg", "cn", "chinese", "中文"):
            return "zh-CN"
        if folded == "en" or folded.startswith("en-") or folded == "english":
            return "en"
    return value


class FallbackEndpoint(BaseModel):
    """One endpoint of MARSHO_FALLBACKS."""

    model_config = ConfigDict(extra="forbid")

    base_url: str
    """Base URL of the endpoint, without `/chat/completions`.

    zh: 该接口的基础地址，不带 `/chat/completions`。"""
    model: str
    """Model name sent to it.

    zh: 发给该接口的模型名。"""
    api_key: str = ""
    """Its API key; may stay empty for a local endpoint that needs none.

    zh: 该接口的 API 密钥；不需要密钥的本地接口可以留空。"""
    api_keys: list[str] = Field(default_factory=list)
    """More keys of it, used in turn with api_key.

    zh: 该接口的更多密钥，与 api_key 轮流使用。"""
    tool_mode: ToolMode | None = None
    """How tools reach this endpoint's model (`native`, `prompt` or `off`), over
    MARSHO_TOOL_MODE_BY_MODEL and MARSHO_TOOL_MODE; unset: those decide.

    zh: 该接口的模型如何使用工具（`native`、`prompt` 或 `off`），优先于 MARSHO_TOOL_MODE_BY_MODEL 和
    MARSHO_TOOL_MODE；不设置则由它们决定。"""

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str) -> str:
        return http_base_url(value)

    @field_validator("model")
    @classmethod
    def _model_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise SettingError("setting.model_empty")
        return value.strip()

    @property
    def keys(self) -> list[str]:
        """Its keys: api_key, then api_keys."""
        return [key for key in dict.fromkeys([self.api_key, *self.api_keys]) if key]


class SettingError(ValueError):
    """A value a validator refuses: its message in English (what pydantic and the log read) and
    its catalogue key, so the chats are told in MARSHO_LANG (describe_validation_error)."""

    def __init__(self, key: str, **params: Any) -> None:
        super().__init__(i18n.text("en", key, **params))
        self.key = key
        self.params = params


PYDANTIC_ZH: dict[str, str] = {
    "bool_parsing": "应为 true 或 false",
    "int_parsing": "应为整数",
    "int_from_float": "应为整数，不能带小数",
    "float_parsing": "应为数字",
    "greater_than": "应大于 {gt}",
    "greater_than_equal": "应大于等于 {ge}",
    "less_than": "应小于 {lt}",
    "less_than_equal": "应小于等于 {le}",
    "literal_error": "应为以下之一：{expected}",
    "string_type": "应为文本",
    "string_too_long": "最多 {max_length} 个字符",
    "too_long": "最多 {max_length} 项",
    "list_type": "应为 JSON 列表",
    "dict_type": "应为 JSON 对象",
    "json_invalid": "不是有效的 JSON",
    "missing": "缺少这个字段",
    "extra_forbidden": "没有这个字段",
}
"""pydantic's messages of the kinds a `.env` value meets, in Chinese (the rest stay in English)."""


def _message(item: Any, language: str) -> str:
    """One validation error's message in `language`: a validator's own (SettingError), pydantic's
    common ones in Chinese, else pydantic's English."""
    context = item.get("ctx") or {}
    error = context.get("error")
    if isinstance(error, SettingError):
        return i18n.text(language, error.key, **error.params)
    if language == "zh-CN" and item["type"] in PYDANTIC_ZH:
        # pydantic lists the choices as "'a', 'b' or 'c'"
        values = {key: str(value).replace(", ", "、").replace(" or ", "、") for key, value in context.items()}
        return PYDANTIC_ZH[item["type"]].format(**values)
    return str(item["msg"]).removeprefix("Value error, ")


def http_base_url(value: str) -> str:
    """An endpoint's base URL, or ValueError saying what is wrong with it."""
    value = value.strip().rstrip("/")
    if not value.startswith(("http://", "https://")):
        raise SettingError("setting.not_http", value=repr(value))
    if value.endswith("/chat/completions"):
        raise SettingError("setting.chat_completions")
    return value


QUIET_HOURS = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)")
"""MARSHO_ACTIVE_QUIET_HOURS: `HH:MM-HH:MM`."""


class Price(BaseModel):
    """What one model costs the owner, per million tokens (MARSHO_PRICES)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    """Per million prompt tokens not served from the provider's cache.

    zh: 每百万个未命中提供商缓存的提示词 token 的价格。"""
    cached_input: float | None = Field(default=None, ge=0)
    """Per million prompt tokens served from the cache (unset: the input price).

    zh: 每百万个命中缓存的提示词 token 的价格（不设置则按 input 的价格计）。"""
    output: float = Field(ge=0)
    """Per million completion tokens (reasoning included).

    zh: 每百万个输出 token 的价格（含思考过程）。"""
    currency: str = Field(default="", max_length=8)
    """The label costs are shown with (`USD`, `¥`...).

    zh: 显示费用时用的货币标记（`USD`、`¥` 等）。"""


SECRET_SETTINGS = ("marsho_api_key", "marsho_api_keys", "marsho_fallbacks")
"""Settings that hold API keys: a complaint about them never repeats the value."""


class Config(BaseModel):
    """Settings read from `.env`; the environment variable is the field name in capitals."""

    marsho_base_url: str = "https://api.openai.com/v1"
    """Base URL of the OpenAI-compatible endpoint (it ends before `/chat/completions`), such as
    `https://api.deepseek.com/v1` for DeepSeek or `http://127.0.0.1:11434/v1` for Ollama.

    zh: 兼容 OpenAI 的模型接口的基础地址（到 `/chat/completions` 之前为止），例如 DeepSeek 是
    `https://api.deepseek.com/v1`，Ollama 是 `http://127.0.0.1:11434/v1`。"""

    marsho_api_key: str = ""
    """API key sent as a Bearer token; may stay empty for local endpoints that need none.

    zh: 以 Bearer token 发送的 API 密钥；不需要密钥的本地接口可以留空。"""

    marsho_model: str = "gpt-4o-mini"
    """Model name sent with every request.

    zh: 每次请求发送的模型名。"""

    marsho_name: str = "marsho"
    """Trigger word: a message starting with it (any case) is a question for the model.

    zh: 触发词：以它开头的消息（不分大小写）会作为问题交给模型。"""

    marsho_aliases: list[str] = Field(default_factory=lambda: ["小棉"])
    """More trigger words, JSON list.

    zh: 更多触发词，JSON 列表。"""

    marsho_at: bool = False
    """Also answer group messages that @-mention the bot.

    zh: 也回答群聊中 @ 机器人的消息。"""

    marsho_lang: Language = "zh-CN"
    """Language of every fixed reply and of the default persona: `zh-CN` or `en`.

    zh: 所有固定回复和默认人设使用的语言：`zh-CN` 或 `en`。"""

    marsho_system_prompt: str | None = None
    """The persona, put before every conversation; unset for Marsho's own (a friendly catgirl, in
    MARSHO_LANG), empty for none.

    zh: 人设，放在每段对话的最前面；不设置则使用 Marsho 自己的人设（一只友好的猫娘，语言随
    MARSHO_LANG），设为空则不用人设。"""

    marsho_additional_prompt: str = ""
    """Added after the persona (house rules of the group...).

    zh: 追加在人设之后的内容（比如群规）。"""

    marsho_time_prompt: bool = True
    """Tell the model the current date and time (and the lunar date in zh-CN) each turn, in a note
    after the question, so the system prompt stays the same.

    zh: 每轮对话告诉模型当前的日期和时间（zh-CN 下还有农历日期），写在问题后面的附注里，这样系统提示词
    保持不变。"""

    marsho_timezone: str = ""
    """IANA time zone of the date and time told to the model (MARSHO_TIME_PROMPT) and of
    MARSHO_ACTIVE_QUIET_HOURS, such as `Asia/Shanghai`; empty for the machine's.

    Example: Asia/Shanghai

    zh: 告诉模型的日期时间（MARSHO_TIME_PROMPT）和 MARSHO_ACTIVE_QUIET_HOURS 所用的 IANA 时区，例如
    `Asia/Shanghai`；留空则用本机时区。"""

    marsho_praises_file: Path | None = None
    """"People Marsho likes": JSON `{"like": [{"name": ..., "advantages": ...}]}` (marshoai's
    praises.json); by default `praises.json` in the plugin's data folder, used when it exists. Read
    again whenever it changes, without a restart.

    zh: “Marsho 喜欢的人”：JSON `{"like": [{"name": ..., "advantages": ...}]}`（即 marshoai 的
    praises.json）；默认为插件数据目录中的 `praises.json`，存在时才使用。文件改动后会自动重新读取，无需
    重启。"""

    marsho_nickname_limit: int = Field(default=16, ge=1, le=64)
    """Characters a nickname set with `marsho.nickname` may have.

    zh: 用 `marsho.nickname` 设置的昵称最多可有的字符数。"""

    marsho_poke: Literal["model", "fixed", "off"] = "model"
    """Answer a poke (OneBot v11): `model` asks the model for a short in-character line (the
    fixed line when it fails), `fixed` always the fixed line, `off` ignores pokes.

    zh: 如何回应戳一戳（OneBot v11）：`model` 让模型说一句符合人设的短句（失败时用固定回复），`fixed`
    总是用固定回复，`off` 不理会戳一戳。"""

    marsho_poke_cooldown: float = Field(default=30.0, ge=0)
    """Seconds before the same person's next poke is answered again (in each chat).

    zh: 同一个人再次戳一戳要隔多少秒才会再被回应（每个聊天分别计算）。"""

    marsho_vision_models: list[str] = Field(default_factory=lambda: list(DEFAULT_VISION_MODELS))
    """Models that are sent pictures: names or shell-style patterns (`gpt-4o*`), any case; for
    other models pictures are left out with a short tip.
    The default lists the common vision models (gpt-4o*, claude-3*, gemini-*, qwen*-vl*, glm-4v*,
    *vision*...); a list given here replaces it.

    Example: ["gpt-4o*", "my-local-vl-model"]

    zh: 会收到图片的模型：模型名或 shell 风格的通配模式（如 `gpt-4o*`），不分大小写；其他模型收不到图
    片，会附上一句简短提示。默认值列出了常见的视觉模型
    （gpt-4o*、claude-3*、gemini-*、qwen*-vl*、glm-4v*、*vision* 等）；在这里填写的列表会整个替换默认
    值。"""

    marsho_max_images: int = Field(default=4, ge=0, le=16)
    """Pictures of one question (quoted message included) sent to the model; 0 for none.

    zh: 一个问题（含被引用的消息）最多发给模型的图片数；0 表示不发图片。"""

    marsho_image_max_bytes: int = Field(default=5_000_000, ge=10_000)
    """Bytes one picture may have; bigger ones are not downloaded.

    zh: 单张图片最多多少字节；更大的图片不会下载。"""

    marsho_image_timeout: float = Field(default=10.0, gt=0)
    """Seconds one picture's download may take.

    zh: 下载单张图片最多用多少秒。"""

    marsho_image_allow_private: bool = False
    """Download pictures of messages from private and loopback addresses too: for an OneBot
    implementation that serves them itself (http://127.0.0.1:...). Off, only public addresses
    are fetched, so a crafted message cannot reach the bot's own network.

    zh: 也从内网和本机回环地址下载消息中的图片：适用于自己提供图片的 OneBot 实现
    （http://127.0.0.1:...）。关闭时只下载公网地址，这样精心构造的消息就无法访问机器人所在的内部网络。"""

    marsho_long_answer: Literal["split", "forward", "single"] = "split"
    """Long answers: `split` into several messages at paragraph boundaries (a forward message
    beyond MARSHO_MAX_SPLIT_MESSAGES), `forward` as one forward message, `single` as they are.

    zh: 长回答的发送方式：`split` 在段落处拆成几条消息（超过 MARSHO_MAX_SPLIT_MESSAGES 条时改为合并转
    发），`forward` 作为一条合并转发消息，`single` 原样发送一条。"""

    marsho_split_chars: int = Field(default=800, ge=100)
    """An answer longer than this many characters is long.

    zh: 回答超过这么多字符就算长回答。"""

    marsho_max_split_messages: int = Field(default=4, ge=1, le=20)
    """Messages a split answer may take; longer ones go as a forward message.

    zh: 拆分后的回答最多占几条消息；更长的回答改为合并转发。"""

    marsho_send_reasoning: bool = False
    """Send a reasoning model's thinking as a forward message before the answer.

    zh: 在回答之前，把推理模型的思考过程作为合并转发消息发出。"""

    marsho_tool_progress: bool = False
    """Say which tools marsho is using while they run ("marsho is using weather …").

    zh: 工具运行时告诉大家 marsho 正在使用哪些工具（“marsho 正在使用 weather …”）。"""

    marsho_render_latex: bool = True
    """Send $$...$$ formulas of an answer as pictures (matplotlib's mathtext; a formula it cannot
    draw stays text).

    zh: 把回答中的 $$...$$ 公式渲染成图片发送（使用 matplotlib 的 mathtext；画不出的公式保留为文字）。"""

    marsho_render_inline_latex: bool = False
    """Also draw inline $...$ formulas.

    zh: 行内的 $...$ 公式也渲染成图片。"""

    marsho_render_markdown_images: bool = True
    """Send markdown images `![alt](https://...)` of an answer as pictures (public addresses
    only, size- and time-capped; a failed download stays text).

    zh: 把回答中的 markdown 图片 `![alt](https://...)` 作为图片发送（只限公网地址，限制大小和下载时间；
    下载失败时保留为文字）。"""

    marsho_toolkit_dirs: list[Path] = Field(default_factory=list)
    """Extra toolset folders (JSON list), each holding toolkit folders (a toolkit: its tools.json and
    __init__.py). The plugin's data folder has one too; its path is logged at startup.

    zh: 额外的工具集目录（JSON 列表），每个目录下放若干工具包目录（一个工具包：它的 tools.json 和
    __init__.py）。插件数据目录里也有一个工具集目录，启动日志会给出它的路径。"""

    marsho_disabled_toolkits: list[str] = Field(default_factory=list)
    """Toolkit folder names not to load (JSON list).

    Example: ["clock"]

    zh: 不加载的工具包目录名（JSON 列表）。"""

    marsho_enabled_toolkits: list[str] = Field(default_factory=list)
    """Toolkits that are off until enabled, to load (JSON list): the built-in ones that send data out
    of the bot (weather, web...) or are dangerous (python, files...).

    Example: ["weather", "web"]

    zh: 要启用的、默认关闭的工具包（JSON 列表）：即会把数据发到机器人之外的内置工具包（weather、web
    等）或有危险的内置工具包（python、files 等）。"""

    marsho_disabled_tools: list[str] = Field(default_factory=list)
    """Single tools not to offer, by full name such as `clock__now` (JSON list).

    Example: ["clock__now"]

    zh: 不提供给模型的单个工具，写完整名称，如 `clock__now`（JSON 列表）。"""

    marsho_toolkit_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Presets per toolkit, JSON `{"toolkit": {"parameter": value}}`: passed to the toolkit's
    functions (API keys...), never shown to the model, logged or echoed.

    Example: {"weather": {"api_key": "..."}}

    zh: 每个工具包的预设参数，JSON `{"工具包": {"参数": 值}}`：传给工具包的函数（API 密钥等），从不给模
    型看、不写入日志、不回显。"""

    marsho_tool_permissions: dict[str, Permission] = Field(default_factory=dict)
    """Who may use a tool or a whole toolkit, JSON `{"name": "everyone" | "admin" | "superuser"}`
    (`admin`: group admins and owners); overrides what the toolkit declares.

    Example: {"clock": "everyone", "files__delete": "superuser"}

    zh: 谁可以使用某个工具或整个工具包，JSON `{"名称": "everyone" | "admin" | "superuser"}`（所有人、群
    管理员和群主、超级用户）；覆盖工具包自己的声明。"""

    marsho_webservices_file: Path | None = None
    """Web services to use as tools (each a POST of JSON arguments, answered with markdown or a
    chart); by default `webservices.json` in the plugin's data folder, used when it exists.

    zh: 作为工具使用的 Web 服务（每个都是以 JSON 参数发 POST 请求，返回 markdown 或图表）；默认为插件数
    据目录中的 `webservices.json`，存在时才使用。"""

    marsho_mcp_file: Path | None = None
    """MCP servers to use as toolkits, in the common `{"mcpServers": {...}}` JSON format (a stdio
    server's command, args and env, or the url of an SSE or streamable HTTP one); by default `mcp.json`
    in the plugin's data folder, used when it exists.

    zh: 作为工具包使用的 MCP 服务器，采用通用的 `{"mcpServers": {...}}` JSON 格式（stdio 服务器写
    command、args 和 env，SSE 或 streamable HTTP 服务器写 url）；默认为插件数据目录中的 `mcp.json`，存
    在时才使用。"""

    marsho_tool_mode: ToolMode = "native"
    """How tools reach the model: `native` (the API's tools field), `prompt` (described in the
    system prompt, for models without function calling) or `off`.

    zh: 工具如何交给模型：`native`（使用 API 的 tools 字段）、`prompt`（写进系统提示词，适用于不支持函
    数调用的模型）或 `off`（不用工具）。"""

    marsho_tool_mode_by_model: dict[str, ToolMode] = Field(default_factory=dict)
    """MARSHO_TOOL_MODE per model name, JSON `{"model": "prompt"}`.

    Example: {"deepseek-reasoner": "prompt"}

    zh: 按模型名分别设置 MARSHO_TOOL_MODE，JSON `{"模型名": "prompt"}`。"""

    marsho_user_rate_limit: int = Field(default=0, ge=0)
    """Questions one user may ask per MARSHO_RATE_WINDOW seconds (0: no limit; superusers are
    exempt).

    zh: 每个用户每 MARSHO_RATE_WINDOW 秒最多能问几个问题（0 表示不限；超级用户不受限制）。"""

    marsho_group_rate_limit: int = Field(default=0, ge=0)
    """Questions one group may ask per MARSHO_RATE_WINDOW seconds (0: no limit).

    zh: 每个群每 MARSHO_RATE_WINDOW 秒最多能问几个问题（0 表示不限）。"""

    marsho_rate_window: float = Field(default=60.0, gt=0)
    """The window of the rate limits, in seconds.

    zh: 频率限制的时间窗口，单位为秒。"""

    marsho_user_daily_tokens: int = Field(default=0, ge=0)
    """Tokens one user may use per day (prompt, cached included, plus completion, as the endpoint
    reports them); 0: no quota. `marsho.quota user <id>` sets one user's. Superusers are exempt.

    zh: 每个用户每天可用的 token 数（提示词含缓存部分加上输出，以接口报告的为准）；0 表示不设配
    额。`marsho.quota user <id>` 可单独设置某个用户的配额。超级用户不受限制。"""

    marsho_group_daily_tokens: int = Field(default=0, ge=0)
    """Tokens one group may use per day, all its members together; 0: no quota. `marsho.quota group
    <id>` sets one group's.

    zh: 每个群每天可用的 token 数，全体成员合计；0 表示不设配额。`marsho.quota group <id>` 可单独设置某
    个群的配额。"""

    marsho_daily_tokens: int = Field(default=0, ge=0)
    """Tokens everyone together may use per day; 0: no quota.

    zh: 所有人合计每天可用的 token 数；0 表示不设配额。"""

    marsho_quota_fallback_model: str = ""
    """A cheaper model that answers (and says so) a question over a quota, instead of refusing
    it; empty: such questions are refused, with how much is used and when it resets.

    zh: 超出配额的问题改由这个更便宜的模型回答（并说明这一点），而不是拒绝；留空则拒绝这类问题，并告知
    已用量和重置时间。"""

    marsho_usage_retention_days: int = Field(default=90, ge=1, le=3650)
    """Days each request's usage is kept; older rows are rolled up into daily totals.

    zh: 每次请求的用量记录保留多少天；更早的记录汇总成每日合计。"""

    marsho_prices: dict[str, Price] = Field(default_factory=dict)
    """What models cost, for `marsho.usage`: JSON of prices per million tokens by model name pattern
    (fields: input, cached_input, output, currency).

    Example: {"gpt-4o*": {"input": 2.5, "cached_input": 1.25, "output": 10, "currency": "USD"}}

    zh: 各模型的价格，供 `marsho.usage` 计算费用：按模型名通配模式写的 JSON，价格以每百万 token 计（字
    段：input、cached_input、output、currency）。"""

    marsho_allowed_groups: list[str] = Field(default_factory=list)
    """Groups marsho answers in (JSON list of group ids); empty: every group.

    Example: ["123456789"]

    zh: marsho 会回答的群（群号的 JSON 列表）；留空则所有群都回答。"""

    marsho_denied_groups: list[str] = Field(default_factory=list)
    """Groups marsho ignores (JSON list of group ids).

    zh: marsho 不理会的群（群号的 JSON 列表）。"""

    marsho_allowed_users: list[str] = Field(default_factory=list)
    """Users marsho answers (JSON list of user ids); empty: everyone. Superusers always.

    zh: marsho 会回答的用户（用户 ID 的 JSON 列表）；留空则回答所有人。超级用户总会被回答。"""

    marsho_denied_users: list[str] = Field(default_factory=list)
    """Users marsho ignores (JSON list of user ids).

    zh: marsho 不理会的用户（用户 ID 的 JSON 列表）。"""

    marsho_max_tool_rounds: int = Field(default=8, ge=0, le=64)
    """Tool-call rounds per turn; then one last request without tools, so the asker still gets an
    answer.

    zh: 每轮对话最多调用几轮工具；之后再发一次不带工具的请求，保证有回答。"""

    marsho_tool_timeout: float = Field(default=30.0, gt=0)
    """Seconds a single tool call may run; past them its result says it timed out.

    zh: 单次工具调用最多运行多少秒；超时后它的结果会说明已超时。"""

    marsho_max_parallel_tools: int = Field(default=8, ge=1, le=64)
    """Tool calls of one response that run at the same time.

    zh: 同一次响应中的工具调用最多同时运行几个。"""

    marsho_max_tool_result_bytes: int = Field(default=16_000, ge=256)
    """UTF-8 bytes of one tool result that the model sees; the rest is cut with a note.

    zh: 单个工具结果给模型看的最大 UTF-8 字节数；超出部分截掉并附上说明。"""

    marsho_timeout: float = Field(default=60.0, gt=0)
    """Seconds one request to the endpoint may take, connection included.

    zh: 向接口发出的一次请求最多用多少秒，包括建立连接。"""

    marsho_max_response_bytes: int = Field(default=4_000_000, ge=10_000)
    """Bytes read from one endpoint response; past them the request fails with a clear error and
    nothing is stored (a real answer is a few KB; a long one with reasoning under 1 MB).

    zh: 从接口的一次响应中最多读取多少字节；超出则请求失败并给出明确的错误，什么也不保存（正常回答只有
    几 KB；带思考过程的长回答也不到 1 MB）。"""

    marsho_max_answer_chars: int = Field(default=20_000, ge=500)
    """Characters of one answer kept and sent; the rest is cut with a note.

    zh: 一个回答最多保留并发送多少字符；超出部分截掉并附上说明。"""

    marsho_max_tool_calls: int = Field(default=16, ge=1, le=256)
    """Tool calls run from one response; the rest get a result saying they were not run and why.

    zh: 一次响应中最多执行几个工具调用；其余的会得到一条说明未执行及原因的结果。"""

    marsho_max_concurrent_requests: int = Field(default=256, ge=1)
    """Requests to the endpoint in flight at once, across all chats; the others wait their turn,
    taken fairly across chats, so a flood in one group cannot starve the others. 256 lets a
    burst of a couple of hundred chats be answered in one round instead of waves (the SDK's
    connection pool allows 1,000 per endpoint; each request in flight holds its answer, a few KB,
    at most MARSHO_MAX_RESPONSE_BYTES); lower it for a provider that limits concurrent requests
    (its 429 errors are retried, but each costs a wait) or for a bot with little memory.

    zh: 所有聊天合计同时向接口发出的请求数上限；其余请求排队，在各聊天之间公平轮流，所以一个群刷屏也不
    会让其他群等不到回答。默认 256：两百来个聊天同时提问时一轮就能全部发出，而不必分几批等待（SDK 的连接池
    每个接口允许 1000 个连接；每个进行中的请求占用它的回答，通常几 KB，最多 MARSHO_MAX_RESPONSE_BYTES）；
    如果服务商限制并发请求数（超出时返回 429，会重试，但每次都要等待），或机器内存很小，请调低。"""

    marsho_user_queue: int = Field(default=2, ge=1, le=20)
    """Questions one user may have running or waiting at once; more are dropped with one notice.

    zh: 每个用户同时进行中或排队中的问题最多几个；再多的会被丢弃，并只提示一次。"""

    marsho_calls_chars: int = Field(default=500, ge=50)
    """Characters of each call's arguments and of each result shown by `marsho.calls`.

    zh: `marsho.calls` 显示每次调用的参数和每个结果时，最多显示多少字符。"""

    marsho_max_forward_nodes: int = Field(default=30, ge=2, le=100)
    """Messages one forward message may hold (on platforms without forward messages: the parts one
    answer may take); a longer answer is cut with a note.

    zh: 一条合并转发消息最多包含几条消息（在没有合并转发的平台上：一个回答最多分成几条）；更长的回答会
    截断并附上说明。"""

    marsho_max_history: int = Field(default=40, ge=0)
    """Messages of earlier turns sent with each request, per session; a turn is never cut in half.

    zh: 每个会话随每次请求发送的历史消息条数上限；一轮对话不会被从中间截断。"""

    marsho_history_tokens: int = Field(default=8000, ge=500)
    """Tokens one request may hold: system prompt, tool schemas, history and the running turn. The
    oldest whole turns are left out first (down to half of this and of MARSHO_MAX_HISTORY at once, so
    the start of the request stays the same for providers' prompt caches); an oversized message is cut
    with a note.

    zh: 一次请求最多包含的 token 数：系统提示词、工具定义、历史记录和当前这一轮。超出时先去掉最早的整轮
    对话（一次裁到这个值和 MARSHO_MAX_HISTORY 的一半，让请求的开头保持不变，以便命中提供商的提示词缓
    存）；过长的单条消息会截断并附上说明。"""

    marsho_session_scope: SessionScope = "group"
    """Who shares a conversation: `group` (everyone in a group), `user_in_group` (each member
    their own, per group) or `user` (one per person everywhere). Private chats are per user.

    zh: 谁共用一段对话：`group`（群里所有人共用）、`user_in_group`（每个成员在每个群里各自一段）或
    `user`（每人在所有地方共用一段）。私聊总是每人一段。"""

    # memory (issue 18): summaries of what was trimmed, facts kept about people and groups

    marsho_summary: bool = True
    """When a session's history is trimmed, the turns that leave the request are summarised by
    the model, and the summary goes at the start of the history (`marsho.history` shows it,
    `marsho.reset` clears it); false: trimmed turns are simply left out.

    zh: 会话的历史被裁剪时，离开请求的那几轮对话由模型写成摘要，摘要放在历史的开头（`marsho.history` 可
    查看，`marsho.reset` 会清除）；设为 false 则被裁掉的对话直接丢弃。"""

    marsho_summary_model: str = ""
    """The model that writes the summaries (on MARSHO_BASE_URL, with its keys); empty: the chat
    model.

    zh: 写摘要用的模型（在 MARSHO_BASE_URL 上，使用它的密钥）；留空则使用聊天模型。"""

    marsho_summary_tokens: int = Field(default=600, ge=100, le=4000)
    """The longest summary kept, in tokens (the model is asked for less, and a longer one is cut); at
    most a quarter of MARSHO_HISTORY_TOKENS is used.

    zh: 保留的摘要最长多少 token（会要求模型写得更短，过长的会截断）；实际最多使用
    MARSHO_HISTORY_TOKENS 的四分之一。"""

    marsho_memory: bool = True
    """Long-term memory: the model keeps facts about the asker or the group with the memory
    tools, and the relevant ones go beside each question; false: no memory tools, nothing
    recalled (what is kept stays, and `marsho.memory` still lists and deletes it).

    zh: 长期记忆：模型用记忆工具记下关于提问者或群的事实，相关的记忆会附在每个问题旁边；设为 false 则没
    有记忆工具、也不调取记忆（已保存的记忆仍然保留，`marsho.memory` 仍可列出和删除）。"""

    marsho_memory_scope: Literal["user", "chat"] = "user"
    """Which of a person's memories a chat may use: `user`: what they told marsho in any group
    of the platform follows them to its other groups and their private chat (what they said in
    private stays there); `chat`: each chat uses only what was learned in it.

    zh: 一个聊天可以用某人的哪些记忆：`user`：此人在该平台任意一个群里告诉 marsho 的事，在该平台的其他
    群和此人的私聊里也能用（私聊里说的只留在私聊）；`chat`：每个聊天只用在本聊天里学到的。"""

    marsho_memory_per_user: int = Field(default=50, ge=1, le=10000)
    """Memories kept about each person; past this the one unused for longest is forgotten.

    zh: 每个人最多保存几条记忆；超出时忘掉最久没用过的那条。"""

    marsho_memory_per_group: int = Field(default=100, ge=1, le=10000)
    """Memories kept about each group; past this the one unused for longest is forgotten.

    zh: 每个群最多保存几条记忆；超出时忘掉最久没用过的那条。"""

    marsho_memory_per_member: int = Field(default=20, ge=0, le=10000)
    """How many of a group's memories one member may have told; past this their own unused for
    longest is forgotten, never what others told. 0: no such limit. A group's admins, its owner
    and superusers are not limited.

    zh: 一个群的记忆中，单个成员告诉的最多几条；超出时忘掉此人告诉的、最久没用过的那条，不会动别人告诉
    的。0 表示不设此限制。群管理员、群主和超级用户不受限制。"""

    marsho_memory_chars: int = Field(default=300, ge=20, le=4000)
    """The longest memory kept, in characters: the model is told to say it shorter.

    zh: 单条记忆最长多少字符：更长的会要求模型说得更简短。"""

    marsho_memory_recall: int = Field(default=5, ge=0, le=50)
    """Memories found by full-text search that go beside each question; 0: none (the model may
    still look with memory__recall).

    zh: 通过全文检索找到、附在每个问题旁边的记忆条数；0 表示不附（模型仍可用 memory__recall 查找）。"""

    marsho_memory_days: int = Field(default=0, ge=0, le=36500)
    """Days a memory is kept after it was last used (recalled or told again); 0: until it is
    deleted or pushed out by the limits.

    zh: 记忆在最后一次使用（被调取或再次被告知）后保留多少天；0 表示一直保留，直到被删除或因超出数量限
    制被挤掉。"""

    marsho_group_context: int = Field(default=20, ge=0, le=200)
    """Messages of a group's recent chat (not addressed to marsho) kept per group, for groups
    that share it with the model; 0 keeps none anywhere.

    zh: 每个群保留多少条最近的群聊消息（不是对 marsho 说的），供愿意把它们发给模型的群使用；0 表示所有
    群都不保留。"""

    marsho_group_context_default: Literal["off", "on"] = "off"
    """Whether groups whose admins have not chosen (`marsho.context on|off`) share their recent
    chat with the model.

    zh: 群管理员还没选择（`marsho.context on|off`）的群，是否把最近的群聊发给模型。"""

    marsho_group_context_ttl: float = Field(default=3600.0, gt=0)
    """Seconds one message of a group's recent chat is kept.

    zh: 群里最近的聊天中，每条消息保留多少秒。"""

    marsho_group_persona: bool = True
    """Whether group admins may give marsho a persona of their group's (`marsho.persona`).

    zh: 是否允许群管理员为本群设置 marsho 的人设（`marsho.persona`）。"""

    # replies without being called (chat/active.py), one answer to one thought (chat/debounce.py)

    marsho_active_default: float = Field(default=0.0, ge=0, le=1)
    """The chance (0..1) that marsho answers a group message nobody addressed to it, in groups
    whose admins have not chosen (`marsho.active`); 0: off.

    zh: 在群管理员还没选择（`marsho.active`）的群里，marsho 回应一条没人叫它的群消息的概率（0..1）；0
    表示关闭。"""

    marsho_active_max: float = Field(default=1.0, ge=0, le=1)
    """The highest chance group admins may set with `marsho.active`; 0 forbids active replies.

    zh: 群管理员用 `marsho.active` 能设置的最高概率；0 表示禁止主动插话。"""

    marsho_active_judge_model: str = ""
    """A cheap model on MARSHO_BASE_URL asked, in groups with active replies on, whether a
    message talks about marsho or is something it can help with (yes/no, no tools); empty: not
    asked. Each such message costs one small request.

    zh: 在开启了主动插话的群里，用 MARSHO_BASE_URL 上的一个便宜模型判断一条消息是否在说 marsho 或是它能
    帮上忙的事（只答是或否，不用工具）；留空则不判断。每条这样的消息都要花一次小请求。"""

    marsho_active_cooldown: float = Field(default=60.0, ge=0)
    """Seconds after an unsolicited reply before the next one in the same group.

    zh: 同一个群里，一次主动插话之后要过多少秒才会再次插话。"""

    marsho_active_per_hour: int = Field(default=6, ge=0, le=600)
    """Unsolicited replies per group per hour at most; 0: none.

    zh: 每个群每小时最多主动插话几次；0 表示不插话。"""

    marsho_active_quiet_hours: str = ""
    """Hours without unsolicited replies, `HH:MM-HH:MM` (`23:00-07:00` spans midnight), in
    MARSHO_TIMEZONE; empty: none.

    Example: 23:00-07:00

    zh: 不主动插话的时段，格式 `HH:MM-HH:MM`（`23:00-07:00` 跨过午夜），按 MARSHO_TIMEZONE 的时间；留空
    表示没有。"""

    marsho_ignored_users: list[str] = Field(default_factory=list)
    """Accounts (other bots) marsho never answers without being called (JSON list of user ids).

    Example: ["2854196310"]

    zh: marsho 不被叫到时从不回应的账号（其他机器人），用户 ID 的 JSON 列表。"""

    marsho_debounce_seconds: float = Field(default=1.5, ge=0, le=30)
    """Messages from the same person in the same chat within this many seconds of a question
    (a picture sent just before it, a second line while it is being answered) join it; 0: off.

    zh: 同一个人在同一个聊天里，问题前后这么多秒内发的消息（问题前刚发的图片、回答时补的第二句话）会并
    入这个问题；0 表示关闭。"""

    marsho_database_url: str = ""
    """Where history is kept: empty for SQLite in the plugin's data folder, or an SQLAlchemy
    URL such as `postgresql://user:password@host/db` for several bot processes.

    Example: postgresql://user:password@127.0.0.1/marsho

    zh: 历史记录保存在哪里：留空则用插件数据目录中的 SQLite，或者填一个 SQLAlchemy URL，如
    `postgresql://user:password@host/db`，供多个机器人进程共用。"""

    # when the provider fails (agent/providers.py, agent/quirks.py)

    marsho_retries: int = Field(default=2, ge=0, le=10)
    """Retries of one request on one endpoint for 429, 500, 502, 503, 504, dropped connections,
    timeouts and empty bodies (never for 400/401/403/404), after Retry-After or a backoff.

    zh: 同一个请求在同一个接口上遇到 429、500、502、503、504、连接断开、超时和空响应时重试几次
    （400/401/403/404 从不重试），按 Retry-After 或退避时间等待后重试。"""

    marsho_retry_budget: float = Field(default=RETRY_BUDGET, ge=0, le=600)
    """Seconds retries, waits and fallbacks may add to one question (all its tool rounds
    together), beyond MARSHO_TIMEOUT per request: past them the question gets its error,
    whatever the endpoints do.

    zh: 在每次请求的 MARSHO_TIMEOUT 之外，重试、等待和切换备用接口最多给一个问题（含其所有工具轮次）增
    加多少秒：超过后无论接口如何，这个问题都会得到错误回复。"""

    marsho_api_keys: list[str] = Field(default_factory=list)
    """More API keys of MARSHO_BASE_URL (JSON list), used in turn with MARSHO_API_KEY: a key
    answered 429 rests, one refused with 401/403 is set aside and tried again rarely.
    `sk-a,sk-b` (separated by commas) is read as the list too.

    Example: ["sk-a", "sk-b"]

    zh: MARSHO_BASE_URL 的更多 API 密钥（JSON 列表），与 MARSHO_API_KEY 轮流使用：收到 429 的密钥会暂停
    一会儿，被 401/403 拒绝的密钥会被搁置，偶尔再试。也可以写成用逗号分隔的 `sk-a,sk-b`。"""

    marsho_fallbacks: list[FallbackEndpoint] = Field(default_factory=list)
    """Endpoints tried in order when MARSHO_BASE_URL fails, JSON list of `{"base_url": ...,
    "api_key" or "api_keys": ..., "model": ..., "tool_mode": ...}` (tool_mode optional).

    Example: [{"base_url": "https://api.deepseek.com/v1", "api_key": "sk-...", "model": "deepseek-chat"},
              {"base_url": "http://127.0.0.1:11434/v1", "model": "qwen3:8b", "tool_mode": "prompt"}]

    zh: MARSHO_BASE_URL 失败时依次尝试的备用接口，JSON 列表，每项为 `{"base_url": ..., "api_key" 或
    "api_keys": ..., "model": ..., "tool_mode": ...}`（tool_mode 可不填）。"""

    marsho_model_quirks: dict[str, QuirkOverride] = Field(default_factory=dict)
    """What models want, by name pattern, over the built-in profiles: JSON of `{"pattern": {field:
    value}}` with any of the fields `reasoning_back` (send the model's reasoning_content back with its
    tool calls), `reasoning_required` (the model refuses tool calls without it), `merge_same_role`
    (merge consecutive messages of one role), `system_as_user` (send the system prompt as a user
    message), `tool_call_content` (`null` or `empty`: the text of a message that only calls tools),
    `token_field` (`max_tokens` or `max_completion_tokens`) and `effort_field` (how
    MARSHO_REASONING_EFFORT is sent: `reasoning_effort`, `enable_thinking`, `thinking` or `none`).

    Example: {"my-reasoner*": {"reasoning_back": true, "merge_same_role": true, "system_as_user": false,
                               "tool_call_content": "empty", "token_field": "max_completion_tokens"}}

    zh: 各模型的特殊要求，按模型名通配模式填写，优先于内置配置：JSON `{"模式": {字段: 值}}`，可用的字段
    有 `reasoning_back`（把模型的 reasoning_content 随它的工具调用一起发回）、`reasoning_required`（模
    型拒绝不带它的工具调用）、`merge_same_role`（合并同一角色的连续消息）、`system_as_user`（把系统提示
    词作为用户消息发送）、`tool_call_content`（`null` 或 `empty`：只调用工具的消息的正文）、
    `token_field`（`max_tokens` 或 `max_completion_tokens`）和 `effort_field`（MARSHO_REASONING_EFFORT
    的发送方式：`reasoning_effort`、`enable_thinking`、`thinking` 或 `none`）。"""

    # --- group actions (issue 28) ---

    marsho_group_actions: bool = False
    """Whether marsho may mute, unmute and recall in groups when asked (the `group` tools), with
    the asker's own authority: it acts only where the person asking could do it themselves on
    the platform, and its own role allows it. A group's admins can turn it off there with
    `marsho.actions off`.

    zh: 是否允许 marsho 应要求在群里禁言、解除禁言、撤回消息（`group` 工具）。它只以提问者本人的权限
    行事：提问者自己在平台上能做、且机器人自己的身份也允许时才执行。群管理员可用 `marsho.actions off`
    在本群关闭。"""

    marsho_group_actions_kick: bool = False
    """Whether the group tools include `group__kick` (removing a member), which cannot be undone;
    only with MARSHO_GROUP_ACTIONS on.

    zh: 群工具是否包括 `group__kick`（踢出群成员）。踢人无法撤销；仅在 MARSHO_GROUP_ACTIONS 开启时有效。"""

    marsho_group_actions_per_hour: int = Field(default=10, ge=1, le=1000)
    """Group actions one person may have marsho do per hour, in all groups together.

    zh: 每人每小时最多能让 marsho 执行多少次群操作（所有群合计）。"""

    # --- reminders (issue 27) ---

    marsho_reminder_min_interval: float = Field(default=300, ge=60)
    """Seconds a repeating reminder waits at least between two times (`every`); one asked to
    repeat more often is refused, naming this minimum.

    zh: 重复提醒两次之间至少间隔的秒数；更频繁的重复会被拒绝，并说明最短间隔。"""

    marsho_reminder_grace: float = Field(default=10800, ge=0)
    """Seconds a reminder may be late after the bot was down and still be sent (saying how
    late); one missed by longer is dropped, and its asker told once.

    zh: 停机时错过的提醒在这么多秒内仍会补发（说明晚了多久）；更晚的不再发送，只告知设置者一次。"""

    marsho_reminders_per_user: int = Field(default=10, ge=1, le=10000)
    """Reminders one person may have at once, in all chats (superusers are not limited).

    zh: 每人同时最多可有的提醒数（所有聊天合计；超级用户不受限）。"""

    marsho_reminders_per_group: int = Field(default=30, ge=1, le=100000)
    """Reminders one group (or channel) may have at once, whoever set them.

    zh: 每个群（或频道）同时最多可有的提醒数，不论是谁设置的。"""

    # --- outages that end when the provider does (issue 25) ---

    marsho_retry_after_max: float = Field(default=RETRY_AFTER_MAX, ge=0, le=86400)
    """Seconds of a provider's Retry-After honoured at most: a key or endpoint asked to wait
    longer rests this long, and meanwhile one question at a time tries it every 30 s, so an
    outage ends when the provider's does, whatever the header said.

    zh: 最多遵守接口 Retry-After 要求的多少秒：要求更久的密钥或接口只暂停这么久；暂停期间每 30 秒让
    一个问题试一次，所以接口一恢复，机器人就能回答，不管响应头写了多久。"""
    # --- knowledge base (issue 29) ---

    marsho_kb: bool = True
    """Each chat's knowledge base: documents added with `marsho.kb add` (quoting a file), whose
    passages that fit each question go beside it, and the `docs` tool. A chat without documents
    costs nothing.

    zh: 每个聊天自己的资料库：用 `marsho.kb add`（引用一个文件）加入文档，每个问题旁会附上与之相关的段落，
    模型还可以用 `docs` 工具查找。没有文档的聊天不受任何影响。"""

    marsho_file_max_bytes: int = Field(default=20_000_000, ge=1000, le=1_000_000_000)
    """Largest file read (bytes): a larger one is refused, with this limit named.

    zh: 读取的文件最大多少字节；更大的文件会被拒绝，并说明这个上限。"""

    marsho_file_max_pages: int = Field(default=500, ge=1, le=100_000)
    """Most pages of a PDF (or sheets of a workbook) read.

    zh: PDF 最多读取多少页（或工作簿最多多少个工作表）。"""

    marsho_file_timeout: float = Field(default=60, gt=0, le=3600)
    """Seconds to download one file, and again to read it (a file that takes longer is refused).

    zh: 下载一个文件最多用多少秒，读取它也最多用这么多秒（超时的文件会被拒绝）。"""

    marsho_kb_max_documents: int = Field(default=50, ge=1, le=100_000)
    """Documents one chat's knowledge base holds at most.

    zh: 一个聊天的资料库最多保存多少份文档。"""

    marsho_kb_max_passages: int = Field(default=2000, ge=1, le=1_000_000)
    """Passages one document may be cut into at most (a longer one is refused).

    zh: 一份文档最多切成多少段（更长的文档会被拒绝）。"""

    marsho_kb_passage_chars: int = Field(default=800, ge=100, le=8000)
    """Characters of one passage at most: documents are cut between paragraphs into passages this long.

    zh: 每段最多多少个字符：文档在段落之间切成这么长的段。"""

    marsho_kb_recall: int = Field(default=3, ge=0, le=20)
    """Passages of the chat's knowledge base found for each question and put beside it; 0 for
    none (the model can still look with docs__search).

    zh: 每个问题旁附上多少段从本聊天资料库找到的段落；0 表示不附（模型仍可用 docs__search 查找）。"""

    marsho_embedding_model: str = ""
    """An embedding model on the endpoint (its `/v1/embeddings`): passages are also embedded, and
    search fuses full-text and vector rankings. Empty: full-text search alone (no embedding model
    is needed).

    zh: 接口上的向量模型（它的 `/v1/embeddings`）：设置后段落也会向量化，检索时融合全文检索和向量检索的
    排序。留空则只用全文检索（不需要向量模型）。"""

    # --- loops with other bots (issue 25) ---

    marsho_bot_detection: bool = True
    """Whether marsho tells other bots from people where the platform does not (OneBot v11 marks
    no sender as a bot) and does not answer them: a message carrying the invisible mark marsho
    puts at the end of its answers that start with a trigger word (another marsho, or a copy of
    such an answer), or a sender who, three times in a row, answers marsho quoting it faster
    than a person reads and types, or repeats its last answers; such a sender is not answered in
    that chat for 10 minutes. Superusers are never taken for bots; an account the platform
    marks as a bot is never answered, whatever this says.

    zh: 是否识别平台没有标明的其他机器人（OneBot v11 不标明发送者是不是机器人）并且不回应它们：带有
    marsho 在以触发词开头的回答末尾所加不可见标记的消息（另一个 marsho，或复制了这样的回答），或者连续
    三次引用 marsho 的消息回复它、快得不像人在阅读和打字，或重复它最近回答的发送者；这样的发送者在该
    聊天里 10 分钟内不会得到回应。超级用户从不会被当成机器人；平台标明是机器人的账号，无论这里怎么设都
    不回应。"""

    marsho_chat_answers_per_minute: int = Field(default=30, ge=0, le=1000)
    """Answers marsho sends in one chat within a minute before it pauses answering there (it
    says so once); 0: no limit. Chosen from bench/bot_loops.py: a lively group of eight
    members, each asking again 10–30 s after their answer came, got 17–22 answers a minute;
    one member flooding the bot (the default queue, an endpoint taking 1.5 s) 31–35; two bots
    answering each other, with nothing else in the way, over 5,000. 30 leaves the liveliest
    group room and stops a flood or a loop within a minute. Superusers are not held back.

    zh: 同一个聊天里一分钟内 marsho 最多回答多少次，达到后就暂停在这里回答（只提示一次）；0 表示不
    限制。依据 bench/bot_loops.py 的测量：八个成员各自在收到回答 10–30 秒后再问，一分钟得到 17–22 个
    回答；一个成员刷屏（默认队列，端点每次 1.5 秒）31–35 个；两个互相回答、毫无阻拦的机器人超过 5000 个。
    取 30，最热闹的群也够用，刷屏或死循环一分钟内就会停下。超级用户不受限制。"""

    marsho_chat_pause_seconds: float = Field(default=120, ge=1, le=86400)
    """How long a chat paused for too many answers must be quiet (no message for marsho) before
    marsho answers there again; at most ten times this in all. A superuser lifts the pause at
    once with `marsho.resume`.

    zh: 因回答过多而暂停的聊天，要安静（没有人叫 marsho）这么多秒后才恢复回答；总共最多暂停这个时长的
    十倍。超级用户可用 `marsho.resume` 立即解除。"""

    # --- streaming, stream-only models and reasoning effort (issue 26) ---

    marsho_stream: StreamMode = "auto"
    """Whether answers are asked for as a stream: `auto` streams when the answer is shown as it
    is written, and for a model that said it takes only streams (learned from its refusal, kept
    across restarts, shown by marsho.status); `true` always; `false` never. A streamed answer's
    usage is read from its last chunk.

    zh: 是否以流式请求回答：`auto` 在需要边写边显示回答时流式请求，对声明只接受流式请求的模型也流式请求
    （从它的拒绝中学到，重启后仍记得，marsho.status 会显示）；`true` 总是流式；`false` 从不流式。流式回答
    的用量取自最后一个数据块。"""

    marsho_reasoning_effort: Literal["", "minimal", "low", "medium", "high", "off"] = ""
    """How hard a reasoning model should think: `minimal`, `low`, `medium`, `high`, or `off` where
    the provider can turn thinking off; empty sends nothing. Sent as each provider takes it
    (OpenAI's and Gemini's `reasoning_effort`, DashScope's `enable_thinking` and
    `thinking_budget`, DeepSeek's `thinking`; MARSHO_MODEL_QUIRKS' `effort_field` chooses per
    model). A model that refuses the value is asked again without it, and from then on.

    zh: 推理模型思考的程度：`minimal`、`low`、`medium`、`high`，或在服务商支持时用 `off` 关闭思考；留空
    则不发送。按各服务商的方式发送（OpenAI 和 Gemini 的 `reasoning_effort`、通义千问 DashScope 的
    `enable_thinking` 与 `thinking_budget`、DeepSeek 的 `thinking`；MARSHO_MODEL_QUIRKS 的 `effort_field`
    可按模型选择）。拒绝这个值的模型会去掉它重新请求，之后也不再发送。"""

    # --- segmented replies (issue 26) ---
    marsho_segmented_reply: bool = False
    """Show an answer while it is written: on Telegram, Discord and Kook one message that grows
    (edited at most once a second); on QQ/OneBot and the others each finished paragraph sent as
    it is done, in at most MARSHO_SEGMENTS messages. The answer is then asked for as a stream
    (MARSHO_STREAM=auto); an answer that did not stream is sent as before.

    zh: 边写边显示回答：在 Telegram、Discord 和 Kook 上是一条不断变长的消息（每秒最多编辑一次）；在 QQ/OneBot
    和其他平台上每写完一段就发出一段，最多 MARSHO_SEGMENTS 条消息。这时回答以流式请求（MARSHO_STREAM=auto）；
    没有流式返回的回答照旧发送。"""

    marsho_segments: int = Field(default=3, ge=1, le=10)
    """Messages a segmented answer is sent in at most, where messages cannot be edited: the
    paragraphs past the first ones all go in the last message.

    zh: 在不能编辑消息的平台上，分段回答最多发成这么多条消息：超出的段落都放在最后一条里。"""

    marsho_typing_indicator: bool = True
    """Show that marsho is typing while the model thinks (once a turn has taken 2 s), where the
    platform has it (Telegram's chat action, Discord's typing, NapCat's `set_input_status` in
    private chats).

    zh: 模型思考时（一轮对话超过 2 秒后）显示“正在输入”，平台支持时才显示（Telegram 的聊天动作、Discord 的
    输入状态、NapCat 在私聊中的 `set_input_status`）。"""

    @field_validator("marsho_stream", mode="before")
    @classmethod
    def _stream_word(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            word = value.strip().lower()
            return {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false",
                    "off": "false"}.get(word, word)
        return value

    @field_validator("marsho_quota_fallback_model", "marsho_summary_model")
    @classmethod
    def _model_name(cls, value: str) -> str:
        value = value.strip()
        if value and not re.fullmatch(r"[\w.:/@+-]{1,128}", value):
            raise SettingError("setting.not_model", value=repr(value))
        return value

    @field_validator("marsho_name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise SettingError("setting.name_empty")
        return value

    @field_validator("marsho_allowed_groups", "marsho_denied_groups", "marsho_allowed_users",
                     "marsho_denied_users", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        # QQ ids are often written as numbers: [123456] means ["123456"]
        if isinstance(value, list):
            return [str(item) if isinstance(item, int) and not isinstance(item, bool) else item
                    for item in value]
        return value

    @field_validator("marsho_ignored_users", mode="before")
    @classmethod
    def _ignored_as_text(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(item) for item in value if not isinstance(item, bool)]
        return value

    @field_validator("marsho_active_quiet_hours")
    @classmethod
    def _quiet_hours(cls, value: str) -> str:
        value = value.strip()
        if value and QUIET_HOURS.fullmatch(value) is None:
            raise SettingError("setting.quiet_hours", value=repr(value))
        return value

    @field_validator("marsho_aliases")
    @classmethod
    def _aliases_not_blank(cls, value: list[str]) -> list[str]:
        return [alias.strip() for alias in value if alias.strip()]

    @field_validator("marsho_lang", mode="before")
    @classmethod
    def _language_alias(cls, value: Any) -> Any:
        return language_alias(value)

    @field_validator("marsho_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        value = value.strip()
        if value:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise SettingError("setting.time_zone", value=repr(value)) from None
        return value

    @field_validator("marsho_base_url")
    @classmethod
    def _base_url_is_http(cls, value: str) -> str:
        return http_base_url(value)

    @field_validator("marsho_api_keys", mode="before")
    @classmethod
    def _keys_by_comma(cls, value: Any) -> Any:
        # `MARSHO_API_KEYS=sk-a,sk-b` as well as the JSON list
        return value.split(",") if isinstance(value, str) else value

    @field_validator("marsho_api_keys")
    @classmethod
    def _keys_not_blank(cls, value: list[str]) -> list[str]:
        return [key.strip() for key in value if key.strip()]

    @field_validator("marsho_praises_file", mode="before")
    @classmethod
    def _praises_file(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            return None  # `MARSHO_PRAISES_FILE=` means the default
        return value

    @field_validator("marsho_praises_file")
    @classmethod
    def _praises_not_a_folder(cls, value: Path | None) -> Path | None:
        if value is not None and value.is_dir():
            raise SettingError("setting.folder", value=repr(str(value)), file=value / "praises.json")
        return value

    @model_validator(mode="after")
    def _pictures_fit_the_budget(self) -> Config:
        from .agent.tokens import IMAGE_TOKENS

        if self.marsho_max_images * IMAGE_TOKENS > self.marsho_history_tokens // 2:
            raise SettingError("setting.images_budget", images=self.marsho_max_images,
                               tokens=self.marsho_max_images * IMAGE_TOKENS,
                               budget=self.marsho_history_tokens)
        return self

    @property
    def trigger_names(self) -> list[str]:
        """The trigger word followed by its aliases, without duplicates."""
        names: list[str] = []
        for name in [self.marsho_name, *self.marsho_aliases]:
            if name.casefold() not in (n.casefold() for n in names):
                names.append(name)
        return names


def _where(loc: tuple[int | str, ...]) -> str:
    """`MARSHO_FALLBACKS[0].model`, `MARSHO_MODEL_QUIRKS['o1*'].token_field`: the key, the entry
    of its JSON list or object, and the field inside it."""
    entry = "".join(f"[{part!r}]" for part in loc[1:2])
    return f"{str(loc[0]).upper()}{entry}{''.join(f'.{part}' for part in loc[2:])}"


def describe_validation_error(error: ValidationError, language: str = "en") -> str:
    """Turn pydantic's error into lines naming each bad `.env` key and what is wrong, in
    `language` (its punctuation too: `：` and `；` in Chinese)."""
    lines = []
    colon, semicolon = ("：", "；") if language == "zh-CN" else (": ", "; ")
    for item in error.errors():
        message = _message(item, language)
        if item["loc"] and item["loc"][0] in SECRET_SETTINGS:  # the value may hold keys
            lines.append(f"{_where(item['loc'])}{colon}{message}")
        elif item["loc"] and item["loc"][0] == "marsho_model_quirks":
            lines.append(f"{_where(item['loc'])}={item.get('input')!r}{colon}{message}")
        elif item["loc"]:
            lines.append(f"{str(item['loc'][0]).upper()}={item.get('input')!r}{colon}{message}")
        else:  # a rule between settings: the message names them
            lines.append(message)
    return i18n.text(language, "config.invalid", problems=semicolon.join(lines))


LEGACY_KEYS: dict[str, tuple[str, ...]] = {
    "marsho_api_key": ("marshoai_token",),
    "marsho_base_url": ("marshoai_endpoint", "marshoai_azure_endpoint"),
    "marsho_model": ("marshoai_default_model",),
    "marsho_name": ("marshoai_default_name",),
    "marsho_aliases": ("marshoai_aliases",),
    "marsho_system_prompt": ("marshoai_prompt",),
    "marsho_additional_prompt": ("marshoai_additional_prompt",),
    "marsho_time_prompt": ("marshoai_enable_time_prompt",),
    "marsho_nickname_limit": ("marshoai_nickname_limit",),
    "marsho_send_reasoning": ("marshoai_send_thinking",),
    "marsho_render_inline_latex": ("marshoai_single_latex_parse",),
    "marsho_render_latex": ("marshoai_enable_richtext_parse",),
    "marsho_render_markdown_images": ("marshoai_enable_richtext_parse",),
    "marsho_at": ("marshoai_at",),
    "marsho_timeout": ("marshoai_timeout",),
    "marsho_toolkit_dirs": ("marshoai_toolset_dir",),
    "marsho_disabled_toolkits": ("marshoai_disabled_toolkits",),
}
"""nonebot-plugin-marshoai's `.env` keys, read when the MARSHO_* key is absent or empty."""

_NO_PLUGINS = "marshoai's plugins do not load (toolkit folders do: MARSHO_TOOLKIT_DIRS)"
_NO_SAMPLING = "Marsho sends no sampling parameters (temperature, top_p, max_tokens...)"
UNSUPPORTED_LEGACY_KEYS: dict[str, str] = {
    "marshoai_use_yaml_config": "Marsho reads .env only, never config/marshoai/config.yaml",
    "marshoai_main_colour": "Marsho has no theme colour",
    "marshoai_sysasuser_prompt": "Marsho has no such setting",
    "marshoai_enable_sysasuser_prompt": "Marsho has no such setting",
    "marshoai_poke_suffix": "pokes are answered as MARSHO_POKE says (model, fixed or off)",
    "marshoai_enable_nickname_tip": "Marsho never asks for a nickname",
    "marshoai_enforce_nickname": "Marsho never asks for a nickname",
    "marshoai_enable_support_image_tip": "a model outside MARSHO_VISION_MODELS always gets the tip",
    "marshoai_enable_praises": "praises.json is used when it exists (MARSHO_PRAISES_FILE)",
    "marshoai_enable_tools": "toolkits are always loaded; MARSHO_TOOL_MODE=off sends the model none",
    "marshoai_load_builtin_tools": "leave built-in toolkits out with MARSHO_DISABLED_TOOLKITS",
    "marshoai_fix_toolcalls": "not needed: tool calls are run whatever the finish reason",
    "marshoai_enable_plugins": _NO_PLUGINS,
    "marshoai_plugins": _NO_PLUGINS,
    "marshoai_plugin_dirs": _NO_PLUGINS,
    "marshoai_devmode": _NO_PLUGINS,
    "marshoai_model_args": _NO_SAMPLING,
    "marshoai_temperature": _NO_SAMPLING,
    "marshoai_top_p": _NO_SAMPLING,
    "marshoai_max_tokens": _NO_SAMPLING,
    "marshoai_additional_image_models": "list those models in MARSHO_VISION_MODELS (it replaces the "
                                        "default list, so keep the ones you use)",
    "marshoai_support_image_models": "use MARSHO_VISION_MODELS",
    "marshoai_tencent_secretid": "Marsho has no Tencent Cloud toolkit",
    "marshoai_tencent_secretkey": "Marsho has no Tencent Cloud toolkit",
}
"""nonebot-plugin-marshoai's keys (its config.py and docs) that Marsho does not read, and why.
Any other MARSHOAI_* key is reported too, as having no equivalent."""

_FROM_MARSHOAI = "(from nonebot-plugin-marshoai)"


def _blank(value: Any) -> bool:
    """`KEY=` (empty or spaces) or a bare `KEY` in .env."""
    return value is None or (isinstance(value, str) and not value.strip())


MARSHOAI_DEFAULT_ENDPOINT = "https://models.inference.ai.azure.com"
"""Where nonebot-plugin-marshoai sends its token when no endpoint is set (GitHub Models)."""


def _legacy_value(
    data: Mapping[str, Any], key: str, legacy: tuple[str, ...]
) -> tuple[str | None, dict[str, str]]:
    """For one setting of ours: the marshoai key whose value it takes (None: none), and why each
    other of its marshoai keys in `data` is not read as it."""
    ours = key.upper()
    given = [old for old in legacy if old in data]
    if not _blank(data.get(key)):
        return None, dict.fromkeys(given, f"{ours} is set")
    filled = [old for old in given if not _blank(data[old])]
    why_not = {old: "it is empty" for old in given if old not in filled}
    if not filled:
        return None, why_not
    why_not.update(dict.fromkeys(filled[1:], f"{filled[0].upper()} is read as {ours}"))
    return filled[0], why_not


def _legacy_notes(read_as: Mapping[str, list[str]], ignored: Mapping[str, list[str]]) -> list[str]:
    """A note for every marshoai key read as ours or ignored, in the order they came."""
    notes = []
    for old in dict.fromkeys([*read_as, *ignored]):
        if old in read_as:
            notes.append(f"{old.upper()} {_FROM_MARSHOAI} is read as {' and '.join(read_as[old])}; "
                         "rename it in .env")
        if old in ignored:
            how = "is not read as those" if old in read_as else "is ignored"
            notes.append(f"{old.upper()} {_FROM_MARSHOAI} {how}: {'; '.join(dict.fromkeys(ignored[old]))}")
    return notes


_KNOWN_LEGACY_KEYS = frozenset(old for legacy in LEGACY_KEYS.values() for old in legacy)


def apply_legacy_keys(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """NoneBot's settings with marshoai's keys copied to ours where ours are absent or empty, and
    a note for every marshoai key: read as which of ours (rename it), or ignored and why.

    An empty MARSHO_* value (`MARSHO_API_KEY=`, as an example file has it) counts as absent when
    the marshoai key has a value; an empty marshoai value is ignored.
    """
    data = dict(data)
    read_as: dict[str, list[str]] = {}
    ignored: dict[str, list[str]] = {}
    for key, legacy in LEGACY_KEYS.items():
        taken, why_not = _legacy_value(data, key, legacy)
        if taken is not None:
            data[key] = data[taken]
            read_as.setdefault(taken, []).append(key.upper())
        for old, reason in why_not.items():
            ignored.setdefault(old, []).append(reason)
    notes = _legacy_notes(read_as, ignored)
    for old in sorted(k for k in data if k.startswith("marshoai_") and k not in _KNOWN_LEGACY_KEYS):
        reason = UNSUPPORTED_LEGACY_KEYS.get(old, "Marsho has no equivalent")
        notes.append(f"{old.upper()} {_FROM_MARSHOAI} is ignored: {reason}")
    if "marshoai_token" in read_as and _blank(data.get("marsho_base_url")):
        # marshoai's token is a GitHub token for its default endpoint: sent anywhere else it
        # fails, and reaches a third party
        data["marsho_base_url"] = MARSHOAI_DEFAULT_ENDPOINT
        notes.append(f"MARSHOAI_TOKEN {_FROM_MARSHOAI} is used with marshoai's default endpoint "
                     f"{MARSHOAI_DEFAULT_ENDPOINT}, as no endpoint is set; set MARSHO_BASE_URL to change it")
    return data, notes


_SUGGESTIONS = {
    "marsho_token": "marsho_api_key", "marsho_key": "marsho_api_key", "marsho_endpoint": "marsho_base_url",
    "marsho_url": "marsho_base_url", "marsho_prompt": "marsho_system_prompt",
    "marsho_default_model": "marsho_model", "marsho_default_name": "marsho_name",
}
"""Keys people guess (marshoai's names with our prefix) and the setting they mean."""


def settings_keys(settings: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, bool]:
    """Every key of NoneBot's config (its `.env` files) and of the environment, lower case and
    without a nested `__part`; True for those only the environment holds."""
    keys = {name.lower().split("__")[0]: False for name in settings}
    for name in environ:
        keys.setdefault(name.lower().split("__")[0], True)
    return keys


def misspelled_keys(keys: Mapping[str, bool]) -> list[str]:
    """A warning for every MARSHO_* key that is not a setting, naming the closest one."""
    fields = list(Config.model_fields)
    warnings = []
    for key in sorted(k for k in keys if k.startswith("marsho_") and k not in Config.model_fields):
        close = _SUGGESTIONS.get(key) or next(iter(difflib.get_close_matches(
            key.removeprefix("marsho_"), [f.removeprefix("marsho_") for f in fields], n=1, cutoff=0.6
        )), None)
        guess = f"did you mean {'MARSHO_' + close.removeprefix('marsho_').upper()}?" if close else (
            "see .env.example for the settings")
        where = (" (if a ${" + key.upper() + "} in mcp.json or webservices.json uses it, ignore this)"
                 if keys[key] else "")
        warnings.append(f"{key.upper()} is not a setting; {guess}{where}")
    return warnings


def read_config() -> tuple[Config, str, list[str]]:
    """The plugin's settings from NoneBot's config: (config, problem, notes). On a bad value, the
    defaults and the problem (in MARSHO_LANG if that setting is fine); notes say which marshoai
    keys were read in place of ours or ignored and why, and which MARSHO_* keys are no setting.

    A bad `.env` value must not keep the bot from starting: the plugin loads with defaults
    and answers every chat with what to fix (see chat/matchers.py).
    """
    from nonebot import get_driver, get_plugin_config

    settings = get_driver().config.model_dump()
    keys = settings_keys(settings, os.environ)
    # every MARSHO_* and marshoai key as NoneBot reads it (JSON decoded where ours is a list or
    # a dict), before validation: an empty MARSHO_* key gives way to a marshoai one
    data = get_plugin_config(_RawSettings).model_dump(exclude_unset=True)
    environ = {name.lower(): value for name, value in os.environ.items()}
    for key in keys:
        if key.startswith("marshoai_") and key not in data:  # named in the notes, not used
            data[key] = settings.get(key, environ.get(key))
    data, notes = apply_legacy_keys(data)
    notes += misspelled_keys(keys)
    try:
        config = Config.model_validate(data)
    except ValidationError as error:
        # the complaint itself in the language asked for, if that setting is fine
        try:
            language = get_plugin_config(_LanguageOnly).marsho_lang
        except ValidationError:
            language = "zh-CN"
        return Config(), describe_validation_error(error, language), notes
    return config, "", notes


class _LanguageOnly(BaseModel):
    marsho_lang: Language = "zh-CN"

    @field_validator("marsho_lang", mode="before")
    @classmethod
    def _language_alias(cls, value: Any) -> Any:
        return language_alias(value)


def _as_written(annotation: Any) -> Any:
    """Any value, JSON-decoded by NoneBot (when it can be) where ours is a list or a dict."""
    args = get_args(annotation) if origin_is_union(get_origin(annotation)) else (annotation,)
    return Union[dict[str, Any], Any] if any(type_is_complex(arg) for arg in args) else Any  # noqa: UP007


_RawSettings = create_model(  # type: ignore[call-overload]
    "_RawSettings",
    **{name: (_as_written(field.annotation), None) for name, field in Config.model_fields.items()},
    **{old: (_as_written(Config.model_fields[key].annotation), None)
       for key, legacy in LEGACY_KEYS.items() for old in legacy},
)
