"""Runs one batch of ToolCalls → ToolResults in call order: in parallel, bounded, and never raising."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import math
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from ..redaction import hide, logger
from .model import ResultStatus, Tool, ToolCall, ToolContext, ToolResponse, ToolResult, Toolset

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

MAX_SCHEMA_ECHO = 1500
"""Characters of a tool's schema quoted back to the model after bad arguments."""

MAX_PROBLEM_ECHO = 200
"""Characters of one validation problem quoted back (they can quote the model's whole value)."""

UNREADABLE_ARGUMENTS = "<arguments that could not be read: nested too deeply or not JSON>"
"""A call's arguments text when the model sent them as a JSON value that cannot be written back
as JSON; the runner answers it like any other bad JSON."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` with lone surrogates (JSON's "\\ud800", a file name read with surrogateescape)
    replaced by U+FFFD: a str holding one cannot be encoded, stored or sent."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a str holds no surrogate pairs: each one found is alone
        return _SURROGATE.sub("\ufffd", text)
    return text


def json_text(value: Any) -> str | None:
    """`value` as JSON text (non-ASCII kept, lone surrogates escaped), or None when it cannot be
    written: nested too deeply, an int past Python's 4300 digits, not JSON data at all."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # escaped, the lone surrogates stay what the model wrote
        return json.dumps(value)
    return text


class BadJSON(ValueError):
    """JSON that does not parse, or parses into what a session must not hold: `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        shown = f"{number[:20]}{'…' if len(number) > 20 else ''}"
        raise ValueError(f"the number {shown} is out of range: numbers must be finite")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number: numbers must be finite")


_STRICT_JSON = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)


def loads_json(text: str) -> Any:
    """Parse JSON the model or an endpoint wrote, refusing what would break later: NaN and
    Infinity, numbers out of a float's range, ints past 4300 digits, nesting past the stack.
    Raises BadJSON, whose reason reads like json's own messages."""
    try:
        return _STRICT_JSON.decode(text)
    except json.JSONDecodeError as error:
        # json's own messages may end in "at" ("Unterminated string starting at"): say it once
        reason = error.msg.removesuffix(" at")
        raise BadJSON(f"{reason} at line {error.lineno}, column {error.colno}") from None
    except RecursionError:
        raise BadJSON("nested too deeply") from None
    except ValueError as error:  # "Exceeds the limit (4300 digits) ...; use sys.set_int_..."
        raise BadJSON(str(error).split(";")[0][:MAX_PROBLEM_ECHO]) from None


def serialize_result(value: Any) -> str:
    """The text the model reads for a tool's return value: strings as they are, the rest as JSON.

    Raises ValueError when the value cannot be written as JSON (nested too deeply...)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if value is None:
        return "null"
    try:
        text = json_text(to_jsonable_python(value, fallback=str))
    except (ValueError, TypeError, RecursionError) as error:
        reason = _describe_exception(error)[:MAX_PROBLEM_ECHO]
        raise ValueError(f"cannot be written as JSON ({reason})") from None
    if text is None:
        raise ValueError("cannot be written as JSON (nested too deeply, or a number too large)")
    return text


def cap_text(text: str, max_bytes: int) -> str:
    """Cut text to at most `max_bytes` UTF-8 bytes, saying how much was left out (lone surrogates
    become U+FFFD on the way)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        text = clean_text(text)
        data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    note = f"\n…[truncated: the result was {len(data)} bytes; only the first {{kept}} are shown]"
    kept = max_bytes - len(note.encode()) - 8
    if kept <= 0:  # no room for the note
        return data[:max_bytes].decode("utf-8", errors="ignore")
    head = data[:kept].decode("utf-8", errors="ignore")
    return head + note.format(kept=len(head.encode("utf-8")))


def _schema_text(tool: Tool) -> str:
    text = json.dumps(tool.parameters, ensure_ascii=False)
    return text if len(text) <= MAX_SCHEMA_ECHO else text[:MAX_SCHEMA_ECHO] + "…"


def _describe_exception(error: BaseException) -> str:
    try:
        message = str(error).strip()
    except Exception:
        message = "(its message could not be shown)"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


_WHO = {"everyone": "everyone", "admin": "group admins and owners", "superuser": "the bot's superusers"}

REDACTED = "[redacted]"


SECRET_PRESET = re.compile(r"key|token|secret|passw|auth|credential|cookie|session", re.IGNORECASE)
"""Preset names whose values are hidden from results, replies and logs (api_key, password...).
Other presets (base URLs, a provider's name) may show: hiding "brave" would mangle results."""


def redact(text: str, presets: dict[str, Any]) -> str:
    """Hide secret preset values (API keys...) from text bound for the model, a reply or a log:
    in every spelling redaction.py knows (as stored, JSON- or repr-escaped, URL-encoded)."""
    return hide(text, (value for name, value in presets.items() if SECRET_PRESET.search(name)), min_length=4)


def _code_of(func: Callable[..., Any]) -> Any:
    """The code object a tool's function runs (through functools.wraps and partial), or None."""
    for _ in range(10):
        func = inspect.unwrap(func)
        inner = getattr(func, "func", None)  # functools.partial
        if inner is None or not callable(inner):
            break
        func = inner
    return getattr(func, "__code__", None)


def _shown(filename: str, home: str) -> str:
    """A file as the author knows it: `my-kit/helpers.py` inside the toolkit, else its path."""
    if home and filename.startswith(home):
        return os.path.relpath(filename, os.path.dirname(home.rstrip(os.sep)))
    return filename


def _home(tool: Tool) -> str:
    """The folder of the file that defines the tool's function (its toolkit's folder), with a
    trailing separator; "" when there is no Python code to point at."""
    code = _code_of(tool.func)
    filename = getattr(code, "co_filename", "")
    return os.path.dirname(os.path.abspath(filename)) + os.sep if filename else ""


def _origin(error: BaseException, tool: Tool) -> str:
    """' (at my-kit/helpers.py line 3)': the deepest frame of the traceback inside the tool's own
    folder; when the error rose before the function ran (a TypeError from the call itself), the
    line where the function is defined. Never a line of the runner or of asyncio."""
    home = _home(tool)
    frames = traceback.extract_tb(error.__traceback__)
    inside = [f for f in frames if home and os.path.abspath(f.filename).startswith(home)]
    if inside:
        frame = inside[-1]
        return f" (at {_shown(os.path.abspath(frame.filename), home)} line {frame.lineno})"
    code = _code_of(tool.func)
    if code is not None:
        where = _shown(os.path.abspath(code.co_filename), home)
        return f" (in {code.co_name}(), defined at {where} line {code.co_firstlineno})"
    return ""


class _Unawaited:
    """Coroutines a tool call created and dropped without awaiting them (Python's "coroutine ...
    was never awaited"), each with the stack where it was dropped: a toolkit bug, such as a sync
    wrapper returning `str(async_helper())`, whose answer would be `<coroutine object ...>`."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: list[tuple[str, list[tuple[str, int]]]] = []

    def describe(self, tool: Tool) -> str:
        """'coroutine 'helper' was never awaited (at my-kit/__init__.py line 7)', for the first."""
        name, stack = self.found[0]
        home = _home(tool)
        frames = [f for f in stack if home and f[0].startswith(home)] or stack[:1]
        where = f" (at {_shown(frames[0][0], home)} line {frames[0][1]})" if frames else ""
        more = f", and {len(self.found) - 1} more" if len(self.found) > 1 else ""
        return f"coroutine '{name}' was never awaited{where}{more}"


_WATCH: contextvars.ContextVar[_Unawaited | None] = contextvars.ContextVar(
    "marsho_tool_call_unawaited", default=None
)
"""The _Unawaited of the tool call running in this thread (sync tools) or task (async ones)."""

_python_warn_unawaited = getattr(warnings, "_warn_unawaited_coroutine", None)


def _warn_unawaited(coro: Any) -> None:
    """Stands in for `warnings._warn_unawaited_coroutine`, which CPython calls when a coroutine
    that never ran is finalized: inside a tool call the coroutine is recorded against the call
    (the runner reports it), anywhere else Python's own warning is given as usual."""
    watch = _WATCH.get()
    if watch is None:
        if _python_warn_unawaited is not None:
            _python_warn_unawaited(coro)
        else:
            warnings.warn(f"coroutine '{coro.__qualname__}' was never awaited", RuntimeWarning,
                          stacklevel=2, source=coro)
        return
    stack: list[tuple[str, int]] = []
    frame: Any = sys._getframe(1)  # where the coroutine was dropped: the tool's own line
    while frame is not None and len(stack) < 30:
        stack.append((os.path.abspath(frame.f_code.co_filename), frame.f_lineno))
        frame = frame.f_back
    watch.found.append((getattr(coro, "__qualname__", type(coro).__name__), stack))


def _watch_unawaited_coroutines() -> None:
    """Install `_warn_unawaited` (once per process: CPython looks it up on each occasion)."""
    if getattr(warnings, "_warn_unawaited_coroutine", None) is not _warn_unawaited:
        warnings._warn_unawaited_coroutine = _warn_unawaited  # type: ignore[attr-defined]


def _call_watched(watch: _Unawaited, func: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """Call a sync tool in its worker thread, recording the coroutines it drops."""
    token = _WATCH.set(watch)
    try:
        return func(**arguments)
    finally:
        _WATCH.reset(token)


def _needed_arguments(func: Callable[..., Any]) -> frozenset[str]:
    """The parameters `func` cannot be called without (by keyword): those without a default."""
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(
        p.name for p in parameters if p.kind in keyword and p.default is inspect.Parameter.empty
    )


class _ToolRaised(Exception):
    """Carries whatever a tool raised (SystemExit and CancelledError included) out of wait_for.

    asyncio lets SystemExit and KeyboardInterrupt escape the event loop, and a tool's own
    TimeoutError or CancelledError would be mistaken for ours; wrapped, each is just an error.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() > 0 if cancelling is not None else True  # Python 3.10: assume so


class ToolRunner:
    """Runs the model's tool calls against a Toolset, each bounded in time and output size."""

    def __init__(
        self,
        toolset: Toolset,
        *,
        timeout: float = 30.0,
        max_parallel: int = 8,
        max_result_bytes: int = 16_000,
        max_calls: int = 16,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self.toolset = toolset
        self.timeout = timeout
        self.max_parallel = max_parallel
        self.max_result_bytes = max_result_bytes
        self.max_calls = max_calls
        """Calls run from one batch (MARSHO_MAX_TOOL_CALLS); each one past it is answered, not run."""
        # sync tools run here, so a slow one never blocks the bot's event loop
        self._executor = executor or ThreadPoolExecutor(
            max_workers=max(4, max_parallel * 2), thread_name_prefix="marsho-tool"
        )
        self._validators: dict[tuple[str, int], Draft202012Validator] = {}
        self._needed: dict[str, tuple[Callable[..., Any], frozenset[str]]] = {}
        _watch_unawaited_coroutines()

    async def run(
        self,
        calls: Sequence[ToolCall],
        context: ToolContext | None = None,
        *,
        on_result: Callable[[ToolCall, ToolResult], None] | None = None,
    ) -> list[ToolResult]:
        """Run a batch at the same time (at most `max_parallel` at once); results in call order.

        Only the first `max_calls` run; every later call gets an error result saying it was not
        run and why, so each call still has exactly one result. `on_result` hears of each result
        as soon as its call finishes.
        """
        extra = calls[self.max_calls:]
        if extra:
            logger.warning(f"marsho: {len(calls)} tool calls in one response; the first "
                           f"{self.max_calls} run, {len(extra)} are answered 'not run' "
                           "(MARSHO_MAX_TOOL_CALLS)")
        gate = asyncio.Semaphore(self.max_parallel)

        async def run_gated(call: ToolCall) -> ToolResult:
            async with gate:
                result = await self.run_one(call, context)
            if on_result is not None:
                on_result(call, result)
            return result

        results = list(await asyncio.gather(*(run_gated(call) for call in calls[:self.max_calls])))
        for call in extra:
            result = self._not_run(call)
            if on_result is not None:
                on_result(call, result)
            results.append(result)
        return results

    def _not_run(self, call: ToolCall) -> ToolResult:
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=(f"Error: not run: at most {self.max_calls} tool calls per response "
                     "(MARSHO_MAX_TOOL_CALLS). Call fewer tools at once."),
            status="error",
        )

    async def run_one(self, call: ToolCall, context: ToolContext | None = None) -> ToolResult:
        """Run one call; every failure becomes a result the model can read and act on."""
        started = time.perf_counter()
        status: ResultStatus
        asker = context or ToolContext()
        images: tuple[bytes, ...] = ()
        try:
            status, content, images = await self._execute(call, asker)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # a runner bug must not lose the call's answer either
            status, content = "error", f"Error: the tool could not be run: {_describe_exception(error)}"
        tool = self.toolset.get(call.name)
        if tool is not None and tool.presets:
            content = redact(content, tool.presets)
        return ToolResult(
            call_id=call.id,
            name=call.name,
            content=cap_text(content, self.max_result_bytes),  # lone surrogates cleaned too
            status=status,
            seconds=time.perf_counter() - started,
            images=images,
        )

    def _parse_arguments(self, call: ToolCall, tool: Tool) -> tuple[dict[str, Any] | None, str]:
        """The model's arguments as the function's keyword arguments, or what was wrong."""
        raw = call.arguments.strip()
        if not raw:
            arguments: Any = {}
        else:
            try:
                arguments = loads_json(raw)
            except BadJSON as error:
                return None, (
                    f"Error: the arguments for {tool.name} are not valid JSON ({error.reason}). "
                    f"Call it again with a JSON object matching this schema: {_schema_text(tool)}"
                )
        if not isinstance(arguments, dict):
            return None, (
                f"Error: the arguments for {tool.name} must be a JSON object, not "
                f"{type(arguments).__name__}. Expected schema: {_schema_text(tool)}"
            )
        try:
            problems = self._problems(tool, arguments)
        except (RecursionError, ValueError):  # a value nested past the stack, in the checks
            problems = "at '(arguments)': nested too deeply to check"
        if problems:
            return None, (
                f"Error: invalid arguments for {tool.name}: {problems}. Call it again with "
                f"arguments matching this schema: {_schema_text(tool)}"
            )
        # the model cannot set what the owner preset or the context the plugin injects
        hidden = set(tool.presets) | ({tool.context_param} if tool.context_param else set())
        arguments = {k: v for k, v in arguments.items() if k not in hidden}
        if tool.arguments_model is not None:  # JSON → the function's own types (enums, models)
            try:
                parsed = tool.arguments_model.model_validate(arguments)
            except ValidationError as error:
                problems = "; ".join(
                    f"at '{'/'.join(map(str, e['loc'])) or '(arguments)'}': {e['msg'][:MAX_PROBLEM_ECHO]}"
                    for e in error.errors()[:5]
                )
                return None, (
                    f"Error: invalid arguments for {tool.name}: {problems}. Expected schema: "
                    f"{_schema_text(tool)}"
                )
            except (RecursionError, ValueError):
                return None, (
                    f"Error: invalid arguments for {tool.name}: nested too deeply to check. "
                    f"Expected schema: {_schema_text(tool)}"
                )
            arguments = {name: getattr(parsed, name) for name in type(parsed).model_fields}
        return arguments, ""

    def _problems(self, tool: Tool, arguments: dict[str, Any]) -> str:
        """What the tool's JSON schema finds wrong with the arguments ("" when nothing)."""
        # keyed by the schema too: an MCP server may change a tool's schema under the same name
        key = (tool.name, id(tool.parameters))
        validator = self._validators.get(key)
        if validator is None:
            from jsonschema import Draft202012Validator  # ~30 ms: at the first call, not at start

            validator = self._validators[key] = Draft202012Validator(tool.parameters)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        return "; ".join(
            f"at '{'/'.join(str(p) for p in e.path)[:MAX_PROBLEM_ECHO] or '(arguments)'}': "
            f"{e.message[:MAX_PROBLEM_ECHO]}"
            for e in errors[:5]
        )

    async def _execute(
        self, call: ToolCall, asker: ToolContext
    ) -> tuple[ResultStatus, str, tuple[bytes, ...]]:
        tool = self.toolset.get(call.name)
        if tool is None:
            usable = [name for name, t in sorted(self.toolset.tools.items()) if asker.may_use(t)]
            return "unknown_tool", (
                f"Error: there is no tool named {call.name!r}. Available tools: "
                f"{', '.join(usable) or 'none'}."
            ), ()
        if tool.offered is not None and not tool.offered(asker):  # not offered in this chat
            return "denied", (
                f"Error: {tool.name} is not available here: "
                f"{tool.not_offered or 'it is not offered in this chat'}. Nothing was done; do not retry."
            ), ()
        if not asker.may_use(tool):  # checked in code again, whatever the model was shown
            return "denied", (
                f"Error: {tool.name} may only be used by {_WHO[tool.permission]}, and the person "
                f"asking is a {asker.role}. Do not retry; tell them they are not allowed to."
            ), ()
        arguments, problem = self._parse_arguments(call, tool)
        if arguments is None:
            return "bad_arguments", problem, ()
        arguments.update(tool.presets)
        if tool.context_param:
            arguments[tool.context_param] = asker
        missing = self._missing(tool, arguments)
        if missing:
            names = ", ".join(map(repr, missing))
            return "bad_arguments", (
                f"Error: invalid arguments for {tool.name}: {names} "
                f"{'is' if len(missing) == 1 else 'are'} missing (the tool cannot run without "
                f"{'it' if len(missing) == 1 else 'them'}, though its schema does not say so). "
                f"Call it again with {names} set, following this schema: {_schema_text(tool)}"
            ), ()
        watch = _Unawaited()
        try:
            value = await asyncio.wait_for(self._invoke(tool, arguments, watch), self.timeout)
        except asyncio.TimeoutError:
            return "timeout", (
                f"Error: {tool.name} did not finish within {self.timeout:g} s and was stopped. "
                "Tell the user it timed out, or try again with other arguments."
            ), ()
        except _ToolRaised as raised:
            message = f"Error: {tool.name} raised {_describe_exception(raised.error)}"
            # no traceback in the log: its values could hold a preset secret
            logger.warning(f"marsho: {redact(message, tool.presets)}{_origin(raised.error, tool)}")
            return "error", message, ()
        if watch.found:  # its answer would be "<coroutine object ...>", or missing what it did
            bug = watch.describe(tool)
            logger.warning(f"marsho: toolkit bug in {tool.name}: {bug}: the toolkit calls an "
                           "async function without `await`; its answer is thrown away")
            return "error", (
                f"Error: {tool.name} has a bug in its toolkit: {bug}, so it gave no real answer. "
                "Tell the user this tool is broken; calling it again will not help."
            ), ()
        response = value if isinstance(value, ToolResponse) else None
        images = response.images if response is not None else ()
        try:
            text = serialize_result(response.content if response is not None else value)
        except ValueError as error:
            return "error", f"Error: {tool.name} returned a value that {error}", images
        if response is not None and response.status == "error":
            return "error", f"Error: {text}", images
        return "ok", text, images

    def _missing(self, tool: Tool, arguments: dict[str, Any]) -> list[str]:
        """Parameters the function needs that the call leaves out: a tools.json schema that does
        not list them in 'required' lets the model omit them (a Toolbox's model checks its own)."""
        if tool.arguments_model is not None:
            return []
        known = self._needed.get(tool.name)
        if known is None or known[0] is not tool.func:
            known = self._needed[tool.name] = (tool.func, _needed_arguments(tool.func))
        return sorted(name for name in known[1] if name not in arguments)

    async def _invoke(self, tool: Tool, arguments: dict[str, Any], watch: _Unawaited) -> Any:
        token = _WATCH.set(watch)
        try:
            if tool.is_async:
                value = await tool.func(**arguments)
            else:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    self._executor, _call_watched, watch, tool.func, arguments
                )
            if inspect.isawaitable(value):  # a sync def that returns a coroutine
                value = await value
            return value
        except asyncio.CancelledError as error:
            if _being_cancelled():  # our timeout or the turn being cancelled: let it through
                raise
            raise _ToolRaised(error) from None
        except BaseException as error:
            raise _ToolRaised(error) from None
        finally:
            _WATCH.reset(token)

    def close(self) -> None:
        """Stop the worker threads once running tools finish."""
        self._executor.shutdown(wait=False, cancel_futures=True)
