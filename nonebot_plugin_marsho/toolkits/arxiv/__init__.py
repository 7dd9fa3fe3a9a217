"""Built-in toolkit `arxiv`: search arXiv's papers. Off until the owner enables it.

It sends the search words (or the arXiv ids asked for) to arXiv's public API
(https://export.arxiv.org/api/query; no key). arXiv asks for at most one request every three
seconds, so calls are spaced at least `min_interval` seconds apart.

Settings (MARSHO_TOOLKIT_SETTINGS, under "arxiv"; the model never sees them): `base_url` (a mirror,
or a fake in tests), `timeout`, `min_interval`, `summary_chars`.
"""

from __future__ import annotations

import functools
import re
import ssl
import time
from typing import Literal

import anyio
import httpx

from nonebot_plugin_marsho.net.http import USER_AGENT, TooLarge, UnsupportedEncoding, read_capped
from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

from .feed import FeedError, Paper, parse_feed

tools = Toolbox()

MAX_BODY = 5_000_000
"""Bytes of an answer read at most."""

MAX_AUTHORS = 5

_FIELD = re.compile(r"\b(ti|au|abs|co|jr|cat|rn|id|all):", re.IGNORECASE)
_NEW_ID = re.compile(r"^(?:arxiv:)?(\d{4}\.\d{4,5}(?:v\d+)?)$", re.IGNORECASE)
_OLD_ID = re.compile(r"^(?:arxiv:)?([a-z][a-z.-]*(?:\.[A-Z]{2})?/\d{7}(?:v\d+)?)$", re.IGNORECASE)
_TERM = re.compile(r'"[^"]+"|[^\s"]+')

SORTS = {
    "relevance": "relevance",
    "newest": "submittedDate",
    "updated": "lastUpdatedDate",
}

_pacing = {"last": 0.0}
_pacing_lock: anyio.Lock | None = None


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """The certificate store, loaded once."""
    return httpx.create_ssl_context()


def build_params(query: str, max_results: int, sort_by: str) -> dict[str, str]:
    """The API's query parameters: ids → id_list; field syntax (ti:, au:...) as it is; plain
    words → each word must appear somewhere (all:word AND all:word...)."""
    terms = query.replace(",", " ").split()
    ids = [m.group(1) for t in terms if (m := _NEW_ID.match(t) or _OLD_ID.match(t))]
    params = {"max_results": str(max_results), "sortBy": SORTS[sort_by], "sortOrder": "descending"}
    if terms and len(ids) == len(terms):
        params["id_list"] = ",".join(ids)
        return params
    if _FIELD.search(query):
        params["search_query"] = query
    else:
        words = [t for t in _TERM.findall(query) if any(ch.isalnum() for ch in t)]
        params["search_query"] = " AND ".join(f"all:{word}" for word in words)
    return params


def _authors(names: list[str]) -> str:
    names = [n for n in names if n]
    if not names:
        return "(authors not given)"
    shown = ", ".join(names[:MAX_AUTHORS])
    return shown + (f" et al. ({len(names)} authors)" if len(names) > MAX_AUTHORS else "")


def _shorten(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + "…"


def format_papers(query: str, papers: list[Paper], total: int | None, summary_chars: int) -> str:
    """Numbered papers: title; authors, dates, categories; abs link; the summary shortened."""
    if not papers:
        return f"No arXiv papers found for {query!r}."
    of = f" of {total:,}" if total is not None and total > len(papers) else ""
    lines = [f"arXiv results for {query!r} ({len(papers)}{of}):"]
    for number, paper in enumerate(papers, 1):
        dates = f"published {paper.published}" if paper.published else ""
        if paper.updated and paper.updated != paper.published:
            dates += f", updated {paper.updated}"
        details = [_authors(paper.authors), dates, ", ".join(paper.categories[:3])]
        if paper.journal_ref:
            details.append(paper.journal_ref)
        lines.append(f"{number}. {paper.title}")
        lines.append("   " + " · ".join(d for d in details if d))
        lines.append(f"   {paper.link}")
        if paper.summary:
            lines.append(f"   {_shorten(paper.summary, summary_chars)}")
    return "\n".join(lines)


async def _wait_turn(min_interval: float) -> None:
    """Space requests `min_interval` seconds apart (arXiv's terms ask for 3 s)."""
    global _pacing_lock
    if min_interval <= 0:
        return
    if _pacing_lock is None:
        _pacing_lock = anyio.Lock()
    async with _pacing_lock:
        wait = _pacing["last"] + min_interval - time.monotonic()
        if wait > 0:
            await anyio.sleep(wait)
        _pacing["last"] = time.monotonic()


def _number(value: object, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return default
    return float(value)


async def search(
    query: str,
    max_results: int = 5,
    sort_by: Literal["relevance", "newest", "updated"] = "relevance",
    *,
    base_url: str = "https://export.arxiv.org",
    timeout: float = 20.0,
    min_interval: float = 3.0,
    summary_chars: int = 400,
) -> str | ToolResponse:
    """Search arXiv for scientific papers (physics, mathematics, computer science and more).

    Returns each paper's title, authors, dates, categories, abstract page link and the start of
    its abstract.

    Args:
        query: Words to find (e.g. "diffusion models protein"), arXiv's own syntax (e.g.
            "au:Hinton AND ti:capsule", fields ti, au, abs, cat, all), or arXiv ids such as
            2301.00001.
        max_results: How many papers to return, 1 to 20.
        sort_by: relevance, newest (by submission date) or updated (by last update).
        base_url: Preset: the API's address, without /api/query.
        timeout: Preset: seconds to wait for arXiv.
        min_interval: Preset: seconds between two requests to arXiv at least.
        summary_chars: Preset: characters of each abstract shown.
    """
    query = " ".join(str(query).split())
    if not query:
        return ToolResponse.error("the arXiv query is empty")
    params = build_params(query, min(max(int(max_results), 1), 20), sort_by)
    if not params.get("id_list") and not params.get("search_query"):
        return ToolResponse.error(f"the query {query!r} has no words to search for")
    url = str(base_url).rstrip("/") + "/api/query"
    host = httpx.URL(url).host or url
    seconds = _number(timeout, 20.0) or 20.0
    try:
        await _wait_turn(_number(min_interval, 3.0))
        with anyio.fail_after(seconds):
            async with httpx.AsyncClient(
                # only encodings read_capped decodes within its cap
                headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
                timeout=httpx.Timeout(seconds),
                follow_redirects=True, verify=_ssl_context(),
            ) as client:
                async with client.stream("GET", url, params=params) as response:
                    body, _ = await read_capped(response, MAX_BODY)
    except TooLarge:
        return ToolResponse.error(f"arXiv ({host}) sent more than {MAX_BODY:,} bytes; the answer was dropped")
    except UnsupportedEncoding as error:
        return ToolResponse.error(f"arXiv ({host}): {error}")
    except (TimeoutError, httpx.TimeoutException):
        return ToolResponse.error(f"arXiv ({host}) did not answer within {seconds:g} s; try again later")
    except httpx.ConnectError as error:
        why = str(error) or "connection failed"
        return ToolResponse.error(f"could not connect to arXiv at {host} ({why})")
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        return ToolResponse.error(f"the arXiv search failed: {type(error).__name__}: {error}")

    status = response.status_code
    try:
        feed = parse_feed(bytes(body))
    except FeedError as error:
        if status >= 400 and "rejected the query" not in str(error):
            return ToolResponse.error(_http_problem(status, response.reason_phrase, host))
        return ToolResponse.error(f"arXiv ({host}): {error}")
    if status >= 400:
        return ToolResponse.error(_http_problem(status, response.reason_phrase, host))
    limit = _number(summary_chars, 400)
    return format_papers(query, feed.papers, feed.total, int(limit) if limit else 400)


def _http_problem(status: int, reason: str, host: str) -> str:
    if status in (429, 503):
        return (f"arXiv ({host}) is busy or limiting requests (HTTP {status}); wait a minute and "
                "try again")
    return f"arXiv ({host}) answered HTTP {status} {reason}".rstrip()


tools.add(
    search,  # the presets: the owner's to set, never shown to the model
    base_url="https://export.arxiv.org",
    timeout=20.0,
    min_interval=3.0,
    summary_chars=400,
)
