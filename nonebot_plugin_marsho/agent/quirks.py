"""What each model family wants a request to look like, as data: a small table of profiles matched
by model name pattern (overridable with MARSHO_MODEL_QUIRKS), and the one function that shapes
the messages of a request for a profile. The conversation itself stays in the plain OpenAI shape;
only what goes on the wire is shaped, so a turn can move to another model mid-way."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..exceptions import EndpointError
from .model.base import Wrapper

if TYPE_CHECKING:
    from .model.base import Completion, Model, ModelRequest
    from .model.learned import Learned

Message = dict[str, Any]


EffortField = Literal["reasoning_effort", "enable_thinking", "thinking", "none"]
"""How a model family is told the reasoning effort (`Quirks.effort_field`)."""

Effort = Literal["minimal", "low", "medium", "high", "off"]
"""MARSHO_REASONING_EFFORT's values."""

class Quirks(BaseModel):
    """One model family's needs; the defaults are what OpenAI-compatible servers mostly take."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reasoning_back: bool = True
    """Send `reasoning_content` back with the assistant's tool calls within the turn (DeepSeek's
    and MiMo's thinking modes refuse the next request without it); only to the endpoint whose
    model gave it, never to another one the turn moved to."""
    reasoning_required: bool = False
    """The model refuses an assistant message with tool calls but no `reasoning_content`
    (DeepSeek's reasoner, MiMo, Kimi K2 thinking): where another endpoint's model gave the
    reasoning (a turn that moved mid-way), the field is sent empty."""
    merge_same_role: bool = False
    """Merge consecutive messages of the same role (DeepSeek's reasoner refuses them)."""
    system_as_user: bool = False
    """Send the system prompt as a user message (o1-mini and o1-preview refuse `system`)."""
    tool_call_content: Literal["null", "empty"] = "null"
    """Text of an assistant message that only calls tools: `null` or `""` (some servers refuse
    the one, some the other)."""
    token_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The field MARSHO_MAX_ANSWER_TOKENS is sent in (OpenAI's reasoning models refuse
    `max_tokens`)."""
    effort_field: EffortField | None = Field(default=None, exclude=True)
    """How MARSHO_REASONING_EFFORT is sent (`effort_options`): OpenAI's and Gemini's
    `reasoning_effort`, DashScope's `enable_thinking` and `thinking_budget`, DeepSeek's
    `thinking` switch, or `none` (not sent); None: as EFFORT_FIELDS says for the model's name.
    Only given by MARSHO_MODEL_QUIRKS, so not in a profile's dump (which says how messages are
    shaped)."""


THINKING_BUDGETS: dict[str, int] = {"minimal": 512, "low": 2048, "medium": 8192, "high": 32768}
"""DashScope's `thinking_budget` (tokens of reasoning) for each effort."""


def effort_options(field: EffortField, effort: str | None) -> dict[str, Any]:
    """The body fields that ask for `effort` the way `field` says (none for `none`, or no effort)."""
    if effort is None or field == "none":
        return {}
    if field == "reasoning_effort":  # OpenAI's gpt-5.1 and Gemini take "none" for no thinking
        return {"reasoning_effort": "none" if effort == "off" else effort}
    if field == "enable_thinking":
        if effort == "off":
            return {"enable_thinking": False}
        return {"enable_thinking": True, "thinking_budget": THINKING_BUDGETS.get(effort, 8192)}
    return {"thinking": {"type": "disabled" if effort == "off" else "enabled"}}


_EFFORT_REFUSED = re.compile(r"reasoning[_ ]effort|enable_thinking|thinking_budget|\bthinking\b",
                             re.IGNORECASE)


def refuses_effort(error: EndpointError, options: Mapping[str, Any]) -> bool:
    """A 400 naming the field the effort went in (not one saying the model must be streamed)."""
    from .model.stream import only_streams

    if error.status != 400 or not options or only_streams(error):
        return False
    return _EFFORT_REFUSED.search(str(error)) is not None


QuirkFields = dict[str, Any]


class QuirkOverride(BaseModel):
    """One MARSHO_MODEL_QUIRKS entry: the fields it gives replace the profile's."""

    model_config = ConfigDict(extra="forbid")

    reasoning_back: bool | None = None
    reasoning_required: bool | None = None
    merge_same_role: bool | None = None
    system_as_user: bool | None = None
    tool_call_content: Literal["null", "empty"] | None = None
    token_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    effort_field: EffortField | None = None

    def fields(self) -> QuirkFields:
        """The fields given (the others stay the profile's)."""
        return {name: value for name, value in self.model_dump().items() if value is not None}

PROFILES: list[tuple[tuple[str, ...], QuirkFields]] = [
    (("deepseek-reasoner*", "deepseek-r1*", "*/deepseek-r1*"),
     {"reasoning_back": True, "reasoning_required": True, "merge_same_role": True}),
    (("mimo*", "*/mimo*"), {"reasoning_back": True, "reasoning_required": True}),
    (("kimi-k2-thinking*", "*/kimi-k2-thinking*"), {"reasoning_back": True, "reasoning_required": True}),
    (("o1-mini*", "o1-preview*"),
     {"reasoning_back": False, "system_as_user": True, "token_field": "max_completion_tokens"}),
    (("o1*", "o3*", "o4*", "gpt-5*"), {"reasoning_back": False, "token_field": "max_completion_tokens"}),
    (("gpt-*", "chatgpt-*"), {"reasoning_back": False}),
    (("qwen*", "qwq*", "*/qwen*", "*/qwq*"), {"tool_call_content": "empty"}),
]
"""Built-in profiles: the first whose pattern matches the model name (any case) applies."""


EFFORT_FIELDS: list[tuple[tuple[str, ...], EffortField]] = [
    (("o1*", "o3*", "o4*", "gpt-5*", "gemini*", "*/gemini*"), "reasoning_effort"),
    (("gpt-*", "chatgpt-*"), "none"),  # gpt-4o, gpt-4.1: no reasoning to set
    (("deepseek*", "*/deepseek*"), "thinking"),
    (("qwen*", "qwq*", "*/qwen*", "*/qwq*"), "enable_thinking"),
]
"""How each family takes MARSHO_REASONING_EFFORT, by model name pattern (the first that matches;
`reasoning_effort` for the others), unless MARSHO_MODEL_QUIRKS gives `effort_field`."""


def effort_field_of(model: str, quirks: Quirks) -> EffortField:
    """The field MARSHO_REASONING_EFFORT goes in for `model`."""
    if quirks.effort_field is not None:
        return quirks.effort_field
    name = model.casefold()
    return next((field for patterns, field in EFFORT_FIELDS
                 if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)), "reasoning_effort")


def quirks_for(model: str, overrides: Mapping[str, QuirkFields] | None = None) -> Quirks:
    """The profile of `model`: the built-in one that matches, then every MARSHO_MODEL_QUIRKS
    entry whose pattern matches, its fields on top."""
    name = model.casefold()
    fields: QuirkFields = {}
    for patterns, profile in PROFILES:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            fields.update(profile)
            break
    for pattern, given in (overrides or {}).items():
        if fnmatch.fnmatchcase(name, pattern.casefold()):
            fields.update(given)
    return Quirks(**fields)


def _as_parts(content: Any) -> list[Any]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def _joined(first: Any, second: Any) -> Any:
    if not first:
        return second
    if not second:
        return first
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    return [*_as_parts(first), *_as_parts(second)]


def shaped(messages: list[Message], quirks: Quirks, foreign: Collection[str] = ()) -> list[Message]:
    """The messages as `quirks` wants them sent (new dicts where something changed).

    `foreign`: reasoning that another endpoint gave (a turn that moved mid-way): never sent to
    this one, whose model did not think it; a model that refuses tool calls without
    `reasoning_content` (`reasoning_required`) gets it empty there."""
    if not foreign and not quirks.merge_same_role and not quirks.system_as_user:
        # most families, most requests: only an assistant message's tool calls can change
        return [_tool_call_shaped(message, quirks)
                if message.get("tool_calls") and message.get("role") == "assistant" else message
                for message in messages]
    out: list[Message] = []
    for message in messages:
        message = _shaped_one(message, quirks, foreign)
        role = message.get("role")
        if (quirks.merge_same_role and out and role in ("system", "user", "assistant")
                and out[-1].get("role") == role):
            out[-1] = _merged(out[-1], message, quirks)
        else:
            out.append(message)
    return out


def _shaped_one(message: Message, quirks: Quirks, foreign: Collection[str]) -> Message:
    """One message as `quirks` wants it, on its own (merging is `shaped`'s)."""
    reasoning = message.get("reasoning_content")
    if foreign and isinstance(reasoning, str) and reasoning in foreign:
        message = {k: v for k, v in message.items() if k != "reasoning_content"}
        if quirks.reasoning_required and quirks.reasoning_back and message.get("tool_calls"):
            message["reasoning_content"] = ""
    if message.get("role") == "system" and quirks.system_as_user:
        message = {**message, "role": "user"}
    if message.get("role") == "assistant" and message.get("tool_calls"):
        message = _tool_call_shaped(message, quirks)
    return message


def _tool_call_shaped(message: Message, quirks: Quirks) -> Message:
    """An assistant message with tool calls: its empty text as the family wants it, and its
    reasoning left out for a family that does not take it back."""
    empty = "" if quirks.tool_call_content == "empty" else None
    if not message.get("content") and message.get("content", 0) != empty:
        message = {**message, "content": empty}
    if not quirks.reasoning_back and "reasoning_content" in message:
        message = {k: v for k, v in message.items() if k != "reasoning_content"}
    return message


def _merged(previous: Message, message: Message, quirks: Quirks) -> Message:
    """Two consecutive messages of one role as one (DeepSeek's reasoner refuses them apart)."""
    merged = {**previous, "content": _joined(previous.get("content"), message.get("content"))}
    calls = [*(previous.get("tool_calls") or []), *(message.get("tool_calls") or [])]
    if calls:
        merged["tool_calls"] = calls
        if not merged["content"]:
            merged["content"] = "" if quirks.tool_call_content == "empty" else None
    if message.get("reasoning_content") and quirks.reasoning_back:
        merged["reasoning_content"] = message["reasoning_content"]
    return merged


class Quirked(Wrapper):
    """The part that shapes each request for its model's family (the conversation stays in the
    plain OpenAI shape; only the wire changes), sends MARSHO_MAX_ANSWER_TOKENS in the field the
    family takes, and MARSHO_REASONING_EFFORT as the family asks for it: a model that refuses
    the effort is asked again without it, and from then on (`Learned`)."""

    def __init__(self, inner: Model, overrides: Mapping[str, QuirkFields] | None = None,
                 max_answer_tokens: int | None = None, *, reasoning_effort: str | None = None,
                 learned: Learned | None = None, base_url: str = "") -> None:
        super().__init__(inner)
        self.overrides = dict(overrides or {})
        """MARSHO_MODEL_QUIRKS: fields by model name pattern, over the built-in profiles."""
        self.max_answer_tokens = max_answer_tokens
        self.reasoning_effort = reasoning_effort
        """MARSHO_REASONING_EFFORT (None: nothing is sent)."""
        self.learned = learned
        self.base_url = base_url
        self._quirks: dict[str, Quirks] = {}

    def quirks_of(self, model: str) -> Quirks:
        """The profile of `model`, matched once per model name."""
        quirks = self._quirks.get(model)
        if quirks is None:
            quirks = self._quirks[model] = quirks_for(model, self.overrides)
        return quirks

    async def request(self, request: ModelRequest) -> Completion:
        quirks = self.quirks_of(request.model)
        options = {**request.options}
        if self.max_answer_tokens:
            options[quirks.token_field] = self.max_answer_tokens
        effort = self.reasoning_effort
        if effort is not None and self.learned is not None:
            effort = self.learned.effort_for(request.model, effort)
        thinking = effort_options(effort_field_of(request.model, quirks), effort) if effort else {}
        messages = shaped(request.messages, quirks, request.foreign)
        shaped_request = request.but(messages=messages, options={**options, **thinking})
        if not thinking:
            return await self.inner.request(shaped_request)
        try:
            return await self.inner.request(shaped_request)
        except EndpointError as error:
            if not refuses_effort(error, thinking) or effort is None:
                raise
            if self.learned is not None:
                self.learned.learn_effort_refused(request.model, effort, self.base_url, error)
        return await self.inner.request(shaped_request.but(options=options))
