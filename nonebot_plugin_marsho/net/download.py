"""Files people share, downloaded (issue 29): one capped GET with one deadline, under the same
address rules as pictures (chat/media.py): `guarded` (MARSHO_IMAGE_ALLOW_PRIVATE off) reaches
only public addresses, every redirect re-checked by the address guard; `base64://` and `data:`
addresses (as OneBot implementations may give a file) are decoded here, capped too. At most
DOWNLOADS_AT_ONCE downloads run at once across the bot; the others wait their turn within their
own deadline."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import weakref
from collections.abc import Iterator
from urllib.parse import unquote

import anyio
import httpx

from .http import MAX_REDIRECTS, RedirectRefused, TooLarge, Trail, UnsupportedEncoding, follow, read_capped

KINDS = frozenset({"too_large", "timeout", "http", "blocked", "network", "bad_url"})
DOWNLOADS_AT_ONCE = 4
"""Files downloaded at once across the bot (each holds up to its max_bytes in memory)."""
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _slot() -> asyncio.Semaphore:
    """The bot's download slots (one semaphore per event loop: tests run several loops)."""
    loop = asyncio.get_running_loop()
    slot = _slots.get(loop)
    if slot is None:
        slot = _slots[loop] = asyncio.Semaphore(DOWNLOADS_AT_ONCE)
    return slot


class DownloadError(Exception):
    """A file could not be had: `kind` (KINDS) and a short English `detail`."""

    def __init__(self, kind: str, detail: str = "", *, limit: int = 0) -> None:
        self.kind, self.detail, self.limit = kind, detail, limit
        super().__init__(f"{kind}: {detail}" if detail else kind)


def _inline(url: str, max_bytes: int) -> bytes | None:
    """The bytes of a `base64://` or `data:` address; None for any other."""
    if url.startswith("base64://"):
        payload = url[len("base64://"):]
    elif url.startswith("data:") and "," in url:
        header, payload = url[5:].split(",", 1)
        if not header.endswith(";base64"):
            data = unquote(payload).encode("utf-8", "surrogateescape")
            if len(data) > max_bytes:
                raise DownloadError("too_large", f"more than {max_bytes} bytes", limit=max_bytes)
            return data
    else:
        return None
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise DownloadError("too_large", f"more than {max_bytes} bytes", limit=max_bytes)
    try:
        return base64.b64decode(payload.strip(), validate=False)
    except (binascii.Error, ValueError):
        raise DownloadError("bad_url", "the inline file is not valid base64") from None


@contextlib.contextmanager
def _errors(trail: Trail) -> Iterator[None]:
    from .guard import BlockedAddress, HostNotFound

    try:
        yield
    except TooLarge as error:
        raise DownloadError("too_large", str(error), limit=error.limit) from None
    except (UnsupportedEncoding, RedirectRefused) as error:
        raise DownloadError("http", str(error)) from None
    except BlockedAddress as error:
        raise DownloadError("blocked", str(error)) from None
    except HostNotFound as error:
        raise DownloadError("network", str(error)) from None
    except httpx.TimeoutException:
        raise DownloadError("timeout", f"{trail.current.host} did not answer in time") from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
        raise DownloadError("bad_url", str(error)) from None
    except httpx.HTTPError as error:
        raise DownloadError("network", f"{type(error).__name__} from {trail.current.host}") from None


async def download_file(url: str, *, max_bytes: int, timeout: float, guarded: bool = True) -> bytes:
    """The file at `url` (http(s), `base64://`, `data:`), at most `max_bytes` (a larger one is
    dropped the moment it passes, kind too_large with `limit`), all within `timeout` seconds,
    the wait for a turn (DOWNLOADS_AT_ONCE) included. Raises DownloadError."""
    text = url.strip() if isinstance(url, str) else ""
    if not text:
        raise DownloadError("bad_url", "the address is empty")
    inline = _inline(text, max_bytes)
    if inline is not None:
        if len(inline) > max_bytes:
            raise DownloadError("too_large", f"{len(inline)} bytes, over {max_bytes}", limit=max_bytes)
        return inline
    try:
        parsed = httpx.URL(text)
    except (httpx.InvalidURL, TypeError) as error:
        raise DownloadError("bad_url", f"not a valid address ({error})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise DownloadError("bad_url", "only http(s), base64:// and data: addresses are read")
    from .guard import GuardedTransport, ssl_context

    transport = GuardedTransport() if guarded else None
    trail = Trail(parsed)
    started = False
    try:
        with anyio.fail_after(timeout), _errors(trail):
            await _slot().acquire()
            started = True
            async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeout), trust_env=False,
                                         follow_redirects=False, verify=ssl_context()) as client:
                async with follow(client, trail, headers={"Accept-Encoding": "identity"},
                                  max_redirects=MAX_REDIRECTS) as response:
                    if not 200 <= response.status_code < 300:
                        raise DownloadError("http", f"HTTP {response.status_code}")
                    body, _ = await read_capped(response, max_bytes)
                    return body
    except TimeoutError:
        if not started:
            raise DownloadError("timeout", f"busy downloading other files, its turn did not come within "
                                f"{timeout:g} s") from None
        raise DownloadError("timeout", f"the file did not arrive within {timeout:g} s") from None
    finally:
        if started:
            _slot().release()
