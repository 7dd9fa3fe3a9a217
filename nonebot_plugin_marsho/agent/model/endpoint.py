"""One OpenAI-compatible endpoint over HTTP: the exchange, the body read within its bound, the
JSON parsed, the first choice read into a Completion, and every failure translated into an
EndpointError with a hint the owner can act on. The OpenAI SDK (and httpx2) are imported when
the first request is sent, not with this module: loading them takes about 0.75 s."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import sys
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from ...exceptions import EndpointError
from ...i18n import text
from ...tools.model import ToolCall
from ...tools.runner import UNREADABLE_ARGUMENTS, clean_text, json_text
from ..metering import usage_of
from ..providers import key_problem, retry_after_seconds
from .base import Completion, split_reasoning
from .stream import StreamAssembly, server_events

if TYPE_CHECKING:
    import httpx2  # openai 3's HTTP library: its responses are what the SDK's transport returns
    import openai

    from .base import TextHook

_T = TypeVar("_T")

NO_KEY_PLACEHOLDER = "no-key"
"""Sent when MARSHO_API_KEY is empty: local endpoints accept anything, the SDK insists on a key."""

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


def _error_fields(data: Any) -> tuple[str, object, object]:
    """(message, type, code) of an error body: OpenAI's `{"error": {...}}`, a bare
    `{"message": ...}`, or Gemini's list holding one such object ("" and None where absent)."""
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict):
        return "", None, None
    inner = data.get("error", data)
    if isinstance(inner, str):
        return inner, data.get("type"), data.get("code")
    if not isinstance(inner, dict):
        return "", None, None
    message = inner.get("message")
    return (message if isinstance(message, str) else "", inner.get("type") or inner.get("status"),
            inner.get("code"))


def _about_the_key(failure: EndpointError) -> bool:
    """Whether a refusal is about the key: a 401 (or a 4xx saying so, see key_problem), or a
    403 saying so; a bare 403 may be the account's permissions, a region, a model not allowed."""
    return failure.code == "endpoint.401" or (
        failure.code == "endpoint.403" and key_problem(failure.params.get("detail")))


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


def _content(request: dict[str, Any]) -> bytes:
    """The body to send: `request_body`, or with every lone surrogate (a question, an old turn)
    cleaned when one is somewhere."""
    try:
        return request_body(request)
    except UnicodeEncodeError:
        return request_body(_without_lone_surrogates(request))


def _without_lone_surrogates(value: Any) -> Any:
    """A request with every string cleaned of lone surrogates (which cannot be sent as UTF-8)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {key: _without_lone_surrogates(item) for key, item in value.items()}
    return value


def _dumps(value: Any) -> bytes:
    """JSON as the SDK writes a request's body (`openapi_dumps`: compact, UTF-8, no NaN)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class ToolsJson:
    """The request's `tools` list as JSON, encoded once per toolset: the same schemas go in
    every request (several kilobytes with the built-in toolkits), while the messages change.
    A list is taken from the cache only when it equals a copy of the one encoded (a tool added
    or removed, a description or a schema changed, even in place, makes a new entry); the few
    toolsets askers see (members, admins, superusers) each keep theirs."""

    SIZE = 8

    def __init__(self) -> None:
        self._entries: list[tuple[list[Any], bytes]] = []

    def encoded(self, tools: list[Any]) -> bytes:
        for index, (seen, encoded) in enumerate(self._entries):
            if seen == tools:
                if index:  # most recently used first
                    self._entries.insert(0, self._entries.pop(index))
                return encoded
        encoded = _dumps(tools)
        self._entries.insert(0, (copy.deepcopy(tools), encoded))
        del self._entries[self.SIZE:]
        return encoded


TOOLS_JSON = ToolsJson()


def request_body(request: dict[str, Any]) -> bytes:
    """The request's body, byte for byte what the SDK would write for it (the same key order and
    separators), its `tools` from TOOLS_JSON. Raises UnicodeEncodeError for a lone surrogate and
    TypeError for a value JSON cannot hold, as the SDK's encoding would."""
    tools = request.get("tools")
    if not isinstance(tools, list) or not tools:
        return _dumps(request)
    parts = [_dumps(key) + b":" + (TOOLS_JSON.encoded(value) if key == "tools" else _dumps(value))
             for key, value in request.items() if isinstance(key, str)]
    if len(parts) != len(request):  # a key JSON writes in its own way: the SDK's way, whole
        return _dumps(request)
    return b"{" + b",".join(parts) + b"}"


async def _within(exchange: Awaitable[_T], timeout: float) -> _T:
    """`exchange` awaited within `timeout` seconds (asyncio.TimeoutError past it): in the calling
    task where asyncio.timeout exists (3.11), without the task of its own and the two wake-ups
    asyncio.wait_for costs each request (13 against 7 us); by wait_for on 3.10."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await exchange
    return await asyncio.wait_for(exchange, timeout)


class _TooLarge(Exception):
    """The endpoint's answer passed max_response_bytes; `declared` when Content-Length said so."""

    def __init__(self, declared: int | None = None) -> None:
        super().__init__(declared)
        self.declared = declared


class _Undecodable(Exception):
    """The body came in a Content-Encoding that is not read here, or corrupt."""


class _StatusError(Exception):
    """The endpoint answered with an error status; its body, read within the bound."""

    def __init__(self, status: int, reason: str, body: bytes, retry_after: str | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.reason = reason
        self.body = body
        self.retry_after = retry_after


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


def _is_event_stream(headers: httpx2.Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "text/event-stream"


_BOUNDED_STREAM: type | None = None


def _bounded_stream(stream: httpx2.AsyncByteStream, headers: httpx2.Headers, limit: int) -> Any:
    """A streamed response's body as it comes, decoded (gzip, deflate), given up as soon as it
    passes `limit` bytes, decoded or on the wire (as _read_within, without holding it whole).
    An httpx2 AsyncByteStream, made with the first stream (httpx2 loads with the SDK)."""
    global _BOUNDED_STREAM
    if _BOUNDED_STREAM is None:
        import httpx2

        class BoundedStream(httpx2.AsyncByteStream):
            def __init__(self, inner: httpx2.AsyncByteStream, headers: httpx2.Headers, limit: int) -> None:
                self.inner = inner
                self.limit = limit
                encoding = headers.get("content-encoding", "").strip().lower()
                self.inflater = None
                if encoding in ("gzip", "x-gzip", "deflate"):
                    self.inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)
                elif encoding not in ("", "identity"):
                    raise _Undecodable(f"it is sent in an encoding that is not read here ({encoding[:40]})")

            async def __aiter__(self) -> AsyncIterator[bytes]:
                size = wire = 0
                try:
                    async for chunk in self.inner:
                        wire += len(chunk)
                        if self.inflater is not None:
                            chunk = self.inflater.decompress(chunk, self.limit - size + 1)
                        size += len(chunk)
                        if size > self.limit or wire > self.limit:
                            raise _TooLarge()
                        yield chunk
                except zlib.error:
                    raise _Undecodable("its compressed body is corrupt") from None

            async def aclose(self) -> None:
                await self.inner.aclose()

        _BOUNDED_STREAM = BoundedStream
    return _BOUNDED_STREAM(stream, headers, limit)


def _was_refused(cause: BaseException | None) -> bool:
    """Whether nothing listens at the address (a refused connection, a name that does not
    resolve): retrying it at once helps nobody. aiohttp's transport reports it as a connect
    timeout whose text says "Cannot connect to host"; a dropped connection says "Server
    disconnected"."""
    seen = 0
    while cause is not None and seen < 8:
        if isinstance(cause, ConnectionRefusedError) or "Cannot connect to host" in str(cause):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False


class EndpointClient:
    """One OpenAI-compatible endpoint: one HTTP client (made with the first request, inside the
    running loop, and reused), its requests, and what its answers say."""

    def __init__(self, base_url: str, *, timeout: float, default_key: str, secrets: list[str],
                 max_response_bytes: int = 4_000_000, max_answer_chars: int = 20_000) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        """The SDK client's own timeout (each request gets its own, within it)."""
        self.default_key = default_key
        """The key the SDK client is made with; a pool's other keys go in each request's header."""
        self.secrets = secrets
        """Every API key of the model, longest first: never in an error's text."""
        self.max_response_bytes = max_response_bytes
        """Bytes of one response read (decoded); past them the request fails, nothing parsed."""
        self.max_answer_chars = max_answer_chars
        """Characters of an answer's text kept (and of its reasoning); the rest is cut."""
        self.client: openai.AsyncOpenAI | None = None

    def _get_client(self) -> openai.AsyncOpenAI:
        if self.client is None:
            import openai  # here, not at import: the SDK takes about 0.75 s to load

            self.client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.default_key or NO_KEY_PLACEHOLDER,
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
                # retries are ours (agent/model/retry.py): chosen by kind, bounded by the retry
                # budget, and moving on to the fallbacks; the SDK's would come on top of
                # MARSHO_TIMEOUT
                max_retries=0,
            )
        return self.client

    async def _take_body(self, response: httpx2.Response) -> None:
        """httpx2's response hook, run before anything reads the body (the SDK's error handling
        included): the body is read here within max_response_bytes, decoded, and put back in
        memory; an error status is raised with its body, for _status_error to read."""
        import httpx2

        stream = response.stream
        if not isinstance(stream, httpx2.AsyncByteStream):  # pragma: no cover - never sync here
            return
        if 200 <= response.status_code < 300 and _is_event_stream(response.headers):
            # a streamed answer: read as it comes (stream()), within the same bound
            response.stream = _bounded_stream(stream, response.headers, self.max_response_bytes)
            if "content-encoding" in response.headers:
                del response.headers["content-encoding"]  # decoded by _bounded_stream
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
            raise _StatusError(response.status_code, response.reason_phrase, body,
                               response.headers.get("retry-after"))

    async def post(self, request: dict[str, Any], key: str | None, timeout: float) -> bytes:
        """POST the request (with `key` in its header, else the client's own); the body of a 2xx
        answer, or an EndpointError."""
        client = self._get_client()
        response = await self._guarded(self._post(client, request, key), request, key, timeout)
        return response.content

    async def stream(self, request: dict[str, Any], key: str | None, timeout: float,
                     on_text: TextHook | None = None) -> Completion:
        """POST the streamed request and assemble its answer as it comes, telling `on_text` its
        text (stream.StreamAssembly); every bound holds: `timeout` for the whole answer,
        max_response_bytes, max_answer_chars, stream.MAX_STREAMED_CALLS. A stream that stops
        half way is an EndpointError (`endpoint.stream_cut`; `endpoint.stream_cut_shown` once
        text was told, which is neither retried nor sent elsewhere)."""
        client = self._get_client()
        assembly = StreamAssembly(on_text, tools_offered=bool(request.get("tools")),
                                  max_chars=self.max_answer_chars)
        try:
            return await self._guarded(self._streamed(client, request, key, assembly), request, key,
                                       timeout)
        except EndpointError as error:
            if not assembly.started:
                raise
            if assembly.shown:
                raise self._cut(error, shown=True) from None
            if error.code in ("endpoint.unreachable", "endpoint.unreadable"):
                raise self._cut(error, shown=False) from None
            raise

    def _cut(self, error: EndpointError, *, shown: bool) -> EndpointError:
        """A stream that stopped half way, saying why (the error that stopped it)."""
        reason = text("en", error.code, **error.params).rstrip(".") if error.code else str(error)
        if shown:
            return EndpointError(code="endpoint.stream_cut_shown", hint="endpoint.stream_cut_shown.hint",
                                 url=self.base_url, error=reason)
        return EndpointError(code="endpoint.stream_cut", hint="endpoint.stream_cut.hint",
                             url=self.base_url, error=reason)

    async def _streamed(self, client: openai.AsyncOpenAI, request: dict[str, Any], key: str | None,
                        assembly: StreamAssembly) -> Completion:
        import httpx2
        import openai

        options: Any = {} if key is None else {"headers": {"Authorization": f"Bearer {key}"}}
        events = await client.post("/chat/completions", content=_content(request),
                                   cast_to=httpx2.Response, options=options, stream=True,
                                   stream_cls=openai.AsyncStream[object])
        # with cast_to Response the SDK hands the response itself over, its body unread
        response = events if isinstance(events, httpx2.Response) else events.response
        try:
            if not _is_event_stream(response.headers):  # answered in one piece after all
                return self.read(await response.aread())
            assembly.started = True
            try:
                async for data in server_events(response.aiter_bytes()):
                    if data.strip() == "[DONE]":
                        assembly.finished = True
                        break
                    await assembly.add(self._event(data))
            except httpx2.HTTPError as error:  # the connection broke mid-way (not mapped by the SDK here)
                raise self._unreachable(error) from None
        finally:
            await response.aclose()
        if not assembly.finished:
            raise EndpointError(code="endpoint.stream_cut", hint="endpoint.stream_cut.hint",
                                url=self.base_url, error="it ended before saying it was done")
        await assembly.finish()
        return dataclasses.replace(self._read({"choices": [{"message": assembly.message()}]}),
                                   usage=assembly.usage, streamed=True,
                                   cut=assembly.total > self.max_answer_chars)

    def _event(self, data: str) -> Any:
        """One event's chunk, or the EndpointError an error event or a broken one is."""
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            start = self._scrub(repr(data[:80]))
            raise EndpointError(code="endpoint.unreadable", url=self.base_url,
                                error=f"a streamed event is not JSON ({start})") from None
        if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
            message = self._scrub(_shorten(clean_text(_error_fields(chunk)[0]))) or "(no detail)"
            raise EndpointError(code="endpoint.unreadable", url=self.base_url,
                                error=f"the endpoint sent an error mid-way: {message}")
        return chunk

    async def _guarded(self, exchange: Awaitable[_T], request: dict[str, Any], key: str | None,
                       timeout: float) -> _T:
        """The exchange within `timeout`, every failure translated into an EndpointError."""
        import openai

        started = time.monotonic()
        try:
            return await _within(exchange, max(timeout, 0.001))
        except (asyncio.TimeoutError, openai.APITimeoutError) as error:
            # the aiohttp transport reports a refused connection as a (connect) timeout at once
            if time.monotonic() - started < timeout * 0.9 and error.__cause__ is not None:
                raise self._unreachable(error.__cause__) from None
            raise EndpointError(code="endpoint.timeout", hint="endpoint.timeout.hint",
                                url=self.base_url, seconds=f"{round(timeout, 1):g}") from None
        except _TooLarge as error:
            raise EndpointError(code="endpoint.too_large", hint="endpoint.too_large.hint",
                                url=self.base_url, limit=self.max_response_bytes,
                                announced=error.declared) from None
        except _Undecodable as error:
            raise EndpointError(code="endpoint.unreadable", url=self.base_url, error=str(error)) from None
        except _StatusError as error:
            failure = self._status_error(error, request["model"])
            if not (self.default_key if key is None else key) and _about_the_key(failure):
                failure = self._no_key(failure)
            raise failure from None
        except openai.APIConnectionError as error:
            raise self._unreachable(error.__cause__ or error) from None
        except openai.OpenAIError as error:
            raise EndpointError(code="endpoint.unreadable", url=self.base_url,
                                error=self._scrub(_shorten(str(error)))) from None

    async def _post(self, client: openai.AsyncOpenAI, request: dict[str, Any],
                    key: str | None) -> httpx2.Response:
        import httpx2

        # a pool's key goes in each request's header (one client, one connection pool, per endpoint)
        options: Any = {} if key is None else {"headers": {"Authorization": f"Bearer {key}"}}
        # the SDK's low-level post: our messages are plain OpenAI-shaped dicts already, and
        # create()'s parameter transform costs ~0.25 ms per message (11 ms at 40 messages);
        # the body goes as bytes (request_body: the tools' JSON kept per toolset) and comes
        # back as bytes (read by _take_body), cheaper than the SDK's models
        return await client.post("/chat/completions", content=_content(request),
                                 cast_to=httpx2.Response, options=options)

    def _scrub(self, text: str) -> str:
        """Endpoint-supplied text without the API keys (a proxy may echo the request back)."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _unreachable(self, cause: BaseException) -> EndpointError:
        error = EndpointError(code="endpoint.unreachable", hint="endpoint.unreachable.hint",
                              url=self.base_url, error=self._scrub(f"{type(cause).__name__}: {cause}"))
        error.refused = _was_refused(cause)
        return error

    def _status_error(self, error: _StatusError, model: str) -> EndpointError:
        status = error.status
        text = error.body.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        fields = _error_fields(data)
        detail = _error_detail_of(data) if isinstance(data, dict) else _shorten(clean_text(fields[0]))
        # Gemini's errors come as a list holding one object: its message is the reason
        detail = self._scrub(detail or _shorten(text) or error.reason or "(no detail)")
        if status in (401, 403, 404, 429):
            failure = EndpointError(code=f"endpoint.{status}", hint=f"endpoint.{status}.hint",
                                    status=status, detail=detail, model=model, url=self.base_url)
        elif status >= 500:
            failure = EndpointError(code="endpoint.5xx", hint="endpoint.5xx.hint", status=status,
                                    detail=detail)
        elif status >= 400 and key_problem(*fields):
            # a 401 in all but its status (a proxy's, Gemini's): the key or the proxy's setup
            own = self._scrub(_shorten(clean_text(fields[0])))
            failure = EndpointError(code="endpoint.401", hint="endpoint.key_setup.hint",
                                    status=status, detail=own or detail, model=model, url=self.base_url)
        else:
            failure = EndpointError(code="endpoint.4xx", status=status, detail=detail)
        failure.retry_after = retry_after_seconds(error.retry_after)
        return failure

    def _no_key(self, refusal: EndpointError) -> EndpointError:
        """The endpoint refused the request sent without a key (NO_KEY_PLACEHOLDER): it wants
        one, and none is set. Said as such to the owner, not as a key it refused."""
        failure = EndpointError(code="endpoint.no_key", hint="endpoint.no_key.hint", url=self.base_url,
                                status=refusal.status, detail=refusal.params.get("detail", ""))
        failure.retry_after = refusal.retry_after
        return failure

    async def close(self) -> None:
        """Close the connection pool (a later request would open another)."""
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    def read(self, body: bytes) -> Completion:
        """The Completion a 2xx body holds, or an EndpointError naming what it was instead."""
        return self._read(self._parse(body))

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
            raise self._not_json(text, error) from None
        if not isinstance(data, dict):
            raise EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                url=self.base_url, start=self._scrub(repr(text[:80])))
        return data

    def _not_json(self, text: str, error: ValueError | RecursionError) -> EndpointError:
        """What a 2xx body that is not JSON was instead."""
        start = self._scrub(repr(text[:80]))
        if not text.lstrip().startswith(("{", "[")):  # an HTML page, plain text: not the API
            return EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                 url=self.base_url, start=start)
        if isinstance(error, json.JSONDecodeError):
            reason = f"{error.msg} at line {error.lineno}, column {error.colno}"
        elif isinstance(error, RecursionError):
            reason = "nested too deeply"
        else:  # "Exceeds the limit (4300 digits) for integer string conversion..."
            reason = _shorten(str(error).split(";")[0])
        return EndpointError(code="endpoint.bad_json", url=self.base_url, error=reason, start=start)

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
        thought, content = split_reasoning(_text_of(message.get("content")))
        reasoning = _text_of(message.get("reasoning_content") or message.get("reasoning"))
        reasoning = "\n".join(part for part in (reasoning, thought) if part)
        limit = self.max_answer_chars
        if len(reasoning) > limit:
            reasoning = reasoning[:limit] + "…"
        calls, extras = _tool_calls_of(message)
        return Completion(content=content[:limit], tool_calls=calls, reasoning=reasoning,
                          cut=len(content) > limit, usage=usage_of(response),
                          extras=tuple(extras) if any(extras) else ())


_CALL_KEYS = frozenset({"id", "type", "function", "index"})


def _tool_calls_of(message: dict[str, Any]) -> tuple[list[ToolCall], list[dict[str, Any] | None]]:
    """The well-formed tool calls of a message, each with an id of its own (every call must get
    its own tool message), and what the provider attached to each beyond them (Gemini's
    `extra_content`: kept exactly, to go back within the turn); calls without a function name
    are left out."""
    calls: list[ToolCall] = []
    extras: list[dict[str, Any] | None] = []
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
        while unique in seen_ids:
            unique, suffix = f"{call_id}_{suffix}", suffix + 1
        seen_ids.add(unique)
        calls.append(ToolCall(id=unique, name=clean_text(name), arguments=_arguments_text(function)))
        extra = {key: value for key, value in raw.items() if key not in _CALL_KEYS}
        extras.append(extra or None)
    return calls, extras


def _arguments_text(function: dict[str, Any]) -> str:
    """A call's arguments as text: as sent, "" when none; some servers send an object (deep or
    out-of-range ones the runner refuses)."""
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        return clean_text(arguments)
    if arguments is None:
        return ""
    return json_text(arguments) or UNREADABLE_ARGUMENTS
