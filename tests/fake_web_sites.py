"""Fake web sites on loopback: a real HTTP server answering from a table of routes.

Used by the tests of the `web` and `arxiv` toolkits: pages to fetch, redirects, binaries, endless
bodies, slow answers, and fakes of DuckDuckGo's HTML page, a SearXNG instance, the Brave Search
API and arXiv's Atom API. Every request is recorded (method, path, query, headers).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.loopback import QuietHandler, serve, shut


@dataclass
class Reply:
    """One scripted answer. `endless` streams `body` again and again until the client hangs up
    (bounded at 64 MiB), with no Content-Length."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    endless: bool = False


@dataclass(frozen=True)
class Seen:
    """A request the fake received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


Route = Reply | Callable[[Seen], Reply]


def html(body: str, *, status: int = 200, charset: str = "utf-8") -> Reply:
    return Reply(status, body.encode(charset), f"text/html; charset={charset}")


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status, b"", "text/plain", {"Location": location})


class FakeWebSites:
    """The server; a context manager. `host` may be any loopback address (127.0.0.2...)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.routes: dict[str, Route] = {}
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the fake first"
        return self._server.server_address[1]

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.origin + path

    def route(self, path: str, reply: Route) -> None:
        self.routes[path] = reply

    def paths(self) -> list[str]:
        with self._lock:
            return [seen.path for seen in self.requests]

    def start(self) -> FakeWebSites:
        fake = self

        class Handler(QuietHandler):

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                seen = Seen("GET", parts.path, parse_qs(parts.query),
                            {k.lower(): v for k, v in self.headers.items()})
                with fake._lock:
                    fake.requests.append(seen)
                route = fake.routes.get(parts.path)
                if route is None:
                    reply = Reply(404, b"<h1>Not Found</h1>")
                else:
                    reply = route(seen) if callable(route) else route
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self._send(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout or size-cap test)

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                if reply.content_type is not None:
                    self.send_header("Content-Type", reply.content_type)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.endless:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                    self.end_headers()
                    sent = 0
                    while sent < 64 * 1024 * 1024:
                        self.wfile.write(reply.body)
                        sent += len(reply.body)
                    return
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

        self._server = serve(Handler, self.host)
        return self

    def stop(self) -> None:
        shut(self._server)
        self._server = None

    def __enter__(self) -> FakeWebSites:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- fake answers of the search providers and arXiv ---------------------------------------------


def duckduckgo_page(results: list[tuple[str, str, str]], *, ad: bool = True) -> str:
    """DuckDuckGo's HTML results page: (title, url, snippet) each, links through /l/?uddg=."""
    from urllib.parse import quote

    blocks = []
    if ad:
        blocks.append(
            '<div class="result results_links results_links_deep result--ad">'
            '<a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=shop.example">'
            "Buy things</a><a class=\"result__snippet\">An advert</a></div>"
        )
    for title, url, snippet in results:
        blocks.append(
            '<div class="result results_links results_links_deep web-result">'
            '<div class="links_main links_deep result__body">'
            f'<h2 class="result__title"><a rel="nofollow" class="result__a" '
            f'href="//duckduckgo.com/l/?uddg={quote(url, safe="")}&amp;rut=abc">{title}</a></h2>'
            f'<a class="result__snippet" href="#">{snippet}</a>'
            "</div></div>"
        )
    return (
        "<!DOCTYPE html><html><head><title>q at DuckDuckGo</title></head><body>"
        '<div id="links" class="results">' + "".join(blocks) + "</div></body></html>"
    )


DUCKDUCKGO_NO_RESULTS = (
    "<html><body><div id=\"links\" class=\"results\">"
    '<div class="no-results">No results.</div></div></body></html>'
)

ATOM_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<feed xmlns="http://www.w3.org/2005/Atom" '
    'xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/" '
    'xmlns:arxiv="http://arxiv.org/schemas/atom">\n'
    '<title type="html">ArXiv Query</title>\n'
)


def arxiv_entry(
    arxiv_id: str, title: str, authors: list[str], summary: str,
    published: str = "2023-01-02T18:00:00Z", updated: str | None = None,
    category: str = "cs.CL",
) -> str:
    names = "".join(f"<author><name>{name}</name></author>" for name in authors)
    return (
        f"<entry><id>http://arxiv.org/abs/{arxiv_id}</id>"
        f"<updated>{updated or published}</updated><published>{published}</published>"
        f"<title>{title}</title><summary>{summary}</summary>{names}"
        f'<link href="http://arxiv.org/abs/{arxiv_id}" rel="alternate" type="text/html"/>'
        f'<link title="pdf" href="http://arxiv.org/pdf/{arxiv_id}" rel="related"/>'
        f'<arxiv:primary_category term="{category}" scheme="http://arxiv.org/schemas/atom"/>'
        f'<category term="{category}" scheme="http://arxiv.org/schemas/atom"/>'
        "</entry>"
    )


def arxiv_feed(entries: list[str], total: int | None = None) -> bytes:
    total = len(entries) if total is None else total
    return (
        ATOM_HEAD
        + f"<opensearch:totalResults>{total}</opensearch:totalResults>"
        + "<opensearch:startIndex>0</opensearch:startIndex>"
        + "".join(entries)
        + "</feed>"
    ).encode()


def arxiv_error_feed(message: str) -> bytes:
    return (
        ATOM_HEAD
        + "<opensearch:totalResults>1</opensearch:totalResults>"
        + "<entry><id>http://arxiv.org/api/errors#incorrect_id_format_for_1234</id>"
        + f"<title>Error</title><summary>{message}</summary>"
        + "<author><name>arXiv api core</name></author></entry></feed>"
    ).encode()
