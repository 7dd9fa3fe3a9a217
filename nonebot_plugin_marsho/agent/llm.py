"""The OpenAI-compatible client: one request → a Completion, every failure → an EndpointError."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import uuid
import zlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import httpx2  # openai 3's HTTP library: its responses are what the SDK's transport returns
import openai

from ..exceptions import EndpointError
from ..redaction import logger
from ..tools.model import ToolCall
from ..tools.runner import UNREADABLE_ARGUMENTS, clean_text, json_text
from .prompt_mode import parse_tool_calls, system_addendum, to_prompt_messages

NO_KEY_PLACEHOLDER = "no-key"
"""Sent when MARSHO_API_KEY is empty: local endpoints accept anything, the SDK insists on a key."""


@dataclass(frozen=True)
class Completion:
    """The model's answer to one request: text, tool calls, and reasoning kept apart."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""
    cut: bool = False
    """The answer was longer than MARSHO_MAX_ANSWER_CHARS and `content` is its start (chat/ says
    so with `reply.cut`)."""

    def assistant_message(self, *, with_reasoning: bool = False) -> dict[str, Any]:
        """The assistant message to append to the conversation; reasoning only on request, and
        only beside tool calls (where providers such as DeepSeek want it back)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["content"] = self.content or None
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
            if with_reasoning and self.reasoning:
                message["reasoning_content"] = self.reasoning
        return message


_THINK_BLOCK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL | re.IGNORECASE)


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, answer): `<think>` blocks that reasoning models put in the text (closed, or
    left open at the end, or only closed: "... </think> answer") are taken out of the answer."""
    thoughts = [match.strip() for match in _THINK_BLOCK.findall(text)]
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text.lower():
        head, text = re.split(r"</think>", text, maxsplit=1, flags=re.IGNORECASE)
        thoughts.insert(0, head.strip())
    return "\n".join(t for t in thoughts if t), text.strip()


ToolMode = Literal["native", "prompt", "off"]
"""How tools reach a model: the API's `tools` field, a text protocol in the prompt, or not at all."""

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


class Gate(Protocol):
    """Requests in flight across all chats (MARSHO_MAX_CONCURRENT_REQUESTS): each HTTP request
    to the endpoint runs inside `async with gate.slot():`."""

    def slot(self) -> AbstractAsyncContextManager[object]: ...


DETAIL_CHARS = 300
"""Characters of an endpoint's own error text kept in an EndpointError."""

REDACTED = "[redacted]"


def _shorten(text: str, limit: int = DETAIL_CHARS) -> str:
    text = " ".join(text[:limit * 4].split())  # an HTML page's lines and indentation, collapsed
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _error_detail_of(body: dict[str, Any]) -> str:
    """The message of an OpenAI-style error body (some servers send them with status 200)."""
    inner = body.get("error", body.get("message", ""))
    if isinstance(inner, dict):
        inner = inner.get("message", "")
    return _shorten(clean_text(inner)) if isinstance(inner, str) else ""


def _text_of(value: Any) -> str:
    """Text of a message field: a string, or the text parts of a list of content parts."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return "".join(clean_text(part["text"]) for part in value
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return str(value)
        except ValueError:  # an int past 4300 digits
            return ""
    return ""


def _without_lone_surrogates(value: Any) -> Any:
    """A request with every string cleaned of lone surrogates (which cannot be sent as UTF-8)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_lone_surrogates(item) for key, item in value.items()}
    return value


class _TooLarge(Exception):
    """The endpoint's answer passed max_response_bytes; `declared` when Content-Length said so."""

    def __init__(self, declared: int | None = None) -> None:
        super().__init__(declared)
        self.declared = declared


class _Undecodable(Exception):
    """The body came in a Content-Encoding that is not read here, or corrupt."""


class _StatusError(Exception):
    """The endpoint answered with an error status; its body, read within the bound."""

    def __init__(self, status: int, reason: str, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.reason = reason
        self.body = body


async def _read_within(
    stream: httpx2.AsyncByteStream, headers: httpx2.Headers, limit: int
) -> bytes:
    """The whole body of a response, decoded (gzip, deflate), read chunk by chunk and given up
    as soon as it passes `limit` bytes, decoded or on the wire: a huge or endless body, or a
    small compressed one that inflates, costs at most about `limit` of memory."""
    declared = headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > limit:
        raise _TooLarge(int(declared))
    encoding = headers.get("content-encoding", "").strip().lower()
    inflater = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header
    elif encoding not in ("", "identity"):
        raise _Undecodable(f"it is sent in an encoding that is not read here ({encoding[:40]})")
    parts: list[bytes] = []
    size = wire = 0
    try:
        async for chunk in stream:
            wire += len(chunk)
            if inflater is not None:
                chunk = inflater.decompress(chunk, limit - size + 1)  # +1: going over is seen
            size += len(chunk)
            if size > limit or wire > limit:
                raise _TooLarge()
            parts.append(chunk)
        if inflater is not None:  # all input was taken (each call stopped short of its cap)
            rest = inflater.flush()
            size += len(rest)
            if size > limit:
                raise _TooLarge()
            parts.append(rest)
    except zlib.error:
        raise _Undecodable("its compressed body is corrupt") from None
    return b"".join(parts)


class LLMClient:
    """Talks to one OpenAI-compatible endpoint; make it inside the running loop and reuse it."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float,
        tool_mode: ToolMode = "native",
        tool_mode_by_model: Mapping[str, ToolMode] | None = None,
        max_response_bytes: int = 4_000_000,
        max_answer_chars: int = 20_000,
        gate: Gate | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        """Seconds one HTTP request may take once it has its slot in the gate."""
        self.default_tool_mode = tool_mode
        self.tool_mode_by_model = dict(tool_mode_by_model or {})
        self.max_response_bytes = max_response_bytes
        """Bytes of one response read (decoded); past them the request fails, nothing parsed."""
        self.max_answer_chars = max_answer_chars
        """Characters of an answer's text kept (and of its reasoning); the rest is cut."""
        self.gate = gate
        self._learned_prompt_mode: set[str] = set()
        self._client: openai.AsyncOpenAI | None = None

    @property
    def tool_mode(self) -> ToolMode:
        """How the current model gets tools: configured per model, else learned, else default."""
        if self.model in self.tool_mode_by_model:
            return self.tool_mode_by_model[self.model]
        if self.model in self._learned_prompt_mode:
            return "prompt"
        return self.default_tool_mode

    @property
    def needs_key(self) -> bool:
        """True when no key is set and the endpoint is one that always wants one."""
        host = urlsplit(self.base_url).hostname or ""
        return not self.api_key and host.endswith("openai.com")

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.api_key or NO_KEY_PLACEHOLDER,
                timeout=self.timeout,
                # aiohttp's pool stays cheap with many requests in flight (the SDK's advice
                # "for improved concurrency"); httpx2's rescans every connection per request.
                # Every response's body is read by _take_body, within max_response_bytes.
                http_client=openai.DefaultAioHttpClient(
                    timeout=self.timeout, event_hooks={"response": [self._take_body]}
                ),
                # what _read_within decodes within the bound (httpx2 would offer br and zstd too
                # once their packages are installed, and decode them without one)
                default_headers={"Accept-Encoding": "gzip, deflate"},
                # one honest bound per request: MARSHO_TIMEOUT, not the SDK's retries on top of it
                max_retries=0,
            )
        return self._client

    async def _take_body(self, response: httpx2.Response) -> None:
        """httpx2's response hook, run before anything reads the body (the SDK's error handling
        included): the body is read here within max_response_bytes, decoded, and put back in
        memory; an error status is raised with its body, for _status_error to read."""
        stream = response.stream
        if not isinstance(stream, httpx2.AsyncByteStream):  # pragma: no cover - never sync here
            return
        try:
            body = await _read_within(stream, response.headers, self.max_response_bytes)
        finally:
            await stream.aclose()  # a body left unread closes the connection
        response.stream = httpx2.ByteStream(body)
        if "content-encoding" in response.headers:
            del response.headers["content-encoding"]  # decoded above
        if response.status_code >= 400 or (
            response.status_code >= 300 and not response.has_redirect_location
        ):
            raise _StatusError(response.status_code, response.reason_phrase, body)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """Ask the model, offering `tools` in the model's tool mode; calls come back as
        ToolCalls whatever the mode, and `messages` are always in the native format."""
        mode = self.tool_mode
        if mode == "native":
            try:
                return await self._request(messages, tools)
            except EndpointError as error:
                if not tools or not _refuses_tools(error):
                    raise
                self._learned_prompt_mode.add(self.model)
                logger.warning(
                    f"marsho: {self.base_url} refused tools for model {self.model} ({error}); "
                    "using prompt mode for it from now on (set MARSHO_TOOL_MODE_BY_MODEL to "
                    "choose yourself)"
                )
                mode = "prompt"
        plain = to_prompt_messages(messages)
        if mode == "prompt" and tools:
            plain = _with_system_text(plain, system_addendum(tools))
        completion = await self._request(plain, None)
        calls, text = parse_tool_calls(completion.content)
        if not calls:
            return completion
        if mode != "prompt" or not tools:
            calls = []  # calls although no tools were offered: not run, and kept from the user
        return dataclasses.replace(completion, content=text, tool_calls=calls)

    async def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Completion:
        """Send one chat-completions request and read the first choice."""
        if self.needs_key:
            raise EndpointError(code="endpoint.no_key", hint="endpoint.no_key.hint", url=self.base_url)
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            request["tools"] = tools
        if self.gate is None:
            body = await self._exchange(request)
        else:
            async with self.gate.slot():  # the wait for a slot is not part of MARSHO_TIMEOUT
                body = await self._exchange(request)
        return self._read(self._parse(body))

    async def _exchange(self, request: dict[str, Any]) -> bytes:
        """POST the request; the body of a 2xx answer, or an EndpointError."""
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(self._post(request), self.timeout)
        except (asyncio.TimeoutError, openai.APITimeoutError) as error:
            # the aiohttp transport reports a refused connection as a (connect) timeout at once
            if time.monotonic() - started < self.timeout * 0.9 and error.__cause__ is not None:
                raise self._unreachable(error.__cause__) from None
            raise EndpointError(code="endpoint.timeout", hint="endpoint.timeout.hint",
                                url=self.base_url, seconds=f"{self.timeout:g}") from None
        except _TooLarge as error:
            raise EndpointError(code="endpoint.too_large", hint="endpoint.too_large.hint",
                                url=self.base_url, limit=self.max_response_bytes,
                                announced=error.declared) from None
        except _Undecodable as error:
            raise EndpointError(code="endpoint.unreadable", url=self.base_url, error=str(error)) from None
        except _StatusError as error:
            raise self._status_error(error) from None
        except openai.APIConnectionError as error:
            raise self._unreachable(error.__cause__ or error) from None
        except openai.OpenAIError as error:
            raise EndpointError(code="endpoint.unreadable", url=self.base_url,
                                error=self._scrub(_shorten(str(error)))) from None
        return response.content

    async def _post(self, request: dict[str, Any]) -> httpx2.Response:
        client = self._get_client()
        try:
            # the SDK's low-level post: our messages are plain OpenAI-shaped dicts already, and
            # create()'s parameter transform costs ~0.25 ms per message (11 ms at 40 messages);
            # the body comes back as bytes (read by _take_body), cheaper than the SDK's models
            return await client.post("/chat/completions", body=request, cast_to=httpx2.Response)
        except UnicodeEncodeError:  # a lone surrogate somewhere (a question, an old turn)
            return await client.post("/chat/completions", body=_without_lone_surrogates(request),
                                     cast_to=httpx2.Response)

    def _scrub(self, text: str) -> str:
        """Endpoint-supplied text without the API key (a proxy may echo the request back)."""
        if len(self.api_key) >= 4 and self.api_key in text:
            return text.replace(self.api_key, REDACTED)
        return text

    def _unreachable(self, cause: BaseException) -> EndpointError:
        return EndpointError(code="endpoint.unreachable", hint="endpoint.unreachable.hint",
                             url=self.base_url, error=f"{type(cause).__name__}: {cause}")

    def _status_error(self, error: _StatusError) -> EndpointError:
        status = error.status
        text = error.body.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        detail = _error_detail_of(data) if isinstance(data, dict) else ""
        detail = self._scrub(detail or _shorten(text) or error.reason or "(no detail)")
        if status in (401, 403, 404, 429):
            return EndpointError(code=f"endpoint.{status}", hint=f"endpoint.{status}.hint", status=status,
                                 detail=detail, model=self.model, url=self.base_url)
        if status >= 500:
            return EndpointError(code="endpoint.5xx", hint="endpoint.5xx.hint", status=status,
                                 detail=detail)
        return EndpointError(code="endpoint.4xx", status=status, detail=detail)

    def _parse(self, body: bytes) -> dict[str, Any]:
        """The JSON object of a 2xx body, or an EndpointError naming what it was instead."""
        if not body.strip():
            raise EndpointError(code="endpoint.empty_body", hint="endpoint.not_completion.hint",
                                url=self.base_url)
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise EndpointError(code="endpoint.not_utf8", url=self.base_url, position=error.start,
                                start=self._scrub(repr(body[:40]))) from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as error:
            start = self._scrub(repr(text[:80]))
            if not text.lstrip().startswith(("{", "[")):  # an HTML page, plain text: not the API
                raise EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                    url=self.base_url, start=start) from None
            if isinstance(error, json.JSONDecodeError):
                reason = f"{error.msg} at line {error.lineno}, column {error.colno}"
            elif isinstance(error, RecursionError):
                reason = "nested too deeply"
            else:  # "Exceeds the limit (4300 digits) for integer string conversion..."
                reason = _shorten(str(error).split(";")[0])
            raise EndpointError(code="endpoint.bad_json", url=self.base_url, error=reason,
                                start=start) from None
        if not isinstance(data, dict):
            raise EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                url=self.base_url, start=self._scrub(repr(text[:80])))
        return data

    def _read(self, response: dict[str, Any]) -> Completion:
        """The first choice of a chat completion, read from the JSON body with care: whatever
        the endpoint sent, the result is well-formed or an EndpointError says what was wrong.
        Only strings are taken from it (nothing deep is printed or written again but a call's
        arguments), cleaned of lone surrogates, and the text is cut at max_answer_chars."""
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            detail = self._scrub(_error_detail_of(response))
            raise EndpointError(code="endpoint.no_choices", url=self.base_url,
                                detail=f": {detail}" if detail else "")
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict):
            raise EndpointError(code="endpoint.empty_choice", url=self.base_url)
        calls: list[ToolCall] = []
        seen_ids: set[str] = set()
        raw_calls = message.get("tool_calls")
        for index, raw in enumerate(raw_calls if isinstance(raw_calls, list) else []):
            function = raw.get("function") if isinstance(raw, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(function, dict) or not isinstance(name, str) or not name:
                continue
            given = raw.get("id")
            call_id = clean_text(given) if isinstance(given, str) and given else ""
            call_id = call_id or f"call_{uuid.uuid4().hex[:12]}"
            unique, suffix = call_id, index
            while unique in seen_ids:  # every call must get its own tool message
                unique, suffix = f"{call_id}_{suffix}", suffix + 1
            seen_ids.add(unique)
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                arguments = clean_text(arguments)
            elif arguments is None:
                arguments = ""
            else:  # some servers send an object; deep or out-of-range ones the runner refuses
                arguments = json_text(arguments) or UNREADABLE_ARGUMENTS
            calls.append(ToolCall(id=unique, name=clean_text(name), arguments=arguments))
        thought, content = split_reasoning(_text_of(message.get("content")))
        reasoning = _text_of(message.get("reasoning_content") or message.get("reasoning"))
        reasoning = "\n".join(part for part in (reasoning, thought) if part)
        limit = self.max_answer_chars
        if len(reasoning) > limit:
            reasoning = reasoning[:limit] + "…"
        return Completion(content=content[:limit], tool_calls=calls, reasoning=reasoning,
                          cut=len(content) > limit)

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.close()
            self._client = None
