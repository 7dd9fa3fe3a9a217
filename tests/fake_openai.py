"""A fake OpenAI-compatible endpoint: a real HTTP server on 127.0.0.1 with scripted answers.

openai 3.x sends through httpx2, which respx cannot intercept, so tests (and benchmarks) talk to
this server over loopback. Each request body is recorded in `requests`; answers come from the
queue filled by `push(...)`, else from `responder(body)`, else a plain "ok" text.

Hostile endpoints too: `streamed(...)` writes a body chunk by chunk as a generator makes it
(huge or endless ones are never held whole, here or by a client that stops reading in time),
`huge_text(...)` is a completion of any size, `raw(...)` any bytes with any headers.

Nothing here is timed against the machine's speed: `held(...)` answers wait until the test calls
`release()`, `together` holds requests until that many are in at once, and `in_flight` counts the
requests not answered yet, so a test waits for events instead of guessing how long they take.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.loopback import QuietHandler, serve, shut

Body = dict[str, Any]


@dataclass
class Answer:
    """One scripted HTTP answer."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Callable[[], Iterable[bytes]] | None = None
    """When set, the body is what this makes, written as it comes (`body` is not sent)."""
    length: int | None = None
    """The Content-Length announced for `chunks`; None sends them chunked."""
    drop: bool = False
    """Close the connection without answering (a proxy or server that went away mid-request)."""
    held: bool = False
    """Sent only once the test calls `FakeOpenAI.release()` (at most HOLD_LIMIT s later): an answer
    that is surely still on its way whatever the test does meanwhile, however slow the machine."""
    written: int = 0
    """Bytes of `chunks` written so far (a client that stops reading stops this growing)."""


_ids = itertools.count(1)

EMBEDDING_DIMENSION = 64
"""The length of the fake's embeddings (`fake_embedding`)."""

HOLD_LIMIT = 60.0
"""Seconds a held answer or a request waiting for company waits at most: a test that never
releases it fails on its own timeouts instead of leaving a thread behind for good."""


def held(answer: Answer) -> Answer:
    """The answer, sent only once the test calls `FakeOpenAI.release()`."""
    return dataclasses.replace(answer, held=True)


def _completion(message: dict[str, Any], finish_reason: str, model: str = "fake-model") -> Answer:
    payload = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return Answer(body=json.dumps(payload, ensure_ascii=False).encode())


def text(content: str, *, reasoning: str | None = None, delay: float = 0.0) -> Answer:
    """An answer with text and no tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    answer = _completion(message, "stop")
    answer.delay = delay
    return answer


def tool_calls(
    *calls: tuple[Any, ...], content: str | None = None, delay: float = 0.0, reasoning: str | None = None
) -> Answer:
    """An answer asking for tool calls: each `(name, arguments)` or `(name, arguments, id)`.

    `arguments` may be a dict (sent as JSON text) or a string sent as it is (to script bad JSON).
    """
    items = []
    for call in calls:
        name, arguments = call[0], call[1]
        call_id = call[2] if len(call) > 2 else f"call_{next(_ids)}"
        items.append({
            "id": call_id,
            "type": "function",
            "function": {
                "name": name,
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        })
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": items}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    answer = _completion(message, "tool_calls")
    answer.delay = delay
    return answer


def error(status: int, message: str, *, delay: float = 0.0, headers: dict[str, str] | None = None) -> Answer:
    """An HTTP error in OpenAI's error shape (with headers such as Retry-After)."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Answer(status=status, body=json.dumps(body).encode(), delay=delay, headers=dict(headers or {}))


def dropped() -> Answer:
    """The connection closed without an answer."""
    return Answer(drop=True)


def _successive_roles(messages: list[Body]) -> str | None:
    for index in range(1, len(messages)):
        role = messages[index].get("role")
        if role in ("user", "assistant") and messages[index - 1].get("role") == role:
            return (f"deepseek-reasoner does not support successive user or assistant messages "
                    f"(messages[{index - 1}] and messages[{index}] in your input). You should "
                    "interleave the user/assistant messages in the message sequence.")
    return None


def _reasoning_missing(messages: list[Body]) -> str | None:
    # within the running question (after the last user message): DeepSeek's thinking mode
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    for index, message in enumerate(messages):
        if (index > last_user and message.get("role") == "assistant" and message.get("tool_calls")
                and "reasoning_content" not in message):
            return (f"Missing `reasoning_content` field in the assistant message at message index "
                    f"{index}. For more information, please refer to "
                    "https://api-docs.deepseek.com/guides/thinking_mode#tool-calls")
    return None


def _system_refused(messages: list[Body]) -> str | None:
    for index, message in enumerate(messages):
        if message.get("role") == "system":
            return f"Unsupported value: 'messages[{index}].role' does not support 'system' with this model."
    return None


def _null_content(messages: list[Body]) -> str | None:
    for message in messages:
        if message.get("role") == "assistant" and message.get("content") is None:
            return "Invalid 'content': 'content' field must be a string or an array of objects."
    return None


def provider_refusal(body: Body) -> str | None:
    """What a real provider of the requested model says to a request that breaks its rules
    (their own error texts), or None: DeepSeek's reasoner (no two user or assistant messages in
    a row; reasoning_content back with tool calls), OpenAI's o1-mini (no system role, no
    max_tokens), a Qwen server (LM Studio: no null content)."""
    model = str(body.get("model", "")).casefold()
    messages = body.get("messages") or []
    if model.startswith("deepseek-reasoner"):
        return _successive_roles(messages) or _reasoning_missing(messages)
    if model.startswith("o1-mini"):
        if "max_tokens" in body:
            return ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead.")
        return _system_refused(messages)
    if model.startswith("qwen"):
        return _null_content(messages)
    return None


def raw(
    body: bytes, *, status: int = 200, content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> Answer:
    """Any body at all, to script an endpoint that answers nonsense."""
    return Answer(status=status, body=body, content_type=content_type, headers=dict(headers or {}))


def streamed(
    chunks: Callable[[], Iterable[bytes]], *, length: int | None = None, status: int = 200,
    content_type: str = "application/json", headers: dict[str, str] | None = None,
) -> Answer:
    """A body written chunk by chunk as `chunks()` yields it (it may sleep between chunks, or
    never end): chunked transfer encoding, or `length` announced as Content-Length."""
    return Answer(status=status, content_type=content_type, headers=dict(headers or {}),
                  chunks=chunks, length=length)


HUGE_HEAD = (b'{"id": "chatcmpl-huge", "object": "chat.completion", "model": "fake-model", '
             b'"choices": [{"index": 0, "message": {"role": "assistant", "content": "')
HUGE_TAIL = b'"}, "finish_reason": "stop"}]}'


def huge_text(size: int, *, announce: bool = False, chunk: int = 64 * 1024) -> Answer:
    """A completion whose content is `size` bytes of "x", made and written `chunk` bytes at a
    time; `announce` sends its Content-Length, else it is sent chunked."""
    block = b"x" * chunk

    def parts() -> Iterable[bytes]:
        yield HUGE_HEAD
        for start in range(0, size, chunk):
            yield block if start + chunk <= size else block[:size - start]
        yield HUGE_TAIL

    total = len(HUGE_HEAD) + size + len(HUGE_TAIL)
    return streamed(parts, length=total if announce else None)


@dataclass
class FakeOpenAI:
    """The server; use as a context manager or call start()/stop()."""

    requests: list[Body] = field(default_factory=list)
    responder: Callable[[Body], Answer] | None = None
    latency: float = 0.0
    strict: bool = False
    """Refuse, as the real provider would (`provider_refusal`), a request that breaks the rules of
    the model it names; a refused request is recorded and leaves the queue as it was."""
    together: int = 0
    """When set, no request is answered before this many were in flight at once (HOLD_LIMIT s at
    most): requests that are sent one after another never get there, so a test sees that they
    run in parallel without timing them."""
    embedding_requests: list[Body] = field(default_factory=list)
    """Every `/v1/embeddings` body, in order (not in `requests`: those are the chat's)."""
    embedding_dimension: int = EMBEDDING_DIMENSION
    embedder: Callable[[Body], Answer] | None = None
    """When set, answers `/v1/embeddings` instead of `fake_embedding` (a misbehaving model)."""
    signatures: dict[str, str] = field(default_factory=dict)
    """Strict mode, Gemini 3: the thought signature sent with each call id (checked when the
    call comes back within its turn)."""
    streamed: int = 0
    """Answers sent as server-sent events (the request asked for `stream: true`)."""

    def __post_init__(self) -> None:
        self._queue: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._crowd = threading.Condition()
        self._released = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._generation = 0  # requests from before the last reset count no more
        self.in_flight = 0
        """Requests received since the last reset and not answered yet."""
        self.most_in_flight = 0
        """The most requests that were in flight at once since the last reset."""

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the fake first"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """What MARSHO_BASE_URL should be set to."""
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *answers: Answer) -> None:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._queue.extend(answers)

    def reset(self) -> None:
        """Forget queued answers, recorded requests, the responder and the latency; send the
        held answers."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
        self.responder = None
        self.latency = 0.0
        self.strict = False
        self.together = 0
        self.release()
        with self._crowd:
            self._released = threading.Event()
            self._generation += 1
            self.in_flight = self.most_in_flight = 0
            self._crowd.notify_all()  # no request waits for company any more

    def release(self) -> None:
        """Send the held answers (`held(...)`): those waiting now, and those still to come until
        the next reset."""
        self._released.set()

    def _arrived(self) -> tuple[int, threading.Event]:
        with self._crowd:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._crowd.notify_all()
            return self._generation, self._released

    def _wait_for_company(self) -> None:
        with self._crowd:
            self._crowd.wait_for(lambda: self.most_in_flight >= self.together, HOLD_LIMIT)

    def _left(self, generation: int) -> None:
        with self._crowd:
            if generation == self._generation:
                self.in_flight -= 1

    @property
    def pending(self) -> int:
        """Queued answers not yet sent."""
        return len(self._queue)

    def _next_answer(self, body: Body) -> Answer:
        with self._lock:
            self.requests.append(body)
            refusal = provider_refusal(body) if self.strict else None
            if refusal is not None:
                return error(400, refusal)
            refused = self._provider_answer(body) if self.strict else None
            if refused is not None:
                return refused
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(body)
        return text("ok")

    def _provider_answer(self, body: Body) -> Answer | None:
        """Strict mode: the refusal a streaming-era provider gives this request (Gemini 3's
        missing or altered thought signature, DashScope's stream-only models, OpenAI's
        reasoning_effort and stream_options rules), or None."""
        refusal = streaming_refusal(body, self.signatures)
        if refusal is None:
            return None
        status, message, shape = refusal
        if shape == "gemini":
            return gemini_error(status, message)
        return error(status, message)

    def _as_asked(self, body: Body, answer: Answer) -> Answer:
        """The scripted answer as the provider of the requested model sends it: Gemini 3's tool
        calls signed (the first call of each response), and streamed as server-sent events when
        the request asked for a stream (`stream: true`)."""
        if answer.status != 200 or answer.chunks is not None or answer.drop:
            return answer
        if body.get("stream") is not True and not self.strict:
            return answer  # as scripted (and not read: a test's body may be any bytes)
        try:
            payload = json.loads(answer.body)
        except (ValueError, RecursionError):
            return answer
        if not isinstance(payload, dict) or not payload.get("choices"):
            return answer
        model = str(body.get("model", "")).casefold()
        if self.strict and model.startswith("gemini-3"):
            payload = self._signed(payload)
        if body.get("stream") is not True:
            if payload is not None and self.strict and model.startswith("gemini-3"):
                return dataclasses.replace(answer, body=json.dumps(payload, ensure_ascii=False).encode())
            return answer
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        streamed_answer = sse_answer(payload, include_usage=usage, empty_ids=model.startswith(("qwq", "qwen")))
        streamed_answer.delay, streamed_answer.held = answer.delay, answer.held
        self.streamed += 1
        return streamed_answer

    def _signed(self, payload: Body) -> Body:
        """Gemini 3: the first call of a response carries an opaque thought signature in
        `extra_content.google.thought_signature` (parallel calls after it carry none)."""
        payload = json.loads(json.dumps(payload))
        message = payload["choices"][0].get("message") or {}
        calls = message.get("tool_calls") or []
        for position, call in enumerate(calls):
            if position == 0:
                signature = f"sig-{next(_ids)}-{call.get('id')}"
                call["extra_content"] = {"google": {"thought_signature": signature}}
                self.signatures[str(call.get("id"))] = signature
        return payload

    def _embeddings(self, data: bytes) -> Answer:
        """`/v1/embeddings`: each input's `fake_embedding`, in order (or `embedder`'s answer)."""
        try:
            body = json.loads(data)
        except json.JSONDecodeError:
            return error(400, "body is not JSON")
        with self._lock:
            self.embedding_requests.append(body)
        if self.embedder is not None:
            return self.embedder(body)
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        return embeddings([fake_embedding(text, self.embedding_dimension) for text in texts],
                          model=str(body.get("model", "")))

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(QuietHandler):
            def handle(self) -> None:
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a client that stopped reading a body closes its connection

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                if self.path.rstrip("/").endswith("/embeddings"):
                    self._reply(fake._embeddings(data))
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._reply(error(404, f"no route {self.path}"))
                    return
                try:
                    body = json.loads(data)
                except json.JSONDecodeError:
                    self._reply(error(400, "body is not JSON"))
                    return
                body["_headers"] = {k.lower(): v for k, v in self.headers.items()}
                generation, released = fake._arrived()
                try:
                    answer = fake._as_asked(body, fake._next_answer(body))
                    fake._wait_for_company()
                    if answer.held:
                        released.wait(HOLD_LIMIT)
                    delay = answer.delay + fake.latency
                    if delay:
                        time.sleep(delay)
                    if answer.drop:
                        self.close_connection = True  # nothing written: the client sees it go
                        return
                    self._reply(answer)
                finally:
                    fake._left(generation)

            def _reply(self, answer: Answer) -> None:
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    if answer.chunks is None:
                        self.send_header("Content-Length", str(len(answer.body)))
                        self.end_headers()
                        self.wfile.write(answer.body)
                    elif answer.length is not None:
                        self.send_header("Content-Length", str(answer.length))
                        self.end_headers()
                        for chunk in answer.chunks():
                            self.wfile.write(chunk)
                            answer.written += len(chunk)
                    else:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for chunk in answer.chunks():
                            if chunk:
                                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                                answer.written += len(chunk)
                        self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout, a cap)

        self._server = serve(Handler)
        return self

    def stop(self) -> None:
        shut(self._server)
        self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def with_usage(answer: Answer, usage: dict[str, Any] | None) -> Answer:
    """The answer with this `usage` object (None: without one, as some endpoints answer)."""
    payload = json.loads(answer.body)
    if usage is None:
        payload.pop("usage", None)
    else:
        payload["usage"] = usage
    return dataclasses.replace(answer, body=json.dumps(payload, ensure_ascii=False).encode())


# embeddings ---------------------------------------------------------------------------------


def fake_embedding(text: str, dimension: int = EMBEDDING_DIMENSION) -> list[float]:
    """A deterministic embedding: the text's words (letters and digits, lower case) and the pairs
    of its Chinese characters, each hashed to a signed position, summed and scaled to length 1.
    Texts sharing words are near; nothing about meaning."""
    import hashlib
    import math
    import re

    vector = [0.0] * dimension
    lowered = text.lower()
    features = re.findall(r"[a-z0-9]+", lowered)
    for run in re.findall(r"[\u4e00-\u9fff]+", lowered):
        features += [run[i:i + 2] for i in range(len(run) - 1)] or [run]
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dimension
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(value * value for value in vector)) or 1.0
    return [value / norm for value in vector]


def embeddings(vectors: list[list[float]], *, model: str = "fake-embedding") -> Answer:
    """An `/v1/embeddings` answer with these vectors, in order."""
    payload = {"object": "list", "model": model,
               "data": [{"object": "embedding", "index": i, "embedding": vector}
                        for i, vector in enumerate(vectors)],
               "usage": {"prompt_tokens": 0, "total_tokens": 0}}
    return Answer(body=json.dumps(payload).encode())


# streaming and the providers of the streaming era ----------------------------------------------


def sse_events(events: Iterable[Any], *, done: bool = True, gap: Callable[[], None] | None = None
               ) -> Callable[[], Iterable[bytes]]:
    """A server-sent event stream: `data: <json>` for each event (a str is sent as it is), each
    written (and flushed) on its own, then `data: [DONE]` unless `done` is False (a stream that
    stops half way); `gap()` runs before each event (a test's wait)."""
    items = list(events)

    def chunks() -> Iterable[bytes]:
        for item in items:
            if gap is not None:
                gap()
            data = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
            yield f"data: {data}\n\n".encode()
        if done:
            yield b"data: [DONE]\n\n"
    return chunks


def _pieces(text: str, size: int = 6) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def stream_chunks(payload: Body, *, include_usage: bool = False, empty_ids: bool = False) -> list[Body]:
    """A completion's chunks as a provider streams it: the role, reasoning and text in pieces,
    each tool call in fragments by index (id, type and name on the first, arguments in pieces;
    `empty_ids`: DashScope's `"id": ""` on the later ones, extra fields on the first), the
    finish reason, and the usage in a last chunk with empty `choices` when asked for."""
    base = {"id": payload.get("id", "chatcmpl-stream"), "object": "chat.completion.chunk",
            "created": payload.get("created", 0), "model": payload.get("model", "fake-model")}
    choice = payload["choices"][0]
    message = choice.get("message") or {}
    deltas: list[Body] = [{"role": "assistant", "content": ""}]
    for piece in _pieces(message.get("reasoning_content") or "") if message.get("reasoning_content") else []:
        deltas.append({"reasoning_content": piece})
    if message.get("content"):
        deltas += [{"content": piece} for piece in _pieces(message["content"])]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        first: Body = {"index": index, "id": call.get("id"), "type": "function",
                       "function": {"name": function.get("name"), "arguments": ""}}
        first.update({k: v for k, v in call.items() if k not in ("id", "type", "function")})
        deltas.append({"tool_calls": [first]})
        for piece in _pieces(str(function.get("arguments") or ""), 4):
            fragment: Body = {"index": index, "function": {"arguments": piece}}
            if empty_ids:
                fragment.update({"id": "", "type": "function"})
            deltas.append({"tool_calls": [fragment]})
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]})
    if include_usage and payload.get("usage"):
        chunks.append({**base, "choices": [], "usage": payload["usage"]})
    return chunks


def sse_answer(payload: Body, *, include_usage: bool = False, empty_ids: bool = False) -> Answer:
    """A completion sent as server-sent events (`stream_chunks`), `data: [DONE]` at the end."""
    chunks = stream_chunks(payload, include_usage=include_usage, empty_ids=empty_ids)
    return streamed(sse_events(chunks), content_type="text/event-stream")


def streamed_text(*pieces: str, usage: Body | None = None, done: bool = True,
                  finish: bool = True, gap: Callable[[], None] | None = None) -> Answer:
    """A streamed answer of these text pieces, as they are (a test's own cut: `done` and
    `finish` False is a stream that stops half way)."""
    base = {"id": "chatcmpl-pieces", "object": "chat.completion.chunk", "model": "fake-model"}
    chunks: list[Any] = [{**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                         for piece in pieces]
    if finish:
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage is not None:
        chunks.append({**base, "choices": [], "usage": usage})
    return streamed(sse_events(chunks, done=done, gap=gap), content_type="text/event-stream")


def gemini_error(status: int, message: str) -> Answer:
    """Gemini's OpenAI-compatible error: a JSON list holding one error object."""
    body = [{"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}]
    return Answer(status=status, body=json.dumps(body).encode())


GEMINI_SIGNATURE_MISSING = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {position}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)

DASHSCOPE_STREAM_ONLY = ("This model only support stream mode, please enable the stream parameter "
                         "to access the model. ")

DASHSCOPE_THINKING_STREAM_ONLY = "parameter.enable_thinking must be set to false for non-streaming calls"


def _gemini_signatures(messages: list[Body], issued: dict[str, str]) -> str | None:
    # within the running turn (after the last user message), as Gemini 3 validates: the first
    # call of each assistant step must bring back its signature exactly; no call may bring one
    # it was not given
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    for index, message in enumerate(messages):
        if index <= last_user or message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        for position, call in enumerate(message["tool_calls"]):
            given = ((call.get("extra_content") or {}).get("google") or {}).get("thought_signature")
            expected = issued.get(str(call.get("id")))
            name = (call.get("function") or {}).get("name", "?")
            if (position == 0 and given is None) or given != expected:
                if given is not None and given != expected:
                    return f"Corrupted thought signature for function call `{name}`."
                return GEMINI_SIGNATURE_MISSING.format(name=name, position=index)
    return None


def _effort_refusal(model: str, body: Body) -> str | None:
    """OpenAI's rules for `reasoning_effort`: only reasoning models take it, `minimal` only the
    gpt-5 family, `none` only gpt-5.1."""
    if "reasoning_effort" not in body:
        return None
    effort = body["reasoning_effort"]
    if not model.startswith(("o1", "o3", "o4", "gpt-5")):
        return "Unrecognized request argument supplied: reasoning_effort"
    allowed = ["low", "medium", "high"] + (["minimal"] if model.startswith("gpt-5") else [])
    allowed += ["none"] if model.startswith("gpt-5.1") else []
    if effort not in allowed:
        return (f"Unsupported value: 'reasoning_effort' does not support '{effort}' with this model. "
                f"Supported values are: {', '.join(repr(value) for value in allowed)}.")
    return None


def _dashscope_refusal(model: str, body: Body, stream: bool) -> str | None:
    """DashScope: qwq takes only streams and always thinks; qwen3 thinks only when streamed."""
    if model.startswith("qwq") and not stream:
        return DASHSCOPE_STREAM_ONLY
    if model.startswith("qwq") and body.get("enable_thinking") is False:
        return "The value of the enable_thinking parameter is restricted to True."
    if model.startswith("qwen3") and body.get("enable_thinking") is True and not stream:
        return DASHSCOPE_THINKING_STREAM_ONLY
    return None


def streaming_refusal(body: Body, signatures: dict[str, str]) -> tuple[int, str, str] | None:
    """(status, message, shape) of what a real provider says to a request that breaks its rules
    of the streaming era, or None: `stream_options` without `stream` (OpenAI), Gemini 3's
    thought signatures (a JSON-list error), DashScope's stream-only models (qwq, qwen3 thinking),
    OpenAI's reasoning_effort values, DeepSeek's `thinking` switch's shape."""
    model = str(body.get("model", "")).casefold()
    stream = body.get("stream") is True
    if "stream_options" in body and not stream:
        return 400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.", "openai"
    if model.startswith("gemini-3"):
        refusal = _gemini_signatures(body.get("messages") or [], signatures)
        if refusal is None and body.get("reasoning_effort") not in (None, "minimal", "low", "medium", "high"):
            refusal = f"Invalid reasoning_effort value: {body.get('reasoning_effort')}"
        return None if refusal is None else (400, refusal, "gemini")
    if model.startswith(("qwq", "qwen3")):
        refusal = _dashscope_refusal(model, body, stream)
        return None if refusal is None else (400, refusal, "openai")
    if model.startswith(("gpt-", "o1", "o3", "o4")):
        refusal = _effort_refusal(model, body)
        return None if refusal is None else (400, refusal, "openai")
    if model.startswith("deepseek") and "thinking" in body:
        thinking = body["thinking"]
        if not (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled")):
            return 400, "Invalid thinking parameter: type must be 'enabled' or 'disabled'", "openai"
    return None
