"""Tools for models without native function calling (MARSHO_TOOL_MODE=prompt): the tool list and
the calling format go into the system prompt, calls are read back from the model's text, and
native tool messages in history are rewritten as plain text. `PromptTools` is the model part
that does it for the models that need it (configured, or learned from a refusal)."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..exceptions import EndpointError
from ..redaction import logger
from ..tools.model import ToolCall
from ..tools.runner import UNREADABLE_ARGUMENTS, clean_text, json_text
from .framing import framed
from .model.base import Wrapper

if TYPE_CHECKING:
    from .model.base import Completion, Model, ModelRequest, ToolMode

CALLING_FORMAT = (
    '[{"name": "{function name}", '
    '"arguments": {"{argument1 name}": xxx, "{argument2 name}": xxx}}]'
)
"""Seed 003's tools_calling_format."""

_FENCE_INFO = re.compile(r"[A-Za-z0-9_-]*\s*")
"""What follows a fence's opening backticks before the code: the language and blank space."""

MAX_BARE_TRIES = 200
"""Places where a bare JSON list or object could start that are tried, per answer: each try can
read to the end of the text, and a hostile answer can hold thousands of brackets."""

ARGUMENTS_PLACEHOLDER = json.dumps("(arguments not shown: they could not be read back as JSON)")
"""What a stored call's arguments become in prompt mode when they cannot be written as JSON."""


def _type_of(schema: dict[str, Any]) -> str:
    if "type" in schema:
        kind = schema["type"]
        return "/".join(kind) if isinstance(kind, list) else str(kind)
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return " or ".join(_type_of(option) for option in options)
    return "any"


def tools_instruction(schemas: list[dict[str, Any]]) -> str:
    """Seed 003's tools_instruction: every tool, its arguments, their types and descriptions."""
    lines = [
        "## Tool Functions:",
        "The following tool functions are available in the format of",
        "```",
        "{index}. {function name}: {function description}",
        "{argument1 name} ({argument type}): {argument description}",
        "{argument2 name} ({argument type}): {argument description}",
        "...",
        "```",
        "",
    ]
    for index, schema in enumerate(schemas, 1):
        function = schema["function"]
        lines.append(f"{index}. {function['name']}: {function.get('description', '')}".rstrip())
        parameters = function.get("parameters") or {}
        required = set(parameters.get("required", []))
        for name, prop in (parameters.get("properties") or {}).items():
            note = "" if name in required else ", optional"
            description = prop.get("description", "") if isinstance(prop, dict) else ""
            kind = _type_of(prop) if isinstance(prop, dict) else "any"
            lines.append(f"    {name} ({kind}{note}): {description}".rstrip())
    return "\n".join(lines)


def system_addendum(schemas: list[dict[str, Any]]) -> str:
    """What is added to the system prompt so that the model can call tools by writing JSON."""
    return (
        f"{tools_instruction(schemas)}\n\n"
        "## How to call tools\n"
        "To call one or more tools, reply with ONLY a JSON list in this format, and nothing "
        f"else:\n{CALLING_FORMAT}\n"
        "The results will come back in the next message. Then answer the user in plain words, "
        "without JSON. If no tool is needed, answer directly."
    )


def _as_calls(data: Any) -> list[ToolCall] | None:
    if isinstance(data, dict):  # a lone object counts only in full call form
        data = [data] if "arguments" in data else None
    if not isinstance(data, list) or not data:
        return None
    calls = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        arguments = item.get("arguments", {})
        if not isinstance(arguments, str):  # nested too deeply to write back: the runner says so
            arguments = json_text(arguments) or UNREADABLE_ARGUMENTS
        calls.append(ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", name=clean_text(item["name"]),
                              arguments=clean_text(arguments)))
    return calls


def _fenced_blocks(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, code) of each ``` block in order, fences paired as they come: one pass over
    the text, whatever it holds (a regex with a lazy `.*?` is quadratic on unclosed fences)."""
    position = 0
    while (start := text.find("```", position)) >= 0:
        close = text.find("```", start + 3)
        if close < 0:
            return
        info = _FENCE_INFO.match(text, start + 3, close)
        yield start, close + 3, text[info.end() if info else start + 3:close]
        position = close + 3


def _calls_in(code: str) -> list[ToolCall] | None:
    try:
        return _as_calls(json.loads(code))
    except (ValueError, RecursionError):  # not JSON, nested too deeply, an int past 4300 digits
        return None


def parse_tool_calls(text: str) -> tuple[list[ToolCall], str]:
    """Seed 003's parse step: a JSON list of calls in the text (fenced or bare) → the calls and
    the text without them. No calls found → ([], text)."""
    for start, end, code in _fenced_blocks(text):
        calls = _calls_in(code)
        if calls:
            return calls, (text[:start] + text[end:]).strip()
    decoder = json.JSONDecoder()
    for tries, match in enumerate(re.finditer(r"[\[{]", text)):
        if tries >= MAX_BARE_TRIES:
            break
        start = match.start()
        try:
            data, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        calls = _as_calls(data)
        if calls:
            return calls, (text[:start] + text[end:]).strip()
    return [], text


def _call_text(call: Any) -> tuple[str, str]:
    """A stored call's name and its arguments as JSON text: the JSON it holds, written again (the
    text itself as a JSON string when it is not JSON), or a short placeholder when that cannot
    be done (nested past the stack, numbers past 4300 digits): a stored turn never fails one."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        function = {}
    name = function.get("name", "")
    arguments: Any = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
        except (ValueError, RecursionError):
            return name if isinstance(name, str) else "?", ARGUMENTS_PLACEHOLDER
    return name if isinstance(name, str) else "?", json_text(arguments) or ARGUMENTS_PLACEHOLDER


def to_prompt_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Native tool messages rewritten as plain text that any chat model accepts: an assistant
    call becomes its JSON list, the results become one "Tool results:" user
    message, each numbered with its function, arguments, status and result."""
    converted: list[dict[str, Any]] = []
    names: dict[str, tuple[str, str]] = {}
    results: list[str] = []

    def flush() -> None:
        if results:
            converted.append({"role": "user", "content": "Tool results:\n" + "\n".join(results)})
            results.clear()

    for message in messages:
        role = message.get("role")
        if role == "tool":
            name, arguments = names.get(message.get("tool_call_id", ""), ("?", "{}"))
            content = str(message.get("content", ""))
            status = "ERROR" if content.startswith("Error:") else "SUCCESS"
            results.append(
                f"{len(results) + 1}. Execute function {name}\n"
                f"    [ARGUMENTS]: {arguments}\n"
                f"    [STATUS]: {status}\n"
                f"    [RESULT]: {framed(content)}"  # its lines cannot start a forged entry
            )
            continue
        flush()
        if role == "assistant" and message.get("tool_calls"):
            calls = [_call_text(call) for call in message["tool_calls"]]
            for call, raw in zip(calls, message["tool_calls"], strict=True):
                if isinstance(raw, dict):
                    names[raw.get("id", "")] = call
            # json.dumps([{"name": ..., "arguments": ...}]) would write the same text, but fails
            # on the whole list when one part cannot be written
            text = "[" + ", ".join(
                f'{{"name": {json_text(name)}, "arguments": {arguments}}}' for name, arguments in calls
            ) + "]"
            if message.get("content"):
                text = f"{message['content']}\n{text}"
            converted.append({"role": "assistant", "content": text})
        else:
            converted.append(message)
    flush()
    return converted


_TOOLS_REFUSED = re.compile(
    r"(tool|function)[^.]{0,60}(not (be )?supported|unsupported|not available|not enabled)"
    r"|(not support|unsupported|does not support)[^.]{0,60}(tool|function)",
    re.IGNORECASE,
)


def _refuses_tools(error: EndpointError) -> bool:
    """A 400 saying the model cannot take `tools` (wordings of OpenAI-compatible servers)."""
    return error.status == 400 and _TOOLS_REFUSED.search(str(error)) is not None


def _with_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


class ToolModes:
    """How tools reach each model: an endpoint's own MARSHO_FALLBACKS tool_mode, else
    MARSHO_TOOL_MODE_BY_MODEL, else prompt mode learned from a refusal, else MARSHO_TOOL_MODE.
    One per chain: what is learned of a model holds on every endpoint that serves it."""

    def __init__(self, default: ToolMode = "native", by_model: Mapping[str, ToolMode] | None = None) -> None:
        self.default = default
        self.by_model = dict(by_model or {})
        self.learned: set[str] = set()
        """Models that refused native tools: asked in prompt mode from then on."""

    def of(self, model: str, configured: ToolMode | None = None) -> ToolMode:
        if configured is not None:
            return configured
        if model in self.by_model:
            return self.by_model[model]
        if model in self.learned:
            return "prompt"
        return self.default


class PromptTools(Wrapper):
    """The part that offers tools in the model's tool mode; calls come back as ToolCalls whatever
    the mode, and the messages given are always in the native format. A model that refuses
    native tools is asked again in prompt mode, and from then on."""

    def __init__(self, inner: Model, modes: ToolModes, configured: ToolMode | None = None, *,
                 base_url: str = "") -> None:
        super().__init__(inner)
        self.modes = modes
        self.base_url = base_url
        """The endpoint's, named in the log line when it refuses tools."""
        self.configured = configured
        """The endpoint's own tool mode (a MARSHO_FALLBACKS entry's), over the others."""

    async def request(self, request: ModelRequest) -> Completion:
        mode = self.modes.of(request.model, self.configured)
        if mode == "native":
            try:
                return await self.inner.request(request)
            except EndpointError as error:
                if not request.tools or not _refuses_tools(error):
                    raise
                self.modes.learned.add(request.model)
                logger.warning(
                    f"marsho: {self.base_url} refused tools for model "
                    f"{request.model} ({error}); using prompt mode for it from now on (set "
                    "MARSHO_TOOL_MODE_BY_MODEL to choose yourself)"
                )
                mode = "prompt"
        return await self._in_text(request, tools=request.tools if mode == "prompt" else None)

    async def _in_text(self, request: ModelRequest, tools: list[dict[str, Any]] | None) -> Completion:
        """Ask with the conversation as plain text and `tools` described in the system prompt;
        calls written in an answer when no tools were offered are not run, and kept from the user."""
        plain = to_prompt_messages(request.messages)
        if tools:
            plain = _with_system_text(plain, system_addendum(tools))
        # no text hook: calls written in the text must not be shown as they arrive
        completion = await self.inner.request(request.but(messages=plain, tools=None, on_text=None))
        calls, text = parse_tool_calls(completion.content)
        if not calls:
            return completion
        return dataclasses.replace(completion, content=text, tool_calls=calls if tools else [])
