"""A fake seed-004 web service: a real HTTP server on 127.0.0.1 that records POSTs and answers them.

Every request is recorded in `requests` (path, JSON body, lower-cased headers). Answers come from
the queue filled by `push(...)`, else from `responder(request)`, else a markdown answer echoing
the body. An `Answer` can be late (`delay`), sent in chunks without a Content-Length (`chunked`),
or declare a length it does not send (`declared_length`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from tests.loopback import LoopbackServer, QuietHandler, serve, shut


@dataclass
class Answer:
    """One HTTP answer."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json; charset=utf-8"
    delay: float = 0.0
    chunked: bool = False
    declared_length: int | None = None


@dataclass(frozen=True)
class Request:
    """One POST the fake received."""

    path: str
    body: Any
    headers: dict[str, str]


def json_answer(data: Any, status: int = 200, *, delay: float = 0.0) -> Answer:
    """`data` as a JSON body."""
    return Answer(status, json.dumps(data, ensure_ascii=False).encode(), delay=delay)


def markdown(text: str, desc: str = "a markdown answer") -> Answer:
    """A seed-004 markdown answer."""
    return json_answer({"type": "markdown", "data": text, "desc": desc})


def chart(chart_type: str, data: Any, headers: list[str] | None = None,
          dimension: str | None = None, desc: str = "a chart") -> Answer:
    """A seed-004 chart answer."""
    body: dict[str, Any] = {"type": "chart", "chart_type": chart_type, "data": data, "desc": desc}
    if headers is not None:
        body["field_headers"] = headers
    if dimension is not None:
        body["dimension"] = dimension
    return json_answer(body)


def raw(body: bytes | str, *, status: int = 200, content_type: str = "text/html",
        delay: float = 0.0, chunked: bool = False) -> Answer:
    """Any body at all."""
    data = body.encode() if isinstance(body, str) else body
    return Answer(status, data, content_type, delay, chunked)


@dataclass
class FakeWebService:
    """The server; use as a context manager or start()/stop()."""

    requests: list[Request] = field(default_factory=list)
    responder: Callable[[Request], Answer] | None = None

    def __post_init__(self) -> None:
        self._queue: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def url(self, path: str = "/") -> str:
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def push(self, *answers: Answer) -> None:
        with self._lock:
            self._queue.extend(answers)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
        self.responder = None

    def _answer(self, request: Request) -> Answer:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            return self.responder(request)
        return markdown(f"echo: {json.dumps(request.body, ensure_ascii=False)}")

    def start(self) -> FakeWebService:
        fake = self

        class Handler(QuietHandler):

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                try:
                    body: Any = json.loads(data)
                except ValueError:
                    body = data
                request = Request(self.path, body, {k.lower(): v for k, v in self.headers.items()})
                answer = fake._answer(request)
                if answer.delay:
                    time.sleep(answer.delay)
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    if answer.chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for start in range(0, len(answer.body), 65536):
                            piece = answer.body[start:start + 65536]
                            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        length = answer.declared_length
                        self.send_header("Content-Length", str(len(answer.body) if length is None
                                                               else length))
                        self.end_headers()
                        self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout and oversize tests)
                if answer.declared_length is not None:
                    self.close_connection = True

        class Server(LoopbackServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up mid-answer (timeout and oversize tests)

        self._server = serve(Handler, server_class=Server)
        return self

    def stop(self) -> None:
        shut(self._server)
        self._server = None

    def __enter__(self) -> FakeWebService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
