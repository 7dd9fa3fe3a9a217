"""Search providers of `web__search`: DuckDuckGo's HTML page and SearXNG's JSON API (no key),
Brave Search's API (a key). Each turns its provider's answer, or its error, into plain results
or a SearchError whose message the model can relay."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx

from .extract import parse_html, strip_tags

MAX_BODY = 2_000_000
"""Bytes of a provider's answer read at most."""


@dataclass(frozen=True)
class Result:
    """One search hit."""

    title: str
    url: str
    snippet: str


class SearchError(Exception):
    """The provider could not give results; the message says why, for the model to relay."""


async def get(
    client: httpx.AsyncClient, url: str, params: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[httpx.Response, bytes]:
    """GET with the body read up to MAX_BODY bytes (an endless answer cannot fill memory)."""
    async with client.stream("GET", url, params=params, headers=headers) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_BODY:
                raise SearchError(
                    f"{response.url.host} sent more than {MAX_BODY:,} bytes; the answer was dropped"
                )
        return response, bytes(body)


def _json(response: httpx.Response, body: bytes, who: str) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        kind = response.headers.get("content-type", "no content type")
        raise SearchError(
            f"{who} answered HTTP {response.status_code} with a body that is not JSON ({kind})"
        ) from None


# --- DuckDuckGo ---------------------------------------------------------------------------------


def _duckduckgo_target(href: str) -> str:
    """The real address behind DuckDuckGo's redirect link (//duckduckgo.com/l/?uddg=...)."""
    absolute = urljoin("https://duckduckgo.com/", href)
    parts = urlsplit(absolute)
    if parts.path.startswith("/l/"):
        target = parse_qs(parts.query).get("uddg")
        if target:
            return target[0]
    return absolute


def _with_class(name: str, tag: str = "*") -> str:
    """XPath for descendants whose class list holds `name`."""
    return f".//{tag}[contains(concat(' ', normalize-space(@class), ' '), ' {name} ')]"


def parse_duckduckgo(html: bytes) -> list[Result] | None:
    """Results of DuckDuckGo's HTML page; [] for "no results"; None when the page holds neither
    (a bot check, or a changed layout)."""
    root = parse_html(html)
    if root is None:
        return None
    results: list[Result] = []
    for block in root.xpath(_with_class("result", "div")):
        classes = set((block.get("class") or "").split())
        if classes & {"result--ad", "result--ad--small"}:
            continue
        links = block.xpath(_with_class("result__a", "a"))
        if not links or not links[0].get("href"):
            continue
        url = _duckduckgo_target(links[0].get("href"))
        if urlsplit(url).netloc.endswith("duckduckgo.com") and "/y.js" in url:
            continue  # an ad's click-through
        snippets = block.xpath(_with_class("result__snippet"))
        snippet = snippets[0].text_content() if snippets else ""
        result = Result(" ".join(links[0].text_content().split()), url, " ".join(snippet.split()))
        if result.url not in {r.url for r in results}:
            results.append(result)
    if results:
        return results
    if root.xpath(_with_class("no-results")) or "No results." in root.text_content():
        return []
    return None


async def duckduckgo(client: httpx.AsyncClient, base_url: str, query: str) -> list[Result]:
    """Search through DuckDuckGo's HTML endpoint (no key)."""
    response, body = await get(client, base_url, {"q": query})
    if response.status_code == 202 or response.status_code == 429:
        raise SearchError(
            f"DuckDuckGo refused the search (HTTP {response.status_code}, it limits automated "
            "queries); try again in a while, or ask the bot owner to switch the search provider"
        )
    if response.status_code >= 400:
        raise SearchError(f"DuckDuckGo answered HTTP {response.status_code} {response.reason_phrase}")
    results = parse_duckduckgo(body)
    if results is None:
        if b"anomaly" in body.lower() or b"captcha" in body.lower():
            raise SearchError(
                "DuckDuckGo answered with a bot check instead of results; try again in a while, "
                "or ask the bot owner to switch the search provider"
            )
        raise SearchError(
            "DuckDuckGo's answer held no results that could be read (its page layout may have "
            "changed)"
        )
    return results


# --- SearXNG ------------------------------------------------------------------------------------


def searxng_endpoint(base_url: str) -> str:
    """`<instance>/search`, whether or not the configured address already ends in /search."""
    base = base_url.rstrip("/")
    return base if base.endswith("/search") else base + "/search"


async def searxng(client: httpx.AsyncClient, base_url: str, query: str) -> list[Result]:
    """Search through a SearXNG instance's JSON API (no key; usually self-hosted)."""
    response, body = await get(client, searxng_endpoint(base_url), {"q": query, "format": "json"})
    if response.status_code == 403:
        raise SearchError(
            "the SearXNG instance refused format=json (HTTP 403): its owner must add json to "
            "search.formats in SearXNG's settings.yml"
        )
    if response.status_code == 429:
        raise SearchError("the SearXNG instance is rate-limiting the bot (HTTP 429); try again later")
    if response.status_code >= 400:
        raise SearchError(
            f"the SearXNG instance answered HTTP {response.status_code} {response.reason_phrase}"
        )
    data = _json(response, body, "the SearXNG instance")
    items = data.get("results") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise SearchError("the SearXNG instance's answer has no 'results' list")
    results = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("url"), str):
            results.append(Result(
                " ".join(str(item.get("title") or "").split()),
                item["url"],
                strip_tags(str(item.get("content") or "")),
            ))
    return results


# --- Brave Search -------------------------------------------------------------------------------


def _brave_error(data: Any) -> str:
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        parts = [str(error[key]) for key in ("code", "detail") if error.get(key)]
        return ": ".join(parts)
    return ""


async def brave(
    client: httpx.AsyncClient, api_url: str, api_key: str, query: str, count: int
) -> list[Result]:
    """Search through the Brave Search API (needs a subscription token)."""
    headers = {"X-Subscription-Token": api_key, "Accept": "application/json"}
    response, body = await get(client, api_url, {"q": query, "count": count}, headers)
    if response.status_code >= 400:
        try:
            detail = _brave_error(json.loads(body))
        except (json.JSONDecodeError, UnicodeDecodeError):
            detail = ""
        said = f" ({detail})" if detail else ""
        if response.status_code in (401, 403) or "TOKEN" in detail.upper():
            raise SearchError(
                f"Brave Search rejected the API key (HTTP {response.status_code}){said}; the bot "
                "owner must check the web toolkit's api_key in MARSHO_TOOLKIT_SETTINGS"
            )
        if response.status_code == 429:
            raise SearchError(
                f"Brave Search's rate limit or monthly quota is used up (HTTP 429){said}; try "
                "again later"
            )
        raise SearchError(f"Brave Search answered HTTP {response.status_code}{said}")
    data = _json(response, body, "Brave Search")
    web = data.get("web") if isinstance(data, dict) else None
    if web is None and isinstance(data, dict) and "query" in data:
        return []  # Brave leaves out "web" when nothing matched
    items = web.get("results") if isinstance(web, dict) else None
    if not isinstance(items, list):
        raise SearchError("Brave Search's answer has no web results list")
    return [
        Result(strip_tags(str(item.get("title") or "")), item["url"],
               strip_tags(str(item.get("description") or "")))
        for item in items
        if isinstance(item, dict) and isinstance(item.get("url"), str)
    ]
