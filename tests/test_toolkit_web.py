"""Built-in toolkits `web` (fetch_page, search) and `arxiv` (search), against loopback fakes.

The SSRF tests run with the toolkit's defaults (allow_private_networks off): loopback, private,
link-local, IPv6 and disguised addresses are refused before anything is sent, on the first
request and on every redirect. Tests of normal answers use the owner-only preset
allow_private_networks so that the fake on 127.0.0.1 can be reached. Nothing here leaves the
machine: every address a test lets through is on loopback.
"""

from __future__ import annotations

import json
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from nonebot_plugin_marsho.tools import ToolCall, ToolResult, ToolRunner, Toolset, ToolsetSource, load_toolset
from nonebot_plugin_marsho.tools.loader import BUILTIN_TOOLSET
from tests.fake_web_sites import (
    DUCKDUCKGO_NO_RESULTS,
    FakeWebSites,
    Reply,
    Seen,
    arxiv_entry,
    arxiv_error_feed,
    arxiv_feed,
    closed_port,
    duckduckgo_page,
    html,
    redirect,
)

PRIVATE_OK = {"allow_private_networks": True}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeWebSites]:
    with FakeWebSites("127.0.0.1") as fake:
        yield fake


@pytest.fixture
def site(server: FakeWebSites) -> FakeWebSites:
    server.routes.clear()
    server.requests.clear()
    return server


@pytest.fixture(scope="module")
def public_server() -> Iterator[FakeWebSites]:
    with FakeWebSites("127.0.0.2") as fake:  # stands for a public site (see public_name)
        yield fake


@pytest.fixture
def public_site(public_server: FakeWebSites) -> FakeWebSites:
    public_server.routes.clear()
    public_server.requests.clear()
    return public_server


_LOADED: dict[str, Toolset] = {}


def load(settings: dict[str, Any] | None = None, enabled: tuple[str, ...] = ("web", "arxiv")) -> Toolset:
    """The built-in toolkits with these settings; loaded once per settings (tests patch a
    toolset's guard through monkeypatch only, which is undone after each test)."""
    key = json.dumps([settings or {}, enabled], sort_keys=True)
    if key not in _LOADED:
        toolset = load_toolset(
            [ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=list(enabled), settings=settings or {}
        )
        failed = {name: [str(p) for p in problems] for name, problems in toolset.failed_toolkits().items()}
        assert "web" not in failed and "arxiv" not in failed, failed
        _LOADED[key] = toolset
    return _LOADED[key]


async def call(toolset: Toolset, name: str, **arguments: Any) -> ToolResult:
    runner = ToolRunner(toolset, timeout=10)
    try:
        return await runner.run_one(ToolCall("call_1", name, json.dumps(arguments)))
    finally:
        runner.close()


def guard_of(toolset: Toolset) -> types.ModuleType:
    """The address guard the web toolkit of this toolset checks with (the plugin's one)."""
    guard = sys.modules[toolset.tools["web__fetch_page"].func.__globals__["GuardedTransport"].__module__]
    assert isinstance(guard, types.ModuleType)
    return guard


async def fetch(toolset: Toolset, url: str, **more: Any) -> ToolResult:
    return await call(toolset, "web__fetch_page", url=url, **more)


# --- off by default, presets hidden -------------------------------------------------------------


def test_web_and_arxiv_are_off_until_enabled_and_say_what_they_send() -> None:
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")])

    assert not any(name.startswith(("web__", "arxiv__")) for name in toolset.tools)
    assert "web" in toolset.available and "arxiv" in toolset.available
    assert "DuckDuckGo" in toolset.available["web"] and "Brave" in toolset.available["web"]
    assert "private" in toolset.available["web"]
    assert "export.arxiv.org" in toolset.available["arxiv"]

    enabled = load()
    assert {"web__fetch_page", "web__search", "arxiv__search"} <= set(enabled.tools)
    assert enabled.available.keys().isdisjoint({"web", "arxiv"})


def test_the_model_never_sees_the_presets() -> None:
    toolset = load({"web": {"api_key": "BSA-secret-key-1234", "allow_private_networks": True}})
    schemas = {s["function"]["name"]: s["function"] for s in toolset.schemas()}

    assert set(schemas["web__fetch_page"]["parameters"]["properties"]) == {"url", "start"}
    assert set(schemas["web__search"]["parameters"]["properties"]) == {"query", "max_results"}
    assert set(schemas["arxiv__search"]["parameters"]["properties"]) == {
        "query", "max_results", "sort_by"
    }
    text = json.dumps([schemas[n] for n in ("web__fetch_page", "web__search", "arxiv__search")])
    for hidden in ("allow_private_networks", "max_bytes", "api_key", "api_url", "ddg_url",
                   "searx_url", "provider", "base_url", "min_interval", "BSA-secret", "Preset"):
        assert hidden not in text
    assert toolset.tools["web__fetch_page"].presets["allow_private_networks"] is True


# --- fetch_page: normal answers -----------------------------------------------------------------

ARTICLE = """<!DOCTYPE html>
<html><head><title>  The  Moon  </title>
<style>body { color: red }</style>
<script>var secret = "script text";</script></head>
<body>
<nav><a href="/home">Home</a> <a href="/about">About us</a></nav>
<main>
<h1>The Moon</h1>
<p>The Moon is Earth's only <a href="/wiki/Natural_satellite">natural satellite</a>.
   It is   about a quarter   of Earth's diameter.</p>
<h2>Facts</h2>
<ul><li>Distance: 384,400 km</li><li>See <a href="https://example.org/moon#orbit">orbit</a></li></ul>
<table><tr><th>Body</th><th>Radius</th></tr><tr><td>Moon</td><td>1,737 km</td></tr></table>
<div hidden>hidden text</div>
<noscript>enable javascript please</noscript>
<p>Back to <a href="javascript:void(0)">nothing</a> and <a href="#top">the top</a>.</p>
<form><input value="form text"><button>Send form</button></form>
</main>
<footer>Copyright footer text</footer>
</body></html>"""


async def test_fetch_page_returns_readable_text_with_numbered_links(site: FakeWebSites) -> None:
    site.route("/moon", html(ARTICLE))
    toolset = load({"web": PRIVATE_OK})

    result = await fetch(toolset, site.url("/moon"))

    assert result.status == "ok", result.content
    text = result.content
    assert text.startswith("Title: The Moon\nURL: " + site.url("/moon"))
    assert "# The Moon" in text and "## Facts" in text
    assert "The Moon is Earth's only natural satellite [1]. It is about a quarter of Earth's" in text
    assert "- Distance: 384,400 km" in text and "- See orbit [2]" in text
    assert "Body | Radius" in text and "Moon | 1,737 km" in text
    assert f"[1] {site.url('/wiki/Natural_satellite')}" in text
    assert "[2] https://example.org/moon" in text and "#orbit" not in text
    for gone in ("script text", "color: red", "About us", "hidden text", "enable javascript",
                 "form text", "Send form", "footer text", "javascript:", "#top"):
        assert gone not in text
    [seen] = site.requests
    assert "marsho" in seen.headers["user-agent"]


async def test_fetch_page_follows_redirects_and_says_so(site: FakeWebSites) -> None:
    site.route("/old", redirect("/middle", 301))
    site.route("/middle", redirect(site.url("/new"), 307))
    site.route("/new", html("<title>New home</title><p>Moved here.</p>"))

    result = await fetch(load({"web": PRIVATE_OK}), site.url("/old"))

    assert result.status == "ok", result.content
    assert f"URL: {site.url('/new')}" in result.content
    assert f"(redirected from {site.url('/old')})" in result.content
    assert "Moved here." in result.content
    assert site.paths() == ["/old", "/middle", "/new"]


async def test_a_long_page_comes_in_parts(site: FakeWebSites) -> None:
    paragraphs = "".join(f"<p>Paragraph number {i} says something.</p>" for i in range(400))
    site.route("/long", html(f"<title>Long</title>{paragraphs}"))
    toolset = load({"web": {**PRIVATE_OK, "max_chars": 1000}})

    first = await fetch(toolset, site.url("/long"))

    assert first.status == "ok", first.content
    assert "Paragraph number 0 says" in first.content
    assert "Paragraph number 300" not in first.content
    note = first.content.rsplit("\n", 1)[-1]
    assert note.startswith("[Characters 0-") and "start=" in note
    start = int(note.split("start=")[1].split()[0])
    assert 750 <= start <= 1000

    second = await fetch(toolset, site.url("/long"), start=start)
    assert second.status == "ok"
    assert "Paragraph number 0 says" not in second.content
    assert f"[Characters {start}-" in second.content

    past = await fetch(toolset, site.url("/long"), start=10_000_000)
    assert past.status == "error" and "past its end" in past.content


async def test_json_and_plain_text_are_shown_as_text(site: FakeWebSites) -> None:
    site.route("/data.json", Reply(body=b'{"name": "\\u6708\\u4eae", "radius_km": 1737}',
                                   content_type="application/json"))
    site.route("/broken.json", Reply(body=b'{"name": ', content_type="application/json"))
    site.route("/notes.txt", Reply(body="第一行\r\nline two".encode(), content_type="text/plain"))
    toolset = load({"web": PRIVATE_OK})

    data = await fetch(toolset, site.url("/data.json"))
    broken = await fetch(toolset, site.url("/broken.json"))
    notes = await fetch(toolset, site.url("/notes.txt"))

    assert data.status == "ok" and '"name": "月亮"' in data.content and '"radius_km": 1737' in data.content
    assert broken.status == "ok" and "not valid JSON" in broken.content and '{"name":' in broken.content
    assert notes.status == "ok" and "第一行\nline two" in notes.content


async def test_a_page_in_another_charset_is_decoded(site: FakeWebSites) -> None:
    page = '<html><head><meta charset="gbk"><title>月亮</title></head><body><p>月球是地球的卫星。</p></body></html>'
    site.route("/gbk", Reply(body=page.encode("gbk"), content_type="text/html"))

    result = await fetch(load({"web": PRIVATE_OK}), site.url("/gbk"))

    assert result.status == "ok", result.content
    assert "Title: 月亮" in result.content and "月球是地球的卫星。" in result.content


async def test_no_content_type_is_sniffed(site: FakeWebSites) -> None:
    site.route("/untyped", Reply(body=b"<!doctype html><title>T</title><p>Sniffed.</p>", content_type=None))

    result = await fetch(load({"web": PRIVATE_OK}), site.url("/untyped"))

    assert result.status == "ok" and "Sniffed." in result.content and "Title: T" in result.content


async def test_a_deeply_nested_page_does_not_break_the_extractor(site: FakeWebSites) -> None:
    site.route("/deep", html("<div>" * 1500 + "<p>deep inside</p>" + "</div>" * 1500))
    site.route("/deeper", html("<p>top</p>" + "<div>" * 50_000 + "<p>abyss</p>" + "</div>" * 50_000))
    toolset = load({"web": PRIVATE_OK})

    deep = await fetch(toolset, site.url("/deep"))
    deeper = await fetch(toolset, site.url("/deeper"))

    assert deep.status == "ok" and "deep inside" in deep.content
    # past libxml2's depth limit (2048) the rest is dropped: still an answer, not a crash
    assert deeper.status == "ok" and "top" in deeper.content and "raised" not in deeper.content


# --- fetch_page: failures are answers ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (Reply(404, b"<h1>gone</h1>"), ["HTTP 404", "Not Found"]),
        (Reply(500, b"oops"), ["HTTP 500"]),
        (Reply(body=b"\x89PNG\r\n\x1a\n....", content_type="image/png"), ["an image", "image/png",
                                                                          "not a web page"]),
        (Reply(body=b"%PDF-1.7 ...", content_type="application/pdf"), ["a PDF document"]),
        (Reply(body=b"%PDF-1.7 \x00\x01", content_type="text/html"), ["a PDF document",
                                                                      "though it says text/html"]),
        (Reply(body=b"\x00\x01\x02binary", content_type=None), ["a binary file"]),
        (Reply(body=b"", content_type="text/html"), ["empty body"]),
        (html("<html><body><script>render()</script></body></html>"), ["no readable text",
                                                                       "JavaScript"]),
    ],
    ids=["404", "500", "png", "pdf", "pdf-posing-as-html", "nul-bytes", "empty", "javascript-only"],
)
async def test_fetch_failures_are_clear_errors(site: FakeWebSites, reply: Reply, words: list[str]) -> None:
    site.route("/x", reply)

    result = await fetch(load({"web": PRIVATE_OK}), site.url("/x"))

    assert result.status == "error", result.content
    assert result.content.startswith("Error: ")
    for word in words:
        assert word in result.content


async def test_an_endless_body_is_cut_at_the_size_cap(site: FakeWebSites) -> None:
    site.route("/endless", Reply(body=b"<p>" + b"x" * 8000 + b"</p>\n", endless=True))
    started = time.perf_counter()

    result = await fetch(load({"web": {**PRIVATE_OK, "max_bytes": 200_000}}), site.url("/endless"))

    assert time.perf_counter() - started < 20  # the body never ends
    assert result.status == "ok", result.content
    assert "larger than 200,000 bytes; only its beginning was downloaded" in result.content


async def test_a_slow_server_times_out(site: FakeWebSites) -> None:
    site.route("/slow", Reply(body=b"<p>late</p>", delay=60.0))
    started = time.perf_counter()

    result = await fetch(load({"web": {**PRIVATE_OK, "timeout": 0.5}}), site.url("/slow"))

    assert time.perf_counter() - started < 30  # at the timeout, not when the answer comes
    assert result.status == "error" and "within 0.5 s" in result.content


async def test_an_unreachable_server_is_an_error() -> None:
    result = await fetch(load({"web": PRIVATE_OK}), f"http://127.0.0.1:{closed_port()}/")

    assert result.status == "error" and "could not connect to 127.0.0.1" in result.content


async def test_redirect_loops_and_odd_redirects_are_errors(site: FakeWebSites) -> None:
    site.route("/loop", redirect("/loop"))
    site.route("/ftp", redirect("ftp://files.example/x"))
    toolset = load({"web": {**PRIVATE_OK, "max_redirects": 3}})

    loop = await fetch(toolset, site.url("/loop"))
    ftp = await fetch(toolset, site.url("/ftp"))

    assert loop.status == "error" and "more than 3 times" in loop.content
    assert site.paths().count("/loop") == 4
    assert ftp.status == "error" and "not an http(s) address" in ftp.content


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.org/file", ["only http:// and https://", "ftp:"]),
        ("file:///etc/passwd", ["only http:// and https://", "file:"]),
        ("example.org/page", ["without a scheme", "https://example.org/page"]),
        ("http://exa mple.org/", ["not a valid URL"]),
    ],
)
async def test_bad_urls_are_refused_with_the_reason(url: str, words: list[str]) -> None:
    result = await fetch(load(), url)

    assert result.status == "error"
    for word in words:
        assert word in result.content


# --- the SSRF guard (allow_private_networks off, as shipped) ------------------------------------


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("0.0.0.0", "unspecified"),
        ("localhost", "loopback"),
        ("LOCALHOST.", "loopback"),
        ("api.localhost", "loopback"),
        ("[::1]", "loopback"),
        ("[::ffff:127.0.0.1]", "127.0.0.1 written as IPv6, a loopback"),
        ("[::ffff:10.0.0.1]", "10.0.0.1 written as IPv6, a private"),
        ("[fd00::1]", "unique local"),
        ("[fe80::1]", "link-local"),
        ("2130706433", "127.0.0.1, which is a loopback"),  # decimal 127.0.0.1, as resolvers take it
        ("0x7f000001", "127.0.0.1, which is a loopback"),  # hexadecimal
        ("127.1", "127.0.0.1, which is a loopback"),
    ],
)
async def test_the_guard_refuses_non_public_addresses(server: FakeWebSites, host: str, reason: str) -> None:
    server.requests.clear()
    url = f"http://{host}:{server.port}/admin"

    result = await fetch(load(), url)

    assert result.status == "error", result.content
    assert "refused" in result.content and "public internet" in result.content
    assert reason in result.content
    assert server.requests == []  # nothing reached the (real, listening) loopback server


async def test_the_model_cannot_switch_the_guard_off(server: FakeWebSites) -> None:
    server.requests.clear()

    result = await fetch(load(), server.url("/admin"), allow_private_networks=True, max_bytes=10)

    assert result.status == "error" and "loopback" in result.content
    assert server.requests == []


async def test_a_name_resolving_to_loopback_is_refused(server: FakeWebSites, monkeypatch: pytest.MonkeyPatch) -> None:
    server.requests.clear()
    toolset = load()
    guard = guard_of(toolset)

    async def resolve(host: str, port: int) -> list[str]:
        return {"intranet.example": ["127.0.0.1"], "mixed.example": ["8.8.8.8", "10.0.0.7"],
                "metadata.example": ["::ffff:169.254.169.254"]}[host]

    monkeypatch.setattr(guard, "resolve_host", resolve)

    loopback = await fetch(toolset, f"http://intranet.example:{server.port}/")
    mixed = await fetch(toolset, f"http://mixed.example:{server.port}/")
    metadata = await fetch(toolset, "http://metadata.example/latest/meta-data/")

    assert loopback.status == "error"
    assert "intranet.example resolves to 127.0.0.1, which is a loopback address" in loopback.content
    # one private record among public ones is enough to refuse: nothing is dialled
    assert mixed.status == "error" and "10.0.0.7, which is a private address" in mixed.content
    assert metadata.status == "error" and "cloud metadata" in metadata.content
    assert server.requests == []


@pytest.fixture
def public_name(public_site: FakeWebSites, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """make(toolset): 'site.example' resolves to the fake on 127.0.0.2, which the guard is told
    to treat as a public address; every other name and address goes through the real guard."""

    def make(toolset: Toolset) -> str:
        guard = guard_of(toolset)
        real_resolve, real_reason = guard.resolve_host, guard.blocked_reason

        async def resolve(host: str, port: int) -> list[str]:
            if host == "site.example":
                return ["127.0.0.2"]
            return await real_resolve(host, port)  # type: ignore[no-any-return]

        def reason(address: str) -> str | None:
            return None if address == "127.0.0.2" else real_reason(address)  # type: ignore[no-any-return]

        monkeypatch.setattr(guard, "resolve_host", resolve)
        monkeypatch.setattr(guard, "blocked_reason", reason)
        return f"http://site.example:{public_site.port}"

    yield make


async def test_a_public_site_passes_the_guard_and_the_connection_is_pinned(
    public_site: FakeWebSites, public_name: Any
) -> None:
    toolset = load()
    origin = public_name(toolset)
    public_site.route("/hello", html("<title>Hi</title><p>Public page.</p>"))

    result = await fetch(toolset, origin + "/hello")

    # site.example exists only in the guard's resolver: reaching it proves the connection went
    # to the address the guard checked, not to a second lookup
    assert result.status == "ok", result.content
    assert "Public page." in result.content
    [seen] = public_site.requests
    assert seen.headers["host"] == f"site.example:{public_site.port}"


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{private}/secret",
        "http://localhost:{private}/secret",
        "http://[::1]:{private}/secret",
        "http://[::ffff:127.0.0.1]:{private}/secret",
        "http://10.0.0.1/secret",
        "http://192.168.0.1/secret",
        "http://169.254.169.254/latest/meta-data/iam/",
        "http://2130706433:{private}/secret",
    ],
)
async def test_a_redirect_to_a_private_address_is_refused(
    server: FakeWebSites, public_site: FakeWebSites, public_name: Any, target: str
) -> None:
    server.requests.clear()
    server.route("/secret", html("<p>internal secrets</p>"))
    toolset = load()
    origin = public_name(toolset)
    location = target.format(private=server.port)
    public_site.route("/go", redirect(location))

    result = await fetch(toolset, origin + "/go")

    assert result.status == "error", result.content
    assert f"{origin}/go redirected to" in result.content
    assert "refused" in result.content and "internal secrets" not in result.content
    assert public_site.paths() == ["/go"]
    assert server.requests == []  # the private server was never contacted


async def test_a_redirect_through_a_name_resolving_to_loopback_is_refused(
    server: FakeWebSites, public_site: FakeWebSites, public_name: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.requests.clear()
    toolset = load()
    origin = public_name(toolset)
    guard = guard_of(toolset)
    patched = guard.resolve_host

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host == "rebind.example" else await patched(host, port)

    monkeypatch.setattr(guard, "resolve_host", resolve)
    public_site.route("/go", redirect(f"http://rebind.example:{server.port}/secret", 308))

    result = await fetch(toolset, origin + "/go")

    assert result.status == "error"
    assert "rebind.example resolves to 127.0.0.1, which is a loopback address" in result.content
    assert server.requests == []


def test_blocked_reason_covers_every_kind_of_non_public_address() -> None:
    guard = guard_of(load())
    blocked = {
        "127.0.0.1": "loopback", "127.255.0.9": "loopback", "::1": "loopback",
        "10.0.0.1": "private", "172.31.255.255": "private", "192.168.0.1": "private",
        "169.254.169.254": "metadata", "169.254.1.1": "link-local", "fe80::1%eth0": "link-local",
        "fd12:3456::1": "unique local", "fc00::1": "unique local", "fec0::1": "site-local",
        "0.0.0.0": "unspecified", "::": "unspecified",
        "224.0.0.1": "multicast", "ff02::1": "multicast",
        "240.0.0.1": "reserved", "255.255.255.255": "",
        "100.64.0.1": "not a public", "192.0.2.1": "", "198.18.0.1": "",
        "::ffff:127.0.0.1": "loopback", "::ffff:192.168.1.1": "private",
        "64:ff9b::a00:1": "private", "2002:a9fe:a9fe::1": "metadata", "::127.0.0.1": "loopback",
    }
    for address, word in blocked.items():
        reason = guard.blocked_reason(address)
        assert reason is not None and word in reason, (address, reason)
    for public in ("93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"):
        assert guard.blocked_reason(public) is None, public


# --- web search ---------------------------------------------------------------------------------

DDG_RESULTS = [
    ("Moon - Wikipedia", "https://en.wikipedia.org/wiki/Moon",
     "The <b>Moon</b> is Earth's only natural satellite."),
    ("Moon facts | NASA", "https://science.nasa.gov/moon/facts/", "Facts about the Moon."),
    ("Moon &amp; more", "https://example.org/moon?a=1&b=2", ""),
]


def search_settings(site: FakeWebSites, **more: Any) -> dict[str, Any]:
    return {"web": {"ddg_url": site.url("/html/"), "searx_url": "", "api_url": site.url("/brave"),
                    **more}}


async def test_search_with_duckduckgo_by_default(site: FakeWebSites) -> None:
    site.route("/html/", html(duckduckgo_page(DDG_RESULTS)))

    result = await call(load(search_settings(site)), "web__search", query="  the   moon ", max_results=2)

    assert result.status == "ok", result.content
    assert result.content == (
        "Web results for 'the moon' (DuckDuckGo):\n"
        "1. Moon - Wikipedia\n   https://en.wikipedia.org/wiki/Moon\n"
        "   The Moon is Earth's only natural satellite.\n"
        "2. Moon facts | NASA\n   https://science.nasa.gov/moon/facts/\n   Facts about the Moon."
    )
    [seen] = site.requests
    assert seen.path == "/html/" and seen.param("q") == "the moon"


async def test_duckduckgo_answers_without_results_and_with_a_bot_check(site: FakeWebSites) -> None:
    toolset = load(search_settings(site))
    site.route("/html/", html(DUCKDUCKGO_NO_RESULTS))
    none = await call(toolset, "web__search", query="xyzzy")
    site.route("/html/", html("<html><body>anomaly: are you a robot?</body></html>", status=202))
    blocked = await call(toolset, "web__search", query="moon")
    site.route("/html/", html("<html><body><p>A new layout</p></body></html>"))
    changed = await call(toolset, "web__search", query="moon")

    assert (none.status, none.content) == ("ok", "No web results for 'xyzzy' (DuckDuckGo).")
    assert blocked.status == "error" and "HTTP 202" in blocked.content
    assert changed.status == "error" and "layout" in changed.content


async def test_search_with_searxng(site: FakeWebSites) -> None:
    answer = {"results": [{"title": "Moon", "url": "https://moon.example/", "content": "All <em>about</em> it"}]}
    site.route("/search", Reply(body=json.dumps(answer).encode(), content_type="application/json"))

    result = await call(
        load(search_settings(site, provider="searxng", searx_url=site.url("/"))), "web__search", query="moon"
    )

    assert result.status == "ok", result.content
    assert result.content == (
        "Web results for 'moon' (SearXNG):\n1. Moon\n   https://moon.example/\n   All about it"
    )
    [seen] = site.requests
    assert (seen.path, seen.param("q"), seen.param("format")) == ("/search", "moon", "json")


async def test_searxng_errors_are_explained(site: FakeWebSites) -> None:
    toolset = load(search_settings(site, provider="searxng", searx_url=site.url("")))
    site.route("/search", Reply(403, b"Forbidden", "text/html"))
    forbidden = await call(toolset, "web__search", query="moon")
    site.route("/search", Reply(200, b"<html>not json</html>", "text/html"))
    not_json = await call(toolset, "web__search", query="moon")
    missing = await call(load(search_settings(site, provider="searxng")), "web__search", query="moon")

    assert forbidden.status == "error" and "search.formats" in forbidden.content
    assert not_json.status == "error" and "not JSON" in not_json.content
    assert missing.status == "error" and '"searx_url"' in missing.content
    assert "MARSHO_TOOLKIT_SETTINGS" in missing.content


BRAVE_KEY = "BSA-test-key-0042"


def brave_route(seen: Seen) -> Reply:
    if seen.headers.get("x-subscription-token") != BRAVE_KEY:
        error = {"type": "ErrorResponse", "error": {
            "code": "SUBSCRIPTION_TOKEN_INVALID", "status": 422,
            "detail": f"The provided subscription token {seen.headers.get('x-subscription-token')} is invalid."}}
        return Reply(422, json.dumps(error).encode(), "application/json")
    if seen.param("q") == "limit":
        return Reply(429, b'{"error": {"code": "RATE_LIMITED", "detail": "Too many"}}', "application/json")
    if seen.param("q") == "nothing":
        return Reply(body=b'{"type": "search", "query": {"original": "nothing"}}', content_type="application/json")
    count = int(seen.param("count") or 20)
    results = [{"title": f"<strong>Moon</strong> {i}", "url": f"https://moon{i}.example/",
                "description": f"About the <strong>moon</strong>, {i}."} for i in range(1, 11)]
    body = {"type": "search", "web": {"type": "search", "results": results[:count]}}
    return Reply(body=json.dumps(body).encode(), content_type="application/json")


async def test_search_with_brave_sends_the_key_and_never_shows_it(site: FakeWebSites) -> None:
    site.route("/brave", brave_route)
    toolset = load(search_settings(site, provider="brave", api_key=BRAVE_KEY))

    result = await call(toolset, "web__search", query="moon", max_results=3)

    assert result.status == "ok", result.content
    assert result.content.splitlines()[:4] == [
        "Web results for 'moon' (Brave Search):", "1. Moon 1", "   https://moon1.example/",
        "   About the moon, 1."
    ]
    assert "3. Moon 3" in result.content and "4. Moon 4" not in result.content
    [seen] = site.requests
    assert seen.param("count") == "3" and seen.headers["x-subscription-token"] == BRAVE_KEY
    assert BRAVE_KEY not in result.content


async def test_the_api_key_alone_picks_brave(site: FakeWebSites) -> None:
    site.route("/brave", brave_route)

    result = await call(load(search_settings(site, api_key=BRAVE_KEY)), "web__search", query="moon")

    assert result.status == "ok" and "(Brave Search)" in result.content


async def test_brave_errors_are_explained_and_redacted(site: FakeWebSites) -> None:
    site.route("/brave", brave_route)
    wrong = load(search_settings(site, provider="brave", api_key="BSA-wrong-key-9999"))
    right = load(search_settings(site, provider="brave", api_key=BRAVE_KEY))

    rejected = await call(wrong, "web__search", query="moon")
    limited = await call(right, "web__search", query="limit")
    nothing = await call(right, "web__search", query="nothing")

    assert rejected.status == "error" and "rejected the API key" in rejected.content
    assert "SUBSCRIPTION_TOKEN_INVALID" in rejected.content and "api_key" in rejected.content
    assert "BSA-wrong-key-9999" not in rejected.content and "[redacted]" in rejected.content
    assert limited.status == "error" and "HTTP 429" in limited.content
    assert (nothing.status, nothing.content) == ("ok", "No web results for 'nothing' (Brave Search).")


async def test_brave_without_a_key_says_which_setting_to_add(site: FakeWebSites) -> None:
    result = await call(load(search_settings(site, provider="brave")), "web__search", query="moon")

    assert result.status == "error"
    assert 'MARSHO_TOOLKIT_SETTINGS={"web": {"api_key": ' in result.content
    assert "Brave Search" in result.content
    assert site.requests == []


async def test_search_failures_are_answers(site: FakeWebSites) -> None:
    site.route("/html/", Reply(body=b"late", delay=2.0))
    slow = await call(load(search_settings(site, timeout=0.5)), "web__search", query="moon")
    down = await call(
        load({"web": {"ddg_url": f"http://127.0.0.1:{closed_port()}/html/"}}), "web__search", query="moon"
    )
    unknown = await call(load(search_settings(site, provider="altavista")), "web__search", query="moon")
    empty = await call(load(search_settings(site)), "web__search", query="   ")

    assert slow.status == "error" and "within 0.5 s" in slow.content
    assert down.status == "error" and "could not connect to DuckDuckGo at 127.0.0.1" in down.content
    assert unknown.status == "error" and "duckduckgo, searxng, brave" in unknown.content
    assert empty.status == "error" and "empty" in empty.content


# --- arXiv --------------------------------------------------------------------------------------

LONG_SUMMARY = "We study the moon. " * 60


def arxiv_settings(site: FakeWebSites, **more: Any) -> dict[str, Any]:
    return {"arxiv": {"base_url": site.origin, "min_interval": 0, **more}}


def arxiv_route(seen: Seen) -> Reply:
    query = seen.param("search_query") or ""
    if seen.param("id_list"):
        entry = arxiv_entry(seen.param("id_list") or "", "By id", ["Ada Lovelace"], "Found by id.")
        return Reply(body=arxiv_feed([entry]), content_type="application/atom+xml")
    if "nothing" in query:
        return Reply(body=arxiv_feed([], total=0), content_type="application/atom+xml")
    if "badquery" in query:
        return Reply(400, arxiv_error_feed("malformed search_query"), "application/atom+xml")
    entries = [
        arxiv_entry("2301.00001v2", "Lunar  Regolith\n  Mechanics",
                    [f"Author {i}" for i in range(1, 8)], LONG_SUMMARY,
                    published="2023-01-02T10:00:00Z", updated="2023-03-04T10:00:00Z"),
        arxiv_entry("2302.00002v1", "Tides", ["Solo Writer"], "Short abstract.", category="astro-ph.EP"),
    ]
    return Reply(body=arxiv_feed(entries, total=1234), content_type="application/atom+xml")


async def test_arxiv_search_lists_papers(site: FakeWebSites) -> None:
    site.route("/api/query", arxiv_route)

    result = await call(load(arxiv_settings(site)), "arxiv__search", query="lunar regolith", max_results=2)

    assert result.status == "ok", result.content
    lines = result.content.splitlines()
    assert lines[0] == "arXiv results for 'lunar regolith' (2 of 1,234):"
    assert lines[1] == "1. Lunar Regolith Mechanics"
    assert lines[2] == (
        "   Author 1, Author 2, Author 3, Author 4, Author 5 et al. (7 authors) · "
        "published 2023-01-02, updated 2023-03-04 · cs.CL"
    )
    assert lines[3] == "   https://arxiv.org/abs/2301.00001v2"
    assert lines[4].startswith("   We study the moon.") and lines[4].endswith("…")
    assert len(lines[4]) < 420
    assert "2. Tides" in result.content and "Solo Writer · published 2023-01-02 · astro-ph.EP" in result.content
    [seen] = site.requests
    assert seen.param("search_query") == "all:lunar AND all:regolith"
    assert (seen.param("max_results"), seen.param("sortBy")) == ("2", "relevance")


async def test_arxiv_query_forms(site: FakeWebSites) -> None:
    site.route("/api/query", arxiv_route)
    toolset = load(arxiv_settings(site))

    by_id = await call(toolset, "arxiv__search", query="arXiv:2301.00001")
    await call(toolset, "arxiv__search", query="au:Hinton AND ti:capsule", sort_by="newest", max_results=99)
    await call(toolset, "arxiv__search", query='"large language" models')

    assert by_id.status == "ok" and "1. By id" in by_id.content
    first, fields, phrase = site.requests
    assert first.param("id_list") == "2301.00001" and first.param("search_query") is None
    assert fields.param("search_query") == "au:Hinton AND ti:capsule"
    assert (fields.param("sortBy"), fields.param("max_results")) == ("submittedDate", "20")
    assert phrase.param("search_query") == 'all:"large language" AND all:models'


async def test_arxiv_failures_are_answers(site: FakeWebSites) -> None:
    site.route("/api/query", arxiv_route)
    toolset = load(arxiv_settings(site))

    nothing = await call(toolset, "arxiv__search", query="nothing at all")
    bad = await call(toolset, "arxiv__search", query="badquery")
    site.route("/api/query", Reply(503, b"Service Unavailable", "text/plain"))
    busy = await call(toolset, "arxiv__search", query="moon")
    site.route("/api/query", Reply(200, b"<feed><entry>", "application/atom+xml"))
    malformed = await call(toolset, "arxiv__search", query="moon")
    site.route("/api/query", Reply(200, b"<html><body>hi</body></html>", "text/html"))
    not_atom = await call(toolset, "arxiv__search", query="moon")
    down = await call(load({"arxiv": {"base_url": f"http://127.0.0.1:{closed_port()}", "min_interval": 0}}),
                      "arxiv__search", query="moon")

    assert (nothing.status, nothing.content) == ("ok", "No arXiv papers found for 'nothing at all'.")
    assert bad.status == "error" and "arXiv rejected the query: malformed search_query" in bad.content
    assert busy.status == "error" and "HTTP 503" in busy.content and "try again" in busy.content
    assert malformed.status == "error" and "not valid XML" in malformed.content
    assert not_atom.status == "error" and "not an Atom feed" in not_atom.content
    assert down.status == "error" and "could not connect to arXiv at 127.0.0.1" in down.content


async def test_arxiv_requests_are_spaced_as_arxiv_asks(site: FakeWebSites) -> None:
    site.route("/api/query", arxiv_route)
    toolset = load(arxiv_settings(site, min_interval=0.4))

    started = time.perf_counter()
    for _ in range(3):
        assert (await call(toolset, "arxiv__search", query="tides")).status == "ok"

    assert time.perf_counter() - started >= 0.8
