"""Built-in toolkit `web`: read a web page, search the web. Off until the owner enables it.

- `fetch_page` sends a GET request for the URL the model chose to that URL's server, and follows
  its redirects. It reaches only public internet addresses: the host is resolved, every address
  is checked (no loopback, private, link-local, multicast, reserved or unspecified addresses,
  IPv4 ones written as IPv6 included) and the connection goes to the address that was checked,
  on the first request and on every redirect.
- `search` sends the search words to the configured provider: DuckDuckGo (default, no key),
  a SearXNG instance (no key, usually your own) or the Brave Search API (a key).

Settings (MARSHO_TOOLKIT_SETTINGS, under "web"; the model never sees them):

    {"web": {"provider": "brave", "api_key": "BSA..."}}
    {"web": {"provider": "searxng", "searx_url": "http://127.0.0.1:8888"}}
"""

from __future__ import annotations

import json
import re

import anyio
import httpx

from nonebot_plugin_marsho.net.guard import (
    BlockedAddress,
    GuardedTransport,
    HostNotFound,
    ssl_context,
    tls_problem,
)
from nonebot_plugin_marsho.net.http import (
    USER_AGENT,
    RedirectRefused,
    Trail,
    UnsupportedEncoding,
    follow,
    read_capped,
)
from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

from .extract import html_to_text
from .providers import Result, SearchError, brave, duckduckgo, searxng

tools = Toolbox()

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?")
"""What a host looks like once httpx has IDNA-encoded it: a name, an IPv4 or an IPv6 address."""

JSON_TYPES = frozenset({"application/json", "text/json", "application/ld+json"})

_BINARY_NAMES = {
    "application/pdf": "a PDF document",
    "application/zip": "a zip archive",
    "application/octet-stream": "a binary file",
    "application/msword": "a Word document",
    "application/vnd.ms-excel": "an Excel file",
    "application/x-tar": "a tar archive",
    "application/gzip": "a gzip archive",
    "application/wasm": "a WebAssembly module",
}
_MAGIC = [
    (b"%PDF", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (or an Office document)"),
    (b"\x89PNG", "a PNG image"),
    (b"GIF8", "a GIF image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"RIFF", "a media file"),
    (b"\x7fELF", "a program"),
]


def _error(message: str) -> ToolResponse:
    return ToolResponse.error(message)


def _kind(mime: str) -> str | None:
    """'html', 'json', 'text', '' (no type given: look at the bytes) or None (not text)."""
    if not mime:
        return ""
    if mime in HTML_TYPES:
        return "html"
    if mime in JSON_TYPES or mime.endswith("+json"):
        return "json"
    if mime.startswith("text/") or mime.endswith("+xml") or mime in (
        "application/xml", "application/javascript", "application/x-javascript",
        "application/ecmascript",
    ):
        return "text"
    return None


def _binary_name(mime: str) -> str:
    if mime in _BINARY_NAMES:
        return _BINARY_NAMES[mime]
    major = mime.split("/", 1)[0]
    return {
        "image": "an image", "audio": "an audio file", "video": "a video",
        "font": "a font", "model": "a 3D model",
    }.get(major, "not a web page")


def _sniff(body: bytes) -> str | None:
    """What binary thing the bytes are, or None when they look like text."""
    head = body[:1024]
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if b"\x00" in head:
        return "a binary file"
    return None


def _looks_like_html(body: bytes) -> bool:
    head = body[:2048].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head or b"<head" in head


def _decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            pass
    for encoding in ("utf-8", "gb18030"):
        try:
            return body.decode(encoding)
        except UnicodeDecodeError:
            continue
    return body.decode("utf-8", errors="replace")


def _positive(value: object, default: float) -> float:
    """A numeric preset from the owner's settings, or the default when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return default
    return float(value)


def _slice(text: str, start: int, max_chars: int) -> tuple[str, int]:
    """At most `max_chars` characters from `start`, ending at a line break when one is near."""
    end = start + max_chars
    if end >= len(text):
        return text[start:], len(text)
    cut = text.rfind("\n", start + max_chars * 3 // 4, end)
    if cut != -1:
        end = cut + 1
    return text[start:end], end


def _links_in(part: str, links: list[str]) -> list[str]:
    numbers = sorted({int(n) for n in re.findall(r"\[(\d+)\]", part) if 0 < int(n) <= len(links)})
    return [f"[{n}] {links[n - 1]}" for n in numbers]


def _render(
    *, url: str, hops: list[str], title: str, text: str, links: list[str], start: int,
    max_chars: int, note: str,
) -> str | ToolResponse:
    if not text.strip():
        return _error(
            f"{url} has no readable text (the page may build its content with JavaScript, "
            "which fetch_page does not run)"
        )
    if start >= len(text):
        return _error(
            f"the page has only {len(text)} characters of text; start={start} is past its end"
        )
    part, end = _slice(text, start, max_chars)
    lines = []
    if title:
        lines.append(f"Title: {title}")
    lines.append(f"URL: {url}")
    if hops:
        lines.append(f"(redirected from {hops[0]})")
    if note:
        lines.append(note)
    lines.append("")
    lines.append(part.strip("\n"))
    listed = _links_in(part, links)
    if listed:
        lines.append("")
        lines.append("Links:")
        lines.extend(listed)
    if end < len(text):
        lines.append("")
        lines.append(
            f"[Characters {start}-{end} of {len(text)}. Call fetch_page again with start={end} "
            "to read on.]"
        )
    return "\n".join(lines)


async def _answer(
    response: httpx.Response, hops: list[str], start: int, max_bytes: int, max_chars: int
) -> str | ToolResponse:
    url = str(response.url)
    if response.status_code >= 400:
        return _error(
            f"{url} answered HTTP {response.status_code} {response.reason_phrase}".rstrip()
            + (f" (after a redirect from {hops[0]})" if hops else "")
        )
    mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    kind = _kind(mime)
    size = response.headers.get("content-length", "")
    if kind is None:
        said = f", {int(size):,} bytes" if size.isdigit() else ""
        return _error(
            f"{url} is {_binary_name(mime)} ({mime}{said}), not a web page: fetch_page reads "
            "only HTML, plain text and JSON"
        )
    body, truncated = await read_capped(response, max_bytes, truncate=True)
    if not body.strip():
        return _error(f"{url} answered HTTP {response.status_code} with an empty body")
    binary = _sniff(body)
    if binary is not None:
        return _error(
            f"{url} is {binary}" + (f" (though it says {mime})" if mime else "")
            + ", not a web page: fetch_page reads only HTML, plain text and JSON"
        )
    if kind == "":
        kind = "html" if _looks_like_html(body) else "text"
    note = (
        f"(the page is larger than {max_bytes:,} bytes; only its beginning was downloaded)"
        if truncated else ""
    )
    charset = response.charset_encoding
    if kind == "html":
        # parsing is CPU work: done in a worker thread, so the bot's event loop stays free
        page = await anyio.to_thread.run_sync(html_to_text, body, url, charset)
        return _render(url=url, hops=hops, title=page.title, text=page.text, links=page.links,
                       start=start, max_chars=max_chars, note=note)
    text = _decode(body, charset)
    if kind == "json":
        try:
            text = json.dumps(json.loads(text), ensure_ascii=False, indent=1)
        except json.JSONDecodeError as error:
            reason = "cut off at the size limit" if truncated else f"{error.msg} at line {error.lineno}"
            note = (note + "\n" if note else "") + f"(the body is not valid JSON: {reason}; shown as text)"
    return _render(url=url, hops=hops, title="", text=text.replace("\r\n", "\n"), links=[],
                   start=start, max_chars=max_chars, note=note)


def _refusal(error: BlockedAddress, url: str, hops: list[str]) -> ToolResponse:
    where = f"{hops[0]} redirected to {url}, and" if hops else f"cannot fetch {url}:"
    return _error(
        f"{where} {error}. fetch_page only reads pages on the public internet; this address "
        "was refused and nothing was sent to it"
    )


async def _fetch(
    url: httpx.URL, start: int, *, allow_private: bool, max_bytes: int, max_chars: int,
    timeout: float, max_redirects: int,
) -> str | ToolResponse:
    headers = {
        "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5",
        "Accept-Encoding": "identity",  # the size cap then counts what crosses the wire
        "Accept-Language": "zh-CN,zh;q=0.9,en;q=0.8",
    }
    trail = Trail(url)
    async with httpx.AsyncClient(
        transport=GuardedTransport(allow_private=allow_private), timeout=httpx.Timeout(timeout),
        follow_redirects=False, trust_env=False,
    ) as client:
        try:
            async with follow(client, trail, headers=headers, max_redirects=max_redirects) as response:
                return await _answer(response, trail.hops, start, max_bytes, max_chars)
        except RedirectRefused as error:
            return _error(f"{error}; fetch_page does not follow it")
        except UnsupportedEncoding as error:
            return _error(f"{trail.current}: {error}")
        except BlockedAddress as error:
            return _refusal(error, str(trail.current), trail.hops)
        except HostNotFound as error:
            return _error(f"cannot fetch {trail.current}: {error}")
        except httpx.TimeoutException:
            return _error(f"{trail.current.host} did not answer within {timeout:g} s")
        except httpx.ConnectError as error:
            host = trail.current.host
            if tls_problem(error):
                return _error(f"a secure (TLS) connection to {host} failed: {error}")
            return _error(f"could not connect to {host} ({str(error) or 'connection failed'})")
        except httpx.HTTPError as error:
            return _error(f"fetching {trail.current} failed: {type(error).__name__}: {error}")


async def fetch_page(
    url: str,
    start: int = 0,
    *,
    allow_private_networks: bool = False,
    max_bytes: int = 2_000_000,
    max_chars: int = 4000,
    timeout: float = 15.0,
    max_redirects: int = 5,
) -> str | ToolResponse:
    """Fetch a public web page and return it as readable text.

    The text keeps the title, headings, paragraphs and lists; links are numbered [n] and listed
    at the end. Reads HTML, plain text and JSON, not images or other files. Long pages come in
    parts: call again with `start` to read on.

    Args:
        url: The full address, starting with http:// or https://.
        start: Character offset to continue a long page from; 0 for its beginning.
        allow_private_networks: Preset (owner only): also reach loopback and private addresses.
        max_bytes: Preset: bytes downloaded at most.
        max_chars: Preset: characters of text returned per call at most.
        timeout: Preset: seconds for the whole fetch, redirects included.
        max_redirects: Preset: redirects followed at most.
    """
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError) as error:
        return _error(f"{url!r} is not a valid URL ({error})")
    if parsed.scheme not in ("http", "https"):
        scheme = f"{parsed.scheme}:" if parsed.scheme else "an address without a scheme"
        return _error(
            f"fetch_page reads only http:// and https:// addresses, not {scheme} "
            f"(write the full URL, e.g. https://{url.strip() if not parsed.scheme else 'example.com'})"
        )
    if not parsed.host:
        return _error(f"{url!r} has no host name")
    if not _HOST.fullmatch(parsed.raw_host.decode("ascii", "replace")):
        return _error(f"{url!r} is not a valid URL (its host name has characters no host name has)")
    seconds = _positive(timeout, 15.0)
    try:
        with anyio.fail_after(seconds):
            return await _fetch(
                parsed,
                max(0, start),
                allow_private=allow_private_networks is True,
                max_bytes=int(_positive(max_bytes, 2_000_000)),
                max_chars=int(_positive(max_chars, 4000)),
                timeout=seconds,
                max_redirects=int(_positive(max_redirects, 5)),
            )
    except TimeoutError:  # the whole fetch, redirects and a slow trickle of bytes included
        return _error(f"{parsed.host} did not send the page within {seconds:g} s")


tools.add(
    fetch_page,  # the presets: the owner's to set, never shown to the model
    allow_private_networks=False,
    max_bytes=2_000_000,
    max_chars=4000,
    timeout=15.0,
    max_redirects=5,
)


# --- web search ---------------------------------------------------------------------------------

PROVIDERS = {
    "duckduckgo": "duckduckgo", "ddg": "duckduckgo",
    "searxng": "searxng", "searx": "searxng",
    "brave": "brave",
}
_PROVIDER_NAMES = {"duckduckgo": "DuckDuckGo", "searxng": "SearXNG", "brave": "Brave Search"}

SNIPPET_CHARS = 300


def format_results(query: str, provider: str, results: list[Result], limit: int) -> str:
    """Numbered title / URL / snippet lines."""
    if not results:
        return f"No web results for {query!r} ({_PROVIDER_NAMES[provider]})."
    lines = [f"Web results for {query!r} ({_PROVIDER_NAMES[provider]}):"]
    for number, result in enumerate(results[:limit], 1):
        snippet = result.snippet
        if len(snippet) > SNIPPET_CHARS:
            snippet = snippet[:SNIPPET_CHARS].rsplit(" ", 1)[0] + "…"
        lines.append(f"{number}. {result.title or '(no title)'}")
        lines.append(f"   {result.url}")
        if snippet:
            lines.append(f"   {snippet}")
    return "\n".join(lines)


def _pick_provider(provider: str, api_key: str, searx_url: str) -> str | ToolResponse:
    name = str(provider or "").strip().lower()
    if not name:  # not set: the one the owner configured, else DuckDuckGo
        return "brave" if api_key else "searxng" if searx_url else "duckduckgo"
    if name not in PROVIDERS:
        return _error(
            "the web search provider set in MARSHO_TOOLKIT_SETTINGS is unknown; the bot owner "
            'must set "provider" under "web" to one of: duckduckgo, searxng, brave'
        )
    return PROVIDERS[name]


async def search(
    query: str,
    max_results: int = 5,
    *,
    provider: str = "",
    api_key: str = "",
    ddg_url: str = "https://html.duckduckgo.com/html/",
    searx_url: str = "",
    api_url: str = "https://api.search.brave.com/res/v1/web/search",
    timeout: float = 15.0,
) -> str | ToolResponse:
    """Search the web: numbered results, each with its title, URL and a snippet.

    To read a result in full, pass its URL to fetch_page.

    Args:
        query: What to search for, as you would type it into a search engine.
        max_results: How many results to return, 1 to 10.
        provider: Preset: duckduckgo, searxng or brave; empty picks brave when api_key is set,
            searxng when searx_url is set, else duckduckgo.
        api_key: Preset: the Brave Search API subscription token.
        ddg_url: Preset: DuckDuckGo's HTML search endpoint.
        searx_url: Preset: the address of a SearXNG instance (with json in search.formats).
        api_url: Preset: the Brave Search web search endpoint.
        timeout: Preset: seconds to wait for the provider.
    """
    query = " ".join(str(query).split())
    if not query:
        return _error("the search query is empty")
    limit = min(max(int(max_results), 1), 10)
    chosen = _pick_provider(provider, api_key, searx_url)
    if isinstance(chosen, ToolResponse):
        return chosen
    if chosen == "brave" and not api_key:
        return _error(
            "web search is set to Brave Search, which needs an API key: the bot owner must add "
            'it to the .env as MARSHO_TOOLKIT_SETTINGS={"web": {"api_key": "<Brave Search API '
            'key>"}} (or choose a provider without a key: duckduckgo or searxng)'
        )
    if chosen == "searxng" and not searx_url:
        return _error(
            "web search is set to SearXNG, which needs the address of an instance: the bot owner "
            'must add it to the .env as MARSHO_TOOLKIT_SETTINGS={"web": {"searx_url": '
            '"http://host:port"}}'
        )
    seconds = _positive(timeout, 15.0)
    endpoint = {"duckduckgo": ddg_url, "searxng": searx_url, "brave": api_url}[chosen]
    host = httpx.URL(endpoint).host or endpoint
    name = _PROVIDER_NAMES[chosen]
    try:
        with anyio.fail_after(seconds):
            async with httpx.AsyncClient(
                headers={"User-Agent": USER_AGENT}, timeout=httpx.Timeout(seconds),
                follow_redirects=True, verify=ssl_context(),
            ) as client:
                if chosen == "brave":
                    results = await brave(client, api_url, api_key, query, limit)
                elif chosen == "searxng":
                    results = await searxng(client, searx_url, query)
                else:
                    results = await duckduckgo(client, ddg_url, query)
    except SearchError as error:
        return _error(str(error))
    except (TimeoutError, httpx.TimeoutException):
        return _error(f"{name} ({host}) did not answer within {seconds:g} s")
    except httpx.ConnectError as error:
        return _error(f"could not connect to {name} at {host} ({str(error) or 'connection failed'})")
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        return _error(f"the search through {name} failed: {type(error).__name__}: {error}")
    return format_results(query, chosen, results, limit)


tools.add(
    search,
    provider="",
    api_key="",
    ddg_url="https://html.duckduckgo.com/html/",
    searx_url="",
    api_url="https://api.search.brave.com/res/v1/web/search",
    timeout=15.0,
)
