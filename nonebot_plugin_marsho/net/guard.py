"""The SSRF guard of `fetch_page`: only public internet addresses may be reached.

The model chooses the URL, and a URL can point anywhere the bot can reach: its own admin ports on
127.0.0.1, the home router, a database on 10.x, or the cloud metadata service on 169.254.169.254
that hands out credentials. So before connecting, the host is resolved, *every* address it
resolves to is checked, and the connection is then made to one of those checked addresses (the
connection is pinned: no second DNS lookup can swap in another address between the check and the
connect, which is the DNS-rebinding trick). TLS still verifies the certificate against the host
name. The check runs in the HTTP client's network layer, so it runs for every connection:
the first request and every redirect alike.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import anyio
import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
"""Well-known NAT64 prefix: the last 32 bits are an IPv4 address."""

_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
"""Deprecated IPv4-compatible IPv6 addresses (::a.b.c.d)."""

_METADATA = ipaddress.ip_address("169.254.169.254")


class BlockedAddress(Exception):
    """The host is, or resolves to, an address that is not on the public internet."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        self.host = host
        self.address = address
        self.reason = reason
        if host.strip("[]").lower() == address.lower():
            text = f"{address} is {reason}"
        else:
            text = f"{host} resolves to {address}, which is {reason}"
        super().__init__(text)


class HostNotFound(Exception):
    """The host name could not be resolved."""

    def __init__(self, host: str, detail: str = "") -> None:
        self.host = host
        super().__init__(f"the host name {host} could not be resolved" + (f" ({detail})" if detail else ""))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, if it carries one (mapped, 6to4, NAT64...)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def blocked_reason(address: str | IPAddress) -> str | None:
    """Why the address may not be fetched ("a loopback address"...), or None if it is public."""
    if isinstance(address, str):
        try:
            ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone
        except ValueError:
            return "not an IP address"
    else:
        ip = address
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            reason = blocked_reason(embedded)
            if reason is not None:
                return f"{embedded} written as IPv6, {reason}"
            if ip.sixtofour is None and ip.teredo is None:
                return None  # mapped, compatible or NAT64: it *is* that public IPv4 address
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address (this machine itself)"
    if ip == _METADATA:
        return "a link-local address (the cloud metadata service)"
    if ip.is_link_local:
        return "a link-local address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "a site-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip in ipaddress.ip_network("fc00::/7"):
        return "a private address (IPv6 unique local)"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "not a public internet address"
    return None


def _is_localhost_name(host: str) -> bool:
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address (A and AAAA) the host resolves to, in the resolver's order.

    Tests replace this function to make names resolve where they want.
    """
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise HostNotFound(host, error.strerror or "") from None
    except UnicodeError:
        raise HostNotFound(host, "not a valid host name") from None
    addresses: list[str] = []
    for *_, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


async def checked_addresses(host: str, port: int, *, allow_private: bool = False) -> list[str]:
    """Resolve `host` and return its addresses; raise BlockedAddress if any one is not public.

    All of them are checked, not only the first: a name resolving to one public and one private
    address could otherwise be steered to the private one.
    """
    if not allow_private and _is_localhost_name(host):
        raise BlockedAddress(host, "localhost", "a loopback address (this machine itself)")
    addresses = await resolve_host(host, port)
    if not addresses:
        raise HostNotFound(host, "no addresses")
    if not allow_private:
        for address in addresses:
            reason = blocked_reason(address)
            if reason is not None:
                raise BlockedAddress(host, address, reason)
    return addresses


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer with the guard in front: resolve, check, connect to the checked
    address. Every connection the client opens (redirects included) passes through here."""

    def __init__(self, *, allow_private: bool = False) -> None:
        self.allow_private = allow_private
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await checked_addresses(host, port, allow_private=self.allow_private)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} took too long") from None
        last_error: Exception | None = None
        for address in addresses:  # pinned: only the addresses just checked
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last_error = error
        assert last_error is not None
        raise last_error

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_EXCEPTIONS: list[tuple[type[Exception], type[httpx.TransportError]]] = [
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.ProtocolError, httpx.ProtocolError),
]


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore's exceptions as the httpx ones callers of an httpx client expect."""
    try:
        yield
    except httpcore.TimeoutException as error:
        raise _mapped(error) from error
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as error:
        raise _mapped(error) from error


def _mapped(error: Exception) -> httpx.TransportError:
    for source, target in _EXCEPTIONS:
        if isinstance(error, source):
            return target(str(error))
    return httpx.TransportError(str(error))


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        with _httpx_errors():
            await self._stream.aclose()


@functools.lru_cache(maxsize=1)
def ssl_context() -> ssl.SSLContext:
    """The certificate store, loaded once (loading it takes tens of milliseconds)."""
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose every connection goes through GuardedBackend (no proxies)."""

    def __init__(self, *, allow_private: bool = False, max_connections: int = 4) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context(),
            max_connections=max_connections,
            http1=True,
            http2=False,
            network_backend=GuardedBackend(allow_private=allow_private),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def tls_problem(error: BaseException) -> bool:
    """True when a connection failed on TLS (a bad or expired certificate...)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError) or "CERTIFICATE" in str(current).upper():
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False
