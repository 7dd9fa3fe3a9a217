"""The HTTP scaffolding every loopback fake in tests/ shares: a quiet handler and a threaded
server on 127.0.0.1 (a port chosen by the OS), started and stopped in one call each."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """Keep-alive, no access log, and no Nagle: otherwise every answer waits ~40 ms on delayed
    ACKs and benchmarks measure the fake instead of the plugin."""

    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackServer(ThreadingHTTPServer):
    """One thread per connection, none outliving the tests; a backlog for bursts of clients."""

    daemon_threads = True
    request_queue_size = 512


def serve(
    handler: type[BaseHTTPRequestHandler],
    host: str = "127.0.0.1",
    server_class: type[LoopbackServer] = LoopbackServer,
) -> LoopbackServer:
    """A server on a free port of `host`, already serving in a background thread."""
    server = server_class((host, 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def shut(server: ThreadingHTTPServer | None) -> None:
    """Stop serving and close the socket (nothing to do for None)."""
    if server is not None:
        server.shutdown()
        server.server_close()
