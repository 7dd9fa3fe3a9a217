"""Image downloads, capped in size and time.

`download_image` fetches an image the bot was sent (a URL from its OneBot implementation, often on
127.0.0.1, or inline base64) or one a model linked in its answer (`guarded=True`: then only public
internet addresses are reached, through the address guard of net/). The body is streamed
and dropped the moment it passes the size cap, the whole download is bounded by one deadline, and
the bytes must really be an image: the Content-Type header is not trusted.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Iterator
from urllib.parse import unquote

import anyio
import httpx

# net.guard (and httpcore with it, ~25 ms) is imported by the functions that download: the bot
# starts without it, the first picture loads it
from ..net.http import (
    MAX_REDIRECTS,
    RedirectRefused,
    TooLarge,
    Trail,
    UnsupportedEncoding,
    follow,
    read_capped,
)

__all__ = ["KINDS", "MAX_REDIRECTS", "MediaError", "data_url", "download_image", "sniff_image"]

KINDS = frozenset({"too_large", "timeout", "not_image", "http", "blocked", "network", "bad_url"})

_ACCEPT = {
    "Accept": "image/webp,image/png,image/jpeg,image/gif,image/*;q=0.8,*/*;q=0.5",
    "Accept-Encoding": "identity",  # the size cap then counts what crosses the wire
}


class MediaError(Exception):
    """An image could not be had. `kind` is one of KINDS, `detail` a short English explanation."""

    def __init__(self, kind: str, detail: str = "") -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown MediaError kind {kind!r}")
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}" if detail else kind)


# --- bytes --------------------------------------------------------------------------------------

_BMP_HEADER_SIZES = frozenset({12, 16, 40, 52, 56, 64, 108, 124})


def sniff_image(data: bytes) -> str | None:
    """MIME type from magic bytes: image/png, image/jpeg, image/gif, image/webp, image/bmp; else None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    # "BM" alone is too weak (text can start with it): the DIB header size must be a real one
    if data.startswith(b"BM") and len(data) >= 18:
        if int.from_bytes(data[14:18], "little") in _BMP_HEADER_SIZES:
            return "image/bmp"
    return None


def data_url(data: bytes, mime: str) -> str:
    """The bytes as a data: URL, e.g. "data:image/png;base64,iVBOR..."."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _size(count: int) -> str:
    """12.3 MB, 512 KB, 800 bytes (binary multiples, as most people read sizes)."""
    for unit, factor in (("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= factor:
            return f"{count / factor:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} bytes"


def _too_large(max_bytes: int, count: int | None = None) -> MediaError:
    if count is None:
        return MediaError("too_large", f"more than {_size(max_bytes)}, the limit")
    return MediaError("too_large", f"{_size(count)}, the limit is {_size(max_bytes)}")


def _image(data: bytes, said: str = "") -> tuple[bytes, str]:
    """(data, its sniffed type), or not_image; `said` is the type it claimed to be."""
    if not data:
        raise MediaError("not_image", "the body is empty")
    mime = sniff_image(data)
    if mime is None:
        hint = f" (though it says {said})" if said else ""
        raise MediaError("not_image", f"not a PNG, JPEG, GIF, WebP or BMP image{hint}")
    return data, mime


# --- inline images ------------------------------------------------------------------------------

_BASE64_JUNK = re.compile(r"\s+")


def _decode_base64(payload: str, max_bytes: int) -> bytes:
    """Decode (standard or URL-safe alphabet, padding optional), refusing too much before decoding."""
    clean = _BASE64_JUNK.sub("", payload).rstrip("=")
    estimated = len(clean) * 3 // 4
    if estimated > max_bytes:
        raise _too_large(max_bytes, estimated)
    if len(clean) % 4 == 1:
        raise MediaError("bad_url", "invalid base64 (wrong length)")
    clean = clean.replace("-", "+").replace("_", "/") + "=" * (-len(clean) % 4)
    try:
        return base64.b64decode(clean, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("bad_url", "invalid base64") from None


def _inline(url: str, max_bytes: int) -> tuple[bytes, str] | None:
    """A base64:// or data: URL decoded, or None for any other URL."""
    head = url[:9].lower()
    if head.startswith("base64://"):
        return _image(_decode_base64(url[9:], max_bytes))
    if head.startswith("data:"):
        header, comma, payload = url[5:].partition(",")
        params = [p.strip().lower() for p in header.split(";")]
        if not comma or "base64" not in params[1:]:
            raise MediaError("bad_url", "only base64 data: URLs are read")
        if "%" in payload:
            payload = unquote(payload)
        return _image(_decode_base64(payload, max_bytes), params[0])
    return None


# --- http(s) ------------------------------------------------------------------------------------


def _http_url(url: str) -> httpx.URL:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as error:
        raise MediaError("bad_url", f"not a valid URL ({error})") from None
    if parsed.scheme not in ("http", "https"):
        raise MediaError("bad_url", "only http(s), base64:// and data: URLs are read")
    if not parsed.host:
        raise MediaError("bad_url", "the URL has no host")
    return parsed


@contextlib.contextmanager
def _errors(trail: Trail) -> Iterator[None]:
    """httpx's, the guard's and the capped reader's exceptions as MediaError."""
    from ..net.guard import BlockedAddress, HostNotFound, tls_problem

    try:
        yield
    except TooLarge as error:
        raise _too_large(error.limit, error.size) from None
    except UnsupportedEncoding as error:
        raise MediaError("http", str(error)) from None
    except RedirectRefused as error:
        raise MediaError("http", str(error)) from None
    except BlockedAddress as error:
        raise MediaError("blocked", str(error)) from None
    except HostNotFound as error:
        raise MediaError("network", str(error)) from None
    except httpx.TimeoutException:
        raise MediaError("timeout", f"{trail.current.host} did not answer in time") from None
    except httpx.ConnectError as error:
        if tls_problem(error):
            raise MediaError("network", f"a secure (TLS) connection to {trail.current.host} failed") from None
        raise MediaError("network", f"could not connect to {trail.current.host}") from None
    except httpx.UnsupportedProtocol as error:
        raise MediaError("bad_url", str(error)) from None
    except httpx.InvalidURL as error:
        raise MediaError("bad_url", str(error)) from None
    except httpx.HTTPError as error:
        raise MediaError("network", f"{type(error).__name__} from {trail.current.host}") from None


async def _get(client: httpx.AsyncClient, url: httpx.URL, max_bytes: int) -> tuple[bytes, str]:
    trail = Trail(url)
    with _errors(trail):
        async with follow(client, trail, headers=_ACCEPT, max_redirects=MAX_REDIRECTS) as response:
            if not 200 <= response.status_code < 300:
                raise MediaError("http", f"HTTP {response.status_code}")
            body, _ = await read_capped(response, max_bytes)
            said = response.headers.get("content-type", "").split(";", 1)[0].strip()
    return _image(body, said)


def _client(guarded: bool, timeout: float) -> httpx.AsyncClient:
    from ..net.guard import GuardedTransport, ssl_context

    if guarded:
        return httpx.AsyncClient(
            transport=GuardedTransport(), timeout=httpx.Timeout(timeout), follow_redirects=False,
            trust_env=False,
        )
    # no proxies from the environment: these URLs are the OneBot implementation's own (often on
    # 127.0.0.1) or its chat service's CDN, reached directly
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout), follow_redirects=False, trust_env=False, verify=ssl_context()
    )


async def download_image(
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    guarded: bool = False,
    client: httpx.AsyncClient | None = None,
) -> tuple[bytes, str]:
    """Download an image: (bytes, mime). Raises MediaError.

    http(s) URLs: the body is streamed and dropped as soon as it passes `max_bytes` (a
    Content-Length above it is refused before reading; gzip/deflate bodies count decoded); at most
    MAX_REDIRECTS redirects are followed (to http(s) only); everything - connecting, redirects and
    every read - must finish within `timeout` seconds in all, so a server trickling a byte a second
    cannot keep it going. `base64://...` (as OneBot implementations send images) and
    `data:...;base64,...` URLs are decoded locally, size-capped too. Either way the bytes must be a
    PNG, JPEG, GIF, WebP or BMP image (sniff_image; declared types are not trusted).

    guarded=True: the URL comes from a model's answer, so every connection (redirects included)
    goes through net/'s address guard: loopback, private and other non-public addresses are
    refused (kind "blocked"), unknown hosts are kind "network". guarded=False: a plain client, for
    URLs from the bot's own OneBot implementation, which may serve files on 127.0.0.1.

    `client`: used instead of a new client, as it is (its transport decides what is reachable, so
    `guarded` does not apply to it: pass one built on GuardedTransport for untrusted URLs), and not
    closed. Otherwise a new client is made for the call and closed after it.

    Kinds: too_large, timeout, not_image, http (an error status, too many or bad redirects, an
    unsupported body encoding), blocked, network, bad_url (not http(s)/base64/data, or bad base64).
    """
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    if not timeout > 0:
        raise ValueError("timeout must be positive")
    text = url.strip() if isinstance(url, str) else ""
    if not text:
        raise MediaError("bad_url", "the URL is empty")
    inline = _inline(text, max_bytes)
    if inline is not None:
        return inline
    parsed = _http_url(text)
    try:
        with anyio.fail_after(timeout):
            if client is not None:
                return await _get(client, parsed, max_bytes)
            async with _client(guarded, timeout) as own:
                return await _get(own, parsed, max_bytes)
    except TimeoutError:
        raise MediaError("timeout", f"the image did not arrive within {timeout:g} s") from None
