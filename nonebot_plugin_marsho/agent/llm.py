"""The OpenAI-compatible client: one request → a Completion, every failure → an EndpointError."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import re
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Collection, Mapping
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
from .metering import Meter, TokenUsage, turn_model, usage_of
from .prompt_mode import parse_tool_calls, system_addendum, to_prompt_messages
from .providers import (
    AUTH_REST,
    RETRY_AFTER_CAP,
    RETRY_AFTER_REST_CAP,
    RETRY_BUDGET,
    CircuitBreaker,
    Deadline,
    EndpointStatus,
    Key,
    KeyPool,
    KeyStatus,
    Kind,
    NoKeyReady,
    Usage,
    backoff,
    falls_back,
    kind_of,
    masked,
    retry_after_seconds,
    retryable,
)
from .quirks import QuirkFields, Quirks, quirks_for, shaped

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
    usage: TokenUsage | None = None
    """The tokens the endpoint reported for the request (None: it reported none)."""

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


@dataclass(frozen=True)
class Fallback:
    """One endpoint of MARSHO_FALLBACKS, tried in order when the ones before it fail."""

    base_url: str
    model: str
    api_keys: list[str] = field(default_factory=list)
    tool_mode: ToolMode | None = None


@dataclass
class Route:
    """One turn's way through the endpoints: its tool rounds stay on the endpoint that answered
    unless it fails mid-turn, and its requests share one retry budget."""

    endpoint: int | None = None
    spent: float = 0.0
    """Seconds of the retry budget the turn's requests used (failed attempts and waits)."""
    reasoning: dict[str, int] = field(default_factory=dict)
    """The reasoning of the turn's tool-call answers, by the endpoint that gave it: it goes back
    to that endpoint only, never to another provider the turn moved to."""

    def foreign_reasoning(self, messages: list[dict[str, Any]], index: int) -> frozenset[str]:
        """The `reasoning_content` of `messages` that endpoint `index` did not give itself."""
        return frozenset(
            reasoning for message in messages
            if isinstance(reasoning := message.get("reasoning_content"), str)
            and self.reasoning.get(reasoning) != index)


def _fresh(error: EndpointError) -> EndpointError:
    """A new EndpointError saying what a stored one says: raised instead of the stored one, so
    each question gets its own object and traceback (one raised again and again would gather
    every raise's frames, and be shared by every task raising it)."""
    copied = copy.copy(error)
    copied.__traceback__ = copied.__cause__ = copied.__context__ = None
    return copied


class _Endpoint:
    """One endpoint of the chain: its HTTP client, keys, breaker and figures."""

    def __init__(self, index: int, base_url: str, keys: list[str], model: str | None,
                 tool_mode: ToolMode | None) -> None:
        self.index = index
        self.name = "primary" if index == 0 else f"fallback {index}"
        self.base_url = base_url.rstrip("/")
        self.pool = KeyPool(keys)
        self.model = model
        """None for the primary: it follows LLMClient.model (`marsho.model` switches it)."""
        self.tool_mode = tool_mode
        self.breaker = CircuitBreaker()
        self.usage = Usage()
        self.client: openai.AsyncOpenAI | None = None
        host = urlsplit(self.base_url).hostname or ""
        self.needs_key = not self.pool.keys[0].value and host.endswith("openai.com")
        """No key is set and the endpoint is one that always wants one (read once, not per request)."""
        self.host = host + (f":{port}" if (port := urlsplit(self.base_url).port) else "")
        """Where usage says the request went: the base URL's host, never a key or a path."""


class LLMClient:
    """Talks to one OpenAI-compatible endpoint, and to its fallbacks when it fails; make it inside
    the running loop and reuse it."""

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
        api_keys: list[str] | None = None,
        fallbacks: list[Fallback] | None = None,
        retries: int = 0,
        retry_budget: float = RETRY_BUDGET,
        quirks: Mapping[str, QuirkFields] | None = None,
        max_answer_tokens: int | None = None,
        model_setting: str = "MARSHO_MODEL",
        turn_model_applies: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_setting = model_setting
        """Where the primary endpoint's model was set, named when the endpoint does not know it:
        MARSHO_SUMMARY_MODEL for the summaries' own client, `marsho.model` once it chose one."""
        self.turn_model_applies = turn_model_applies
        """Whether a turn's own model (the quota's cheaper one) replaces this client's: not for a
        client of a model of its own (the summaries', the judge's)."""
        keys = [key for key in [api_key, *(api_keys or [])] if key]
        self.api_key = keys[0] if keys else ""
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
        self.retries = retries
        """Retries of one request on one endpoint (429, 5xx, dropped connections, timeouts,
        empty bodies), MARSHO_RETRIES."""
        self.retry_budget = retry_budget
        """Seconds retries, waits and fallbacks may take beyond `timeout`: per request, and per
        turn when the turn's requests share a Route."""
        self.quirks = dict(quirks or {})
        """MARSHO_MODEL_QUIRKS: fields by model name pattern, over the built-in profiles."""
        self._quirks: dict[str, Quirks] = {}
        self.max_answer_tokens = max_answer_tokens
        self.endpoints = [_Endpoint(0, self.base_url, keys, None, None)]
        for fallback in fallbacks or []:
            self.endpoints.append(_Endpoint(len(self.endpoints), fallback.base_url,
                                            list(fallback.api_keys), fallback.model, fallback.tool_mode))
        self._secrets = sorted({key.value for ep in self.endpoints for key in ep.pool.keys
                                if len(key.value) >= 4}, key=len, reverse=True)
        self._learned_prompt_mode: set[str] = set()
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        """How a retry waits (tests record the waits instead of taking them)."""
        self.meter: Meter | None = None
        """Told each answered request's usage (the owner's bill), when set."""

    def _turn_model(self) -> str:
        return turn_model() if self.turn_model_applies else ""

    def _settings_of(self, ep: _Endpoint) -> dict[str, str]:
        """Where the owner set `ep`'s model, keys and URL, for the hints of its errors: a
        fallback's or the summary model's mistake is not looked for in MARSHO_MODEL."""
        if ep.index:
            entry = f"MARSHO_FALLBACKS entry {ep.index}"
            model = f"{entry}'s model" if ep.model else self.model_setting
            return {"model_setting": "MARSHO_QUOTA_FALLBACK_MODEL" if self._turn_model() else model,
                    "key_setting": f"{entry}'s api_key or api_keys", "url_setting": f"{entry}'s base_url"}
        return {"model_setting": "MARSHO_QUOTA_FALLBACK_MODEL" if self._turn_model() else self.model_setting,
                "key_setting": "MARSHO_API_KEY (or MARSHO_API_KEYS)", "url_setting": "MARSHO_BASE_URL"}

    def _model_of(self, ep: _Endpoint) -> str:
        """The model `ep` is asked with: the turn's (the quota's cheaper model) while one is set
        and applies here, else its own, else the primary's."""
        return self._turn_model() or ep.model or self.model

    def _tool_mode_of(self, model: str, configured: ToolMode | None = None) -> ToolMode:
        if configured is not None:
            return configured
        if model in self.tool_mode_by_model:
            return self.tool_mode_by_model[model]
        if model in self._learned_prompt_mode:
            return "prompt"
        return self.default_tool_mode

    @property
    def tool_mode(self) -> ToolMode:
        """How the current model gets tools: configured per model, else learned, else default."""
        return self._tool_mode_of(self.model)

    @property
    def needs_key(self) -> bool:
        """True when no key is set and the endpoint is one that always wants one."""
        return self._needs_key(self.endpoints[0])

    @staticmethod
    def _needs_key(ep: _Endpoint) -> bool:
        return ep.needs_key

    def _get_client(self, ep: _Endpoint) -> openai.AsyncOpenAI:
        if ep.client is None:
            ep.client = openai.AsyncOpenAI(
                base_url=ep.base_url,
                api_key=ep.pool.keys[0].value or NO_KEY_PLACEHOLDER,
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
                # retries are ours (_request): chosen by kind, bounded by the retry budget, and
                # moving on to the fallbacks; the SDK's would come on top of MARSHO_TIMEOUT
                max_retries=0,
            )
        return ep.client

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
            raise _StatusError(response.status_code, response.reason_phrase, body,
                               response.headers.get("retry-after"))

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        *, route: Route | None = None,
    ) -> Completion:
        """Ask the model, offering `tools` in the model's tool mode; calls come back as
        ToolCalls whatever the mode, and `messages` are always in the native format.

        Each endpoint is retried MARSHO_RETRIES times for failures a retry may fix, then the
        next one of MARSHO_FALLBACKS is asked; all of it within `timeout` + `retry_budget`.
        `route` keeps a turn on the endpoint that answered its first request, and spreads one
        `retry_budget` over all the turn's requests.

        While endpoints are left to try, one that timed out is not retried, and its retries
        leave min(`timeout`, the budget) of the deadline to the ones after it; reasoning goes
        back only to the endpoint that gave it (see Route)."""
        budget = max(0.0, self.retry_budget - (route.spent if route is not None else 0.0))
        deadline = Deadline(self.timeout + budget)
        reserve = min(self.timeout, budget)
        first_error: EndpointError | None = None
        order = self._order(route)
        for position, ep in enumerate(order):
            if first_error is not None and deadline.left() <= 0:
                break
            more = position < len(order) - 1
            foreign = route.foreign_reasoning(messages, ep.index) if route is not None else frozenset()
            tried = ep.breaker.now()
            try:
                completion = await self._complete_on(ep, messages, tools, deadline, more=more,
                                                     keep=reserve if more else 0.0, foreign=foreign)
            except EndpointError as error:
                if not falls_back(error):
                    raise
                if ep.breaker.failed(tried) and len(self.endpoints) > 1:
                    logger.warning(f"marsho: endpoint {ep.name} ({ep.base_url}) failed "
                                   f"{ep.breaker.failures} requests in a row; skipped for "
                                   f"{ep.breaker.cooldown:g} s")
                if len(self.endpoints) > 1:
                    logger.warning(f"marsho: endpoint {ep.name} ({ep.base_url}) failed: {error}")
                first_error = first_error or error
                continue
            ep.breaker.succeeded()
            if route is not None:
                route.endpoint = ep.index
                route.spent += deadline.spent
                if completion.tool_calls and completion.reasoning:
                    route.reasoning[completion.reasoning] = ep.index
            if ep.index:
                logger.info(f"marsho: answered by {ep.name} ({ep.base_url}, {self._model_of(ep)})")
            return completion
        assert first_error is not None
        raise first_error

    def _order(self, route: Route | None) -> list[_Endpoint]:
        """The endpoints to try: the turn's own first, then the chain in order, without those
        whose breaker is open (unless every one's is: then all, in order). While the turn has a
        model of its own (the quota's cheaper model), a fallback with another model is not
        tried: its model is another provider's, full price or not knowing the cheaper one."""
        cheaper = self._turn_model()
        chain = [ep for ep in self.endpoints if not cheaper or ep.model is None or ep.model == cheaper]
        if route is not None and route.endpoint is not None:
            chain = sorted(chain, key=lambda ep: ep.index != route.endpoint)  # stable: the rest in order
        closed = [ep for ep in chain if not ep.breaker.is_open]
        return closed or chain

    async def _complete_on(
        self, ep: _Endpoint, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
        deadline: Deadline, *, more: bool = False, keep: float = 0.0, foreign: Collection[str] = (),
    ) -> Completion:
        try:
            return await self._complete_here(ep, messages, tools, deadline, more=more, keep=keep,
                                             foreign=foreign)
        except EndpointError as error:
            # its hint names where the owner set this endpoint's model, keys and URL
            for name, setting in self._settings_of(ep).items():
                error.params.setdefault(name, setting)
            raise

    async def _complete_here(
        self, ep: _Endpoint, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
        deadline: Deadline, *, more: bool, keep: float, foreign: Collection[str],
    ) -> Completion:
        model = self._model_of(ep)
        mode = self._tool_mode_of(model, ep.tool_mode)
        options: dict[str, Any] = {"more": more, "keep": keep, "foreign": foreign}
        if mode == "native":
            try:
                return await self._request(ep, messages, tools, deadline, **options)
            except EndpointError as error:
                if not tools or not _refuses_tools(error):
                    raise
                self._learned_prompt_mode.add(model)
                logger.warning(
                    f"marsho: {ep.base_url} refused tools for model {model} ({error}); "
                    "using prompt mode for it from now on (set MARSHO_TOOL_MODE_BY_MODEL to "
                    "choose yourself)"
                )
                mode = "prompt"
        plain = to_prompt_messages(messages)
        if mode == "prompt" and tools:
            plain = _with_system_text(plain, system_addendum(tools))
        completion = await self._request(ep, plain, None, deadline, **options)
        calls, text = parse_tool_calls(completion.content)
        if not calls:
            return completion
        if mode != "prompt" or not tools:
            calls = []  # calls although no tools were offered: not run, and kept from the user
        return dataclasses.replace(completion, content=text, tool_calls=calls)

    async def _request(
        self, ep: _Endpoint, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
        deadline: Deadline, *, more: bool = False, keep: float = 0.0, foreign: Collection[str] = (),
    ) -> Completion:
        """Send one chat-completions request and read the first choice, retrying what a retry
        may fix (MARSHO_RETRIES) within `deadline`; a 429 rests its key, a 401/403 sets it
        aside, and another key of the pool takes over at once (each key once per request:
        a second 429 of a key counts as a retry).

        `more`: endpoints are left to try after this one; a timeout then goes to them at once,
        and the retries here leave `keep` seconds of the deadline to them. A Retry-After past
        RETRY_AFTER_CAP is not waited for: its key rests that long and another key, or the
        next endpoint, takes the request. `foreign`: reasoning another endpoint gave, not sent
        here (see `shaped`)."""
        if self._needs_key(ep):
            raise EndpointError(code="endpoint.no_key", hint="endpoint.no_key.hint", url=ep.base_url)
        model = self._model_of(ep)
        quirks = self._quirks.get(model)
        if quirks is None:  # matched once per model name
            quirks = self._quirks[model] = quirks_for(model, self.quirks)
        request: dict[str, Any] = {"model": model, "messages": shaped(messages, quirks, foreign)}
        if tools:
            request["tools"] = tools
        if self.max_answer_tokens:
            request[quirks.token_field] = self.max_answer_tokens
        attempt = 0
        rotated: set[int] = set()
        """Keys (by id) that passed this request on to another key after a 429."""
        last: EndpointError | None = None
        while True:
            if last is not None and deadline.left() <= keep:
                raise last  # nothing left for another try here (the rest is the fallbacks')
            try:
                key = await ep.pool.take(deadline, keep=keep, sleep=self.sleep)
            except NoKeyReady:
                if last is not None:
                    raise last from None
                # every key rests or is set aside after an earlier question's refusal
                assert ep.pool.last_refusal is not None
                raise _fresh(ep.pool.last_refusal) from None
            # the first attempt here gets MARSHO_TIMEOUT; later ones leave `keep` to the fallbacks
            timeout = min(self.timeout, deadline.left() - (keep if last is not None else 0.0))
            try:
                if self.gate is None:
                    started = deadline.start()
                    body = await self._exchange(ep, key, request, timeout)
                else:
                    async with self.gate.slot():  # the wait for a slot is not part of MARSHO_TIMEOUT
                        started = deadline.start()
                        timeout = min(self.timeout,
                                      deadline.left() - (keep if last is not None else 0.0))
                        body = await self._exchange(ep, key, request, timeout)
                completion = self._read(ep, self._parse(ep, body))
            except EndpointError as error:
                kind = kind_of(error)
                self._record(ep, key, kind, started)
                last = error
                if kind in ("auth", "rate"):
                    ep.pool.last_refusal = error
                if kind == "auth" and not ep.pool.single:
                    # set aside once, logged once: other requests in flight with it may be
                    # refused after this one
                    if ep.pool.set_aside(key):
                        logger.warning(f"marsho: endpoint {ep.name} ({ep.base_url}) refused key "
                                       f"{masked(key.value)} ({error.status}); it is set aside for "
                                       f"{AUTH_REST:g} s and the pool's other keys are used")
                    continue
                asked = error.retry_after
                if kind == "rate" and asked is not None and asked > RETRY_AFTER_CAP:
                    # not waited for: the key rests as asked, another takes over, else the
                    # next endpoint (or the 429 is the answer)
                    ep.pool.rest(key, min(asked, RETRY_AFTER_REST_CAP))
                    if not ep.pool.single and ep.pool.ready():
                        continue
                    raise
                wait = backoff(attempt) if asked is None else asked
                if kind == "rate" and not ep.pool.single:
                    # at least a backoff: a Retry-After of 0 would let the keys take turns at
                    # the speed of the endpoint's answers
                    ep.pool.rest(key, max(wait, backoff(attempt)))
                    if id(key) not in rotated and ep.pool.ready():
                        rotated.add(id(key))
                        continue  # another key takes it at once: not a retry (each key once)
                    wait = 0.0  # the pool waits for the first rested key itself, within the bound
                if not retryable(error) or attempt >= self.retries:
                    raise
                if kind == "timeout" and more:
                    raise  # a hung endpoint: the next one is asked now, with the time left
                if wait >= deadline.left() - keep:
                    raise
                logger.info(f"marsho: endpoint {ep.name} ({ep.base_url}), retry {attempt + 1} of "
                            f"{self.retries} in {wait:.1f} s: {error}")
                if wait:
                    await self.sleep(wait)
                attempt += 1
                continue
            self._record(ep, key, "ok", started)
            deadline.answered(started)
            if self.meter is not None:
                self.meter.record(model, ep.host, completion.usage, request=request,
                                  content=completion.content, calls=completion.tool_calls)
            return completion

    def _record(self, ep: _Endpoint, key: Key, kind: Kind, started: float) -> None:
        now = time.monotonic()
        ep.usage.record(kind, now - started, now)
        key.usage.record(kind, now - started, now)

    def status(self) -> list[EndpointStatus]:
        """Each endpoint and key with its state, requests, errors by kind and latency
        (p50, p95 over the last hour), for `marsho.status`."""
        now = time.monotonic()
        shown = []
        for ep in self.endpoints:
            keys = [KeyStatus(masked(key.value), *key.state(now), key.usage.requests,
                              dict(key.usage.errors), key.usage.latencies.percentiles(now))
                    for key in ep.pool.keys]
            usable = [k for k in keys if k.state == "ok"]
            if ep.breaker.is_open and len(self.endpoints) > 1:  # alone, it is never skipped
                state, left = "skipped", ep.breaker.open_until - now
            elif not usable:
                first = min(keys, key=lambda k: k.seconds_left)
                state, left = first.state, first.seconds_left
            else:
                state, left = "ok", 0.0
            shown.append(EndpointStatus(ep.name, ep.base_url, self._model_of(ep), state, left,
                                        ep.usage.requests, dict(ep.usage.errors),
                                        ep.usage.latencies.percentiles(now), keys))
        return shown

    async def _exchange(self, ep: _Endpoint, key: Key, request: dict[str, Any], timeout: float) -> bytes:
        """POST the request; the body of a 2xx answer, or an EndpointError."""
        started = time.monotonic()
        try:
            response = await asyncio.wait_for(self._post(ep, key, request), max(timeout, 0.001))
        except (asyncio.TimeoutError, openai.APITimeoutError) as error:
            # the aiohttp transport reports a refused connection as a (connect) timeout at once
            if time.monotonic() - started < timeout * 0.9 and error.__cause__ is not None:
                raise self._unreachable(ep, error.__cause__) from None
            raise EndpointError(code="endpoint.timeout", hint="endpoint.timeout.hint",
                                url=ep.base_url, seconds=f"{round(timeout, 1):g}") from None
        except _TooLarge as error:
            raise EndpointError(code="endpoint.too_large", hint="endpoint.too_large.hint",
                                url=ep.base_url, limit=self.max_response_bytes,
                                announced=error.declared) from None
        except _Undecodable as error:
            raise EndpointError(code="endpoint.unreadable", url=ep.base_url, error=str(error)) from None
        except _StatusError as error:
            raise self._status_error(ep, error) from None
        except openai.APIConnectionError as error:
            raise self._unreachable(ep, error.__cause__ or error) from None
        except openai.OpenAIError as error:
            raise EndpointError(code="endpoint.unreadable", url=ep.base_url,
                                error=self._scrub(_shorten(str(error)))) from None
        return response.content

    async def _post(self, ep: _Endpoint, key: Key, request: dict[str, Any]) -> httpx2.Response:
        client = self._get_client(ep)
        # a pool's key goes in each request's header (one client, one connection pool, per endpoint)
        options: Any = {} if ep.pool.single else {"headers": {"Authorization": f"Bearer {key.value}"}}
        try:
            # the SDK's low-level post: our messages are plain OpenAI-shaped dicts already, and
            # create()'s parameter transform costs ~0.25 ms per message (11 ms at 40 messages);
            # the body comes back as bytes (read by _take_body), cheaper than the SDK's models
            return await client.post("/chat/completions", body=request, cast_to=httpx2.Response,
                                     options=options)
        except UnicodeEncodeError:  # a lone surrogate somewhere (a question, an old turn)
            return await client.post("/chat/completions", body=_without_lone_surrogates(request),
                                     cast_to=httpx2.Response, options=options)

    def _scrub(self, text: str) -> str:
        """Endpoint-supplied text without the API keys (a proxy may echo the request back)."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _unreachable(self, ep: _Endpoint, cause: BaseException) -> EndpointError:
        error = EndpointError(code="endpoint.unreachable", hint="endpoint.unreachable.hint",
                              url=ep.base_url, error=self._scrub(f"{type(cause).__name__}: {cause}"))
        error.refused = _was_refused(cause)
        return error

    def _status_error(self, ep: _Endpoint, error: _StatusError) -> EndpointError:
        status = error.status
        text = error.body.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
        detail = _error_detail_of(data) if isinstance(data, dict) else ""
        detail = self._scrub(detail or _shorten(text) or error.reason or "(no detail)")
        if status in (401, 403, 404, 429):
            failure = EndpointError(code=f"endpoint.{status}", hint=f"endpoint.{status}.hint",
                                    status=status, detail=detail, model=self._model_of(ep),
                                    url=ep.base_url)
        elif status >= 500:
            failure = EndpointError(code="endpoint.5xx", hint="endpoint.5xx.hint", status=status,
                                    detail=detail)
        else:
            failure = EndpointError(code="endpoint.4xx", status=status, detail=detail)
        failure.retry_after = retry_after_seconds(error.retry_after)
        return failure

    def _parse(self, ep: _Endpoint, body: bytes) -> dict[str, Any]:
        """The JSON object of a 2xx body, or an EndpointError naming what it was instead."""
        if not body.strip():
            raise EndpointError(code="endpoint.empty_body", hint="endpoint.not_completion.hint",
                                url=ep.base_url)
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise EndpointError(code="endpoint.not_utf8", url=ep.base_url, position=error.start,
                                start=self._scrub(repr(body[:40]))) from None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as error:
            start = self._scrub(repr(text[:80]))
            if not text.lstrip().startswith(("{", "[")):  # an HTML page, plain text: not the API
                raise EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                    url=ep.base_url, start=start) from None
            if isinstance(error, json.JSONDecodeError):
                reason = f"{error.msg} at line {error.lineno}, column {error.colno}"
            elif isinstance(error, RecursionError):
                reason = "nested too deeply"
            else:  # "Exceeds the limit (4300 digits) for integer string conversion..."
                reason = _shorten(str(error).split(";")[0])
            raise EndpointError(code="endpoint.bad_json", url=ep.base_url, error=reason,
                                start=start) from None
        if not isinstance(data, dict):
            raise EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                url=ep.base_url, start=self._scrub(repr(text[:80])))
        return data

    def _read(self, ep: _Endpoint, response: dict[str, Any]) -> Completion:
        """The first choice of a chat completion, read from the JSON body with care: whatever
        the endpoint sent, the result is well-formed or an EndpointError says what was wrong.
        Only strings are taken from it (nothing deep is printed or written again but a call's
        arguments), cleaned of lone surrogates, and the text is cut at max_answer_chars."""
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            detail = self._scrub(_error_detail_of(response))
            raise EndpointError(code="endpoint.no_choices", url=ep.base_url,
                                detail=f": {detail}" if detail else "")
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict):
            raise EndpointError(code="endpoint.empty_choice", url=ep.base_url)
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
                          cut=len(content) > limit, usage=usage_of(response))

    async def close(self) -> None:
        """Close the connection pools."""
        for ep in self.endpoints:
            if ep.client is not None:
                client, ep.client = ep.client, None
                await client.close()


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
