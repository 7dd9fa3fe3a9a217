"""One way to GET from the web, for chat/media and the built-in toolkits alike: one user agent,
redirects followed one hop at a time (so a guarded client's transport checks every hop's address
when it connects, and only http(s) targets are followed), and a body read under a byte cap
(gzip and deflate decoded within the cap, so a small compressed body cannot inflate past it)."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

USER_AGENT = (
    "Mozilla/5.0 (compatible; nonebot-plugin-marsho; "
    "+https://github.com/marsho-dev/nonebot-plugin-marsho)"
)
"""Sent with every request the plugin makes to the web."""

MAX_REDIRECTS = 5
"""Redirects one GET follows unless told otherwise."""


class RedirectRefused(Exception):
    """A redirect that is not followed: to an invalid or non-http(s) address, or one too many."""


class TooLarge(Exception):
    """The body passed the cap; `size` is what the server declared, when it did."""

    def __init__(self, limit: int, size: int | None = None) -> None:
        self.limit = limit
        self.size = size
        super().__init__(f"more than {limit} bytes" if size is None else f"{size} bytes, over {limit}")


class UnsupportedEncoding(Exception):
    """The body came in a Content-Encoding this reader does not decode (or corrupt)."""


class Trail:
    """Where a GET has been: the address it is at now and the ones it was redirected from."""

    def __init__(self, url: httpx.URL) -> None:
        self.current = url
        self.hops: list[str] = []


@asynccontextmanager
async def follow(
    client: httpx.AsyncClient,
    trail: Trail,
    *,
    headers: dict[str, str] | None = None,
    max_redirects: int = MAX_REDIRECTS,
) -> AsyncIterator[httpx.Response]:
    """GET `trail.current`, following redirects by hand; yields the final response, streamed
    (read it with `read_capped`) and closed after the block. `trail` tells where it got to, also
    when the client raises (a refused address, a timeout). Raises RedirectRefused."""
    for _ in range(max_redirects + 1):
        response = await client.send(
            client.build_request("GET", trail.current, headers={"User-Agent": USER_AGENT, **(headers or {})}),
            stream=True, follow_redirects=False,
        )
        try:
            if not response.is_redirect:
                yield response
                return
            location = response.headers["location"]
        finally:
            await response.aclose()
        try:
            target = trail.current.join(location)
        except httpx.InvalidURL:
            raise RedirectRefused(f"{trail.current} redirected to an invalid address: {location!r}") from None
        if target.scheme not in ("http", "https"):
            raise RedirectRefused(f"{trail.current} redirected to {target}, which is not an http(s) address")
        trail.hops.append(str(trail.current))
        trail.current = target  # a guarded client checks it when the next request connects
    raise RedirectRefused(f"{trail.hops[0] if trail.hops else trail.current} redirected more than "
                          f"{max_redirects} times ({max_redirects} redirects followed, the last to "
                          f"{trail.current}); gave up")


class _Inflate:
    """gzip/deflate decoding that never produces more than the cap (no decompression bombs)."""

    def __init__(self) -> None:
        self._inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header

    def feed(self, chunk: bytes, room: int) -> bytes:
        try:
            return self._inflater.decompress(chunk, room + 1)  # +1: going over is detected
        except zlib.error:
            raise UnsupportedEncoding("the compressed body is corrupt") from None

    def finish(self) -> bytes:
        # feed() stopped short of its limit every time (else the body was refused), so all the
        # input was consumed and only zlib's last few buffered bytes are left
        try:
            return self._inflater.flush()
        except zlib.error:
            raise UnsupportedEncoding("the compressed body is corrupt") from None


async def read_capped(
    response: httpx.Response, max_bytes: int, *, truncate: bool = False
) -> tuple[bytes, bool]:
    """The body and whether it was cut. Past `max_bytes` (decoded, and on the wire) reading stops:
    `truncate` keeps the first `max_bytes`, otherwise TooLarge is raised. A declared
    Content-Length over the cap is refused (or cut) before anything is read."""
    try:  # a transport that answers with the body already in memory (httpx.MockTransport...)
        preloaded = response.content
    except httpx.ResponseNotRead:
        pass
    else:
        if len(preloaded) > max_bytes:
            if not truncate:
                raise TooLarge(max_bytes, len(preloaded))
            return preloaded[:max_bytes], True
        return preloaded, False
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > max_bytes and not truncate:
        raise TooLarge(max_bytes, int(declared))
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        inflate = None
    elif encoding in ("gzip", "x-gzip", "deflate"):
        inflate = _Inflate()
    else:
        raise UnsupportedEncoding(f"the body is sent with an unsupported encoding ({encoding})")
    body = bytearray()
    wire = 0
    async for chunk in response.aiter_raw():
        wire += len(chunk)
        body += inflate.feed(chunk, max_bytes - len(body)) if inflate else chunk
        if len(body) > max_bytes or wire > max_bytes:
            if not truncate:
                raise TooLarge(max_bytes)
            return bytes(body[:max_bytes]), True
    if inflate is not None:
        body += inflate.finish()
        if len(body) > max_bytes:
            if not truncate:
                raise TooLarge(max_bytes)
            return bytes(body[:max_bytes]), True
    return bytes(body), False
