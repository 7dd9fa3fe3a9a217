"""Image downloads (nonebot_plugin_marsho.chat.media): size and time caps, sniffing, redirects, the SSRF
guard for URLs from a model, and inline base64:// / data: images. A loopback HTTP server plays
every kind of server, good and bad."""

from __future__ import annotations

import base64
import gzip
import io
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nonebot_plugin_marsho.chat.media import MediaError, data_url, download_image, sniff_image
from nonebot_plugin_marsho.net import guard
from tests.loopback import LoopbackServer, QuietHandler, serve, shut

LIMIT = 64 * 1024


def make_png(width: int = 4, height: int = 3) -> bytes:
    """A real, valid RGB PNG, built by hand."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x80\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def make_jpeg() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


PNG = make_png()
JPEG = make_jpeg()
BOMB = gzip.compress(PNG + b"\0" * (20 * 1024 * 1024))  # ~20 KB on the wire, 20 MB unpacked


class ImageServer(LoopbackServer):
    stopping: threading.Event
    requests: list[dict[str, str]]


class Handler(QuietHandler):
    server: ImageServer

    def do_GET(self) -> None:
        self.server.requests.append({k.lower(): v for k, v in self.headers.items()})
        try:
            self.route(self.path)
        except (BrokenPipeError, ConnectionResetError):  # the client hung up, as it should
            self.close_connection = True

    def send(self, status: int, body: bytes = b"", content_type: str = "image/png", **headers: Any) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(headers.pop("length", len(body))))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), str(value))
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def route(self, path: str) -> None:
        port = self.server.server_address[1]
        if path == "/png":
            self.send(200, PNG)
        elif path == "/jpeg-as-octet-stream":
            self.send(200, JPEG, "application/octet-stream")
        elif path == "/text-as-png":
            self.send(200, b"hello, this is not an image at all", "image/png")
        elif path == "/huge":  # chunked, no Content-Length: only streaming can cap it
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            block = PNG + b"\0" * (64 * 1024 - len(PNG))
            for _ in range(320):  # 20 MB
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/close-delimited-huge":  # no length at all: the body ends when the socket does
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for _ in range(320):
                self.wfile.write(PNG + b"\0" * (64 * 1024))
        elif path == "/overstated":  # claims 50 MB, sends a small PNG
            self.close_connection = True
            self.send(200, PNG, length=50_000_000)
        elif path == "/understated":  # claims 100 bytes, then keeps sending
            self.close_connection = True
            self.send(200, PNG + b"\0" * 200, length=100)
            for _ in range(16):
                self.wfile.write(b"\0" * 64 * 1024)
        elif path == "/slow":  # a byte every 0.1 s: each read is quick, the whole never ends
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(PNG[:8])
            self.wfile.flush()
            for _ in range(992):
                if self.server.stopping.wait(0.1):
                    return
                self.wfile.write(b"\0")
                self.wfile.flush()
        elif path.startswith("/r/"):  # /r/N: N redirects in all, the last to the PNG
            left = int(path[3:])
            self.redirect(f"/r/{left - 1}" if left > 1 else "/png")
        elif path == "/to-ftp":
            self.redirect("ftp://example.com/image.png")
        elif path == "/to-loopback":
            self.redirect(f"http://127.0.0.1:{port}/png")
        elif path == "/gzip":
            self.send(200, gzip.compress(PNG), Content_Encoding="gzip")
        elif path == "/gzip-bomb":
            self.send(200, BOMB, Content_Encoding="gzip")
        elif path == "/brotli":
            self.send(200, b"\x1b\x00\x00", Content_Encoding="br")
        elif path == "/500":
            self.send(500, b"oops", "text/plain")
        else:
            self.send(404, b"not found", "text/plain")


@pytest.fixture(scope="module")
def server() -> Iterator[ImageServer]:
    instance = serve(Handler, server_class=ImageServer)
    assert isinstance(instance, ImageServer)
    instance.stopping = threading.Event()
    instance.requests = []
    yield instance
    instance.stopping.set()
    shut(instance)


@pytest.fixture
def base(server: ImageServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


async def fails(url: str, kind: str, **options: Any) -> MediaError:
    options = {"max_bytes": LIMIT, "timeout": 5.0, **options}
    with pytest.raises(MediaError) as caught:
        await download_image(url, **options)
    assert caught.value.kind == kind, caught.value
    return caught.value


# --- sniffing -----------------------------------------------------------------------------------


def test_sniff_image_knows_the_common_formats_by_their_magic_bytes() -> None:
    assert sniff_image(PNG) == "image/png"
    assert sniff_image(JPEG) == "image/jpeg"
    assert sniff_image(b"GIF89a\x01\x00\x01\x00") == "image/gif"
    assert sniff_image(b"GIF87a\x01\x00\x01\x00") == "image/gif"
    assert sniff_image(b"RIFF\x24\x00\x00\x00WEBPVP8 ") == "image/webp"
    bmp = b"BM" + b"\0" * 12 + (40).to_bytes(4, "little") + b"\0" * 20
    assert sniff_image(bmp) == "image/bmp"


def test_sniff_image_says_none_for_text_and_other_files() -> None:
    assert sniff_image(b"") is None
    assert sniff_image(b"BMW is a car brand, and this is plain text") is None
    assert sniff_image(b"RIFF\x24\x00\x00\x00WAVEfmt ") is None  # audio
    assert sniff_image(b"%PDF-1.7") is None
    assert sniff_image(b"<html><body>image</body></html>") is None


def test_data_url_is_a_base64_data_url_of_the_bytes() -> None:
    url = data_url(PNG, "image/png")
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == PNG


def test_media_error_carries_kind_and_detail_and_rejects_unknown_kinds() -> None:
    error = MediaError("http", "HTTP 404")
    assert (error.kind, error.detail) == ("http", "HTTP 404")
    assert "HTTP 404" in str(error)
    assert MediaError("timeout").detail == ""
    with pytest.raises(ValueError):
        MediaError("nonsense")


# --- downloads ----------------------------------------------------------------------------------


async def test_downloads_a_png_with_its_sniffed_type(base: str) -> None:
    data, mime = await download_image(f"{base}/png", max_bytes=LIMIT, timeout=5)
    assert (data, mime) == (PNG, "image/png")


async def test_the_content_type_header_is_not_trusted_either_way(base: str) -> None:
    data, mime = await download_image(f"{base}/jpeg-as-octet-stream", max_bytes=LIMIT, timeout=5)
    assert (data, mime) == (JPEG, "image/jpeg")
    error = await fails(f"{base}/text-as-png", "not_image")
    assert "image/png" in error.detail  # what it claimed to be


async def test_sends_a_user_agent_and_asks_for_an_uncompressed_body(base: str, server: ImageServer) -> None:
    server.requests.clear()
    await download_image(f"{base}/png", max_bytes=LIMIT, timeout=5)
    headers = server.requests[-1]
    assert "marsho" in headers["user-agent"] and headers["user-agent"].startswith("Mozilla/5.0")
    assert headers["accept-encoding"] == "identity"


async def test_a_streamed_body_is_cut_off_as_soon_as_it_passes_the_limit(base: str) -> None:
    started = time.monotonic()
    error = await fails(f"{base}/huge", "too_large")
    assert "64 KB" in error.detail
    await fails(f"{base}/close-delimited-huge", "too_large")
    assert time.monotonic() - started < 4  # 20 MB were not downloaded, twice


async def test_a_content_length_over_the_limit_is_refused_before_reading(base: str) -> None:
    error = await fails(f"{base}/overstated", "too_large")
    assert error.detail == "47.7 MB, the limit is 64 KB"


async def test_a_content_length_under_the_body_reads_only_the_declared_bytes(base: str) -> None:
    data, mime = await download_image(f"{base}/understated", max_bytes=LIMIT, timeout=5)
    assert len(data) == 100 and mime == "image/png"


async def test_a_trickling_server_fails_by_the_overall_timeout(base: str) -> None:
    started = time.monotonic()
    error = await fails(f"{base}/slow", "timeout", timeout=1.0)
    assert time.monotonic() - started < 30  # not the ~100 s the server would take
    assert "1 s" in error.detail


async def test_follows_up_to_five_redirects_and_no_more(base: str) -> None:
    data, _ = await download_image(f"{base}/r/5", max_bytes=LIMIT, timeout=5)
    assert data == PNG
    error = await fails(f"{base}/r/6", "http")
    assert "5 redirects" in error.detail


async def test_a_redirect_away_from_http_is_not_followed(base: str) -> None:
    error = await fails(f"{base}/to-ftp", "http")
    assert "ftp" in error.detail


async def test_error_statuses_are_kind_http(base: str) -> None:
    assert (await fails(f"{base}/missing", "http")).detail == "HTTP 404"
    assert (await fails(f"{base}/500", "http")).detail == "HTTP 500"


async def test_a_gzip_body_is_decoded_but_a_gzip_bomb_is_capped(base: str) -> None:
    data, mime = await download_image(f"{base}/gzip", max_bytes=LIMIT, timeout=5)
    assert (data, mime) == (PNG, "image/png")
    await fails(f"{base}/gzip-bomb", "too_large")


async def test_an_unsupported_body_encoding_is_kind_http(base: str) -> None:
    error = await fails(f"{base}/brotli", "http")
    assert "br" in error.detail


async def test_a_closed_port_is_kind_network() -> None:
    with socket_closed_port() as port:
        await fails(f"http://127.0.0.1:{port}/png", "network")


class socket_closed_port:
    """A loopback port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
        probe.close()
        return port

    def __exit__(self, *exc: object) -> None:
        pass


# --- the SSRF guard -----------------------------------------------------------------------------


async def test_guarded_refuses_loopback_that_unguarded_downloads(base: str) -> None:
    error = await fails(f"{base}/png", "blocked", guarded=True)
    assert "127.0.0.1" in error.detail and "loopback" in error.detail
    data, _ = await download_image(f"{base}/png", max_bytes=LIMIT, timeout=5, guarded=False)
    assert data == PNG


async def test_guarded_refuses_names_that_resolve_to_loopback(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    monkeypatch.setattr(guard, "resolve_host", resolve)
    port = base.rsplit(":", 1)[1]
    error = await fails(f"http://images.example.test:{port}/png", "blocked", guarded=True)
    assert "images.example.test resolves to 127.0.0.1" in error.detail
    await fails(f"http://localhost:{port}/png", "blocked", guarded=True)


async def test_guarded_checks_every_redirect(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    original = guard.checked_addresses

    async def checked(host: str, port: int, *, allow_private: bool = False) -> list[str]:
        if host == "public.example.test":  # let the first hop through, as if it were public
            return ["127.0.0.1"]
        return await original(host, port, allow_private=allow_private)

    monkeypatch.setattr(guard, "checked_addresses", checked)
    port = base.rsplit(":", 1)[1]
    data, _ = await download_image(f"http://public.example.test:{port}/png", max_bytes=LIMIT, timeout=5,
                                   guarded=True)
    assert data == PNG  # the stand-in for a public host works...
    error = await fails(f"http://public.example.test:{port}/to-loopback", "blocked", guarded=True)
    assert "127.0.0.1" in error.detail  # ...but its redirect to loopback is refused


async def test_guarded_unknown_hosts_are_kind_network(monkeypatch: pytest.MonkeyPatch) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        raise guard.HostNotFound(host, "Name or service not known")

    monkeypatch.setattr(guard, "resolve_host", resolve)
    error = await fails("http://no-such-host.example.test/a.png", "network", guarded=True)
    assert "no-such-host.example.test" in error.detail


async def test_a_given_client_is_used_and_left_open() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=PNG, headers={"Content-Type": "image/png"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        data, mime = await download_image("https://cdn.example.test/x.png", max_bytes=LIMIT, timeout=5,
                                          client=client)
        assert (data, mime) == (PNG, "image/png")
        assert seen == ["https://cdn.example.test/x.png"]
        assert not client.is_closed


# --- inline images ------------------------------------------------------------------------------


async def test_base64_urls_are_decoded_locally() -> None:
    encoded = base64.b64encode(PNG).decode()
    assert await download_image(f"base64://{encoded}", max_bytes=LIMIT, timeout=5) == (PNG, "image/png")
    wrapped = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76)).rstrip("=")
    assert await download_image(f"base64://{wrapped}", max_bytes=LIMIT, timeout=5) == (PNG, "image/png")
    urlsafe = base64.urlsafe_b64encode(JPEG).decode()
    assert await download_image(f"base64://{urlsafe}", max_bytes=LIMIT, timeout=5) == (JPEG, "image/jpeg")


async def test_data_urls_are_decoded_locally_and_still_sniffed() -> None:
    assert await download_image(data_url(JPEG, "image/jpeg"), max_bytes=LIMIT, timeout=5) == (
        JPEG, "image/jpeg",
    )
    lying = data_url(PNG, "image/gif")
    assert await download_image(lying, max_bytes=LIMIT, timeout=5) == (PNG, "image/png")
    await fails(data_url(b"just some text", "image/png"), "not_image")
    await fails("data:image/svg+xml,<svg xmlns='http://www.w3.org/2000/svg'/>", "bad_url")


async def test_inline_images_over_the_limit_are_refused_before_decoding() -> None:
    big = base64.b64encode(PNG + b"\0" * LIMIT).decode()
    error = await fails(f"base64://{big}", "too_large")
    assert "the limit is 64 KB" in error.detail
    await fails(f"data:image/png;base64,{big}", "too_large")


async def test_invalid_base64_is_kind_bad_url() -> None:
    await fails("base64://not*valid*base64!", "bad_url")
    await fails("base64://abcde", "bad_url")


@pytest.mark.parametrize(
    "url",
    ["", "   ", "ftp://example.com/a.png", "file:///etc/passwd", "javascript:alert(1)", "/relative.png",
     "http:///no-host.png", "example.com/a.png"],
)
async def test_other_urls_are_kind_bad_url(url: str) -> None:
    await fails(url, "bad_url")
