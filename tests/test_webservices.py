"""Web-service tools (POST JSON, answer markdown or a chart) against a loopback service: markdown and chart answers (charts as
valid PNGs, the model reading a summary), defaults filled into the POST body, `${ENV}` headers
kept out of results and logs, every bad answer or HTTP failure an error result naming the tool,
and the config file's problems naming the file and the entry."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nonebot.log import logger

from nonebot_plugin_marsho.tools import ToolCall, ToolResult, ToolRunner, Toolset, charts
from nonebot_plugin_marsho.tools.model import Toolkit
from nonebot_plugin_marsho.tools.webservices import fill_defaults, load_webservices
from tests.fake_web_apis import unreachable_url
from tests.fake_webservice import Answer, FakeWebService, chart, json_answer, markdown, raw

SECRET = "s3cret-token-9876"
ENVIRON = {"SVC_TOKEN": SECRET}

SALES = [["1月", 120, 80], ["2月", 150, 95], ["3月", 90, 70], ["4月", 200, 120]]
SALES_HEADERS = ["月份", "销售额", "成本"]
KLINE = [
    ["2024-01-02", 10.0, 12.0, 9.5, 11.0],
    ["2024-01-03", 11.0, 11.5, 8.0, 9.0],
    ["2024-01-04", 9.0, 13.0, 9.0, 12.5],
    ["2024-01-05", 12.5, 12.8, 11.0, 11.2],
]
KLINE_HEADERS = ["日期", "开盘", "最高", "最低", "收盘"]


@pytest.fixture(scope="module")
def service() -> Iterator[FakeWebService]:
    with FakeWebService() as fake:
        yield fake


@pytest.fixture(autouse=True)
def fresh(service: FakeWebService) -> None:
    service.reset()


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


def write_config(tmp_path: Path, tools: list[dict[str, Any]], *, toolkit: str = "svc",
                 text: str | None = None) -> Path:
    path = tmp_path / "webservices.json"
    path.write_text(text if text is not None else json.dumps({"toolkit": toolkit, "tools": tools},
                                                              ensure_ascii=False), encoding="utf-8")
    return path


def entry(url: str, name: str = "ask", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "Ask the service",
        "url": url,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        **extra,
    }


def load(tmp_path: Path, tools: list[dict[str, Any]], **kwargs: Any) -> Toolkit:
    toolkit, problems = load_webservices(write_config(tmp_path, tools), environ=ENVIRON, **kwargs)
    assert toolkit is not None, problems
    assert not [p for p in problems if p.severity == "error"], problems
    return toolkit


async def call(toolkit: Toolkit, name: str, arguments: dict[str, Any]) -> ToolResult:
    toolset = Toolset()
    toolset.add(toolkit)
    runner = ToolRunner(toolset, timeout=10)
    try:
        return await runner.run_one(ToolCall("c1", name, json.dumps(arguments)))
    finally:
        runner.close()


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, checking the signature and the chunk's CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    ihdr = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(kind + ihdr) == crc, "IHDR CRC mismatch"
    width, height = struct.unpack(">II", ihdr[:8])
    assert data.endswith(b"IEND\xaeB`\x82"), "no IEND chunk"
    return width, height


def assert_valid_png(data: bytes) -> None:
    width, height = png_size(data)
    assert (width, height) == (800, 500)
    assert 3_000 < len(data) < 500_000


# --- markdown ----------------------------------------------------------------------------------

async def test_markdown_answer_reaches_the_model_with_its_desc(tmp_path: Path, service: FakeWebService
                                                                ) -> None:
    text = """{
      // comments are allowed
      "toolkit": "svc",
      "tools": [{
        "name": "weather", "description": "Weather of a city", "url": "%s",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}
      }]
    }""" % service.url("/weather")
    toolkit, problems = load_webservices(write_config(tmp_path, [], text=text), environ=ENVIRON)
    assert problems == [] and toolkit is not None
    [tool] = toolkit.tools
    assert tool.name == "svc__weather" and tool.toolkit == "svc" and tool.permission == "everyone"
    assert tool.schema()["function"]["parameters"]["required"] == ["city"]
    service.push(markdown("**晴**, 25 °C", desc="北京今天的天气"))

    result = await call(toolkit, "svc__weather", {"city": "北京"})

    assert result.status == "ok" and result.images == ()
    assert "**晴**, 25 °C" in result.content and "北京今天的天气" in result.content
    [request] = service.requests
    assert request.path == "/weather" and request.body == {"city": "北京"}
    assert request.headers["content-type"] == "application/json"


async def test_markdown_field_is_read_when_data_is_not_text(tmp_path: Path, service: FakeWebService
                                                            ) -> None:
    toolkit = load(tmp_path, [entry(service.url())])
    service.push(json_answer({"type": "markdown", "data": {"k": 1}, "markdown": "| k |\n|---|\n| 1 |",
                              "desc": "d"}))
    result = await call(toolkit, "svc__ask", {})
    assert result.status == "ok" and "| k |" in result.content


async def test_defaults_are_filled_into_the_post_body(tmp_path: Path, service: FakeWebService) -> None:
    parameters = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "default": 3},
            "unit": {"type": "string", "enum": ["C", "F"], "default": "C"},
            "options": {"type": "object", "properties": {"lang": {"type": "string", "default": "zh"},
                                                         "hourly": {"type": "boolean"}}},
            "no_default": {"type": "string"},
        },
        "required": ["city"],
    }
    toolkit = load(tmp_path, [entry(service.url(), parameters=parameters)])

    await call(toolkit, "svc__ask", {"city": "上海", "unit": "F", "options": {"hourly": True}})
    await call(toolkit, "svc__ask", {"city": "上海"})

    assert [r.body for r in service.requests] == [
        {"city": "上海", "unit": "F", "options": {"hourly": True, "lang": "zh"}, "days": 3},
        {"city": "上海", "days": 3, "unit": "C"},
    ]
    assert fill_defaults({}, {"properties": {"l": {"default": [1]}}}) == {"l": [1]}


# --- headers and secrets -----------------------------------------------------------------------

async def test_env_headers_are_sent_and_never_shown(tmp_path: Path, service: FakeWebService,
                                                    logged: list[str]) -> None:
    toolkit = load(tmp_path, [entry(service.url(), headers={
        "Authorization": "Bearer ${SVC_TOKEN}", "X-Client": "marsho"})])
    service.push(markdown("fine"))
    ok = await call(toolkit, "svc__ask", {})
    # a service that echoes the request's headers in its error page
    service.push(raw(f"denied for Bearer {SECRET}", status=403, content_type="text/plain"))
    failed = await call(toolkit, "svc__ask", {})

    assert service.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert service.requests[0].headers["x-client"] == "marsho"
    assert ok.status == "ok"
    assert failed.status == "error" and "HTTP 403" in failed.content
    assert SECRET not in failed.content and "[redacted]" in failed.content
    assert logged and not any(SECRET in line for line in logged)


async def test_a_service_whose_env_variable_is_not_set_is_not_loaded(
    tmp_path: Path, service: FakeWebService
) -> None:
    path = write_config(tmp_path, [entry(service.url(), headers={"X-Key": "${NOT_SET_ANYWHERE}"}),
                                   entry(service.url(), name="open")])
    toolkit, problems = load_webservices(path, environ={})
    assert toolkit is not None and [t.name for t in toolkit.tools] == ["svc__open"]
    [problem] = problems
    assert problem.severity == "error" and problem.path == path
    assert problem.message == ("tools[0] (ask): 'headers.X-Key' uses the environment variable "
                               "NOT_SET_ANYWHERE, which is not set")
    assert service.requests == []  # nothing sent without the secret


async def test_environment_is_read_when_the_file_is_read(tmp_path: Path, service: FakeWebService
                                                         ) -> None:
    environ = {"EARLY_KEY": "at-load"}
    path = write_config(tmp_path, [entry(service.url(), headers={"X-Key": "${EARLY_KEY}"})])
    toolkit, _ = load_webservices(path, environ=environ)
    assert toolkit is not None
    environ["EARLY_KEY"] = "changed-later"
    result = await call(toolkit, "svc__ask", {})
    assert result.status == "ok" and service.requests[0].headers["x-key"] == "at-load"


# --- charts ------------------------------------------------------------------------------------

CHART_CASES: dict[str, Answer] = {
    "bar": chart("bar", SALES, SALES_HEADERS, "月份", desc="月度销售"),
    "line": chart("line", SALES, SALES_HEADERS, "月份", desc="月度趋势"),
    "pie": chart("pie", [["苹果", 30], ["香蕉", 50], ["橙子", 20]], ["水果", "销量"], "水果",
                 desc="水果占比"),
    "candlestick": chart("candlestick", KLINE, KLINE_HEADERS, "日期", desc="K线"),
}


async def test_each_chart_type_becomes_a_png_and_a_summary(tmp_path: Path, service: FakeWebService
                                                           ) -> None:
    toolkit = load(tmp_path, [entry(service.url())])
    images: dict[str, bytes] = {}
    for chart_type, answer in CHART_CASES.items():
        service.push(answer)
        result = await call(toolkit, "svc__ask", {})
        assert result.status == "ok", result.content
        [png] = result.images
        assert_valid_png(png)
        images[chart_type] = png
        assert f"A {chart_type} chart" in result.content and "picture" in result.content
    assert len(set(images.values())) == 4  # each chart type draws something different

    service.push(CHART_CASES["bar"])
    bar = await call(toolkit, "svc__ask", {})
    assert "Description: 月度销售" in bar.content
    assert "Columns: 月份, 销售额, 成本; x axis: 月份; 4 rows." in bar.content
    assert "销售额: min 90, max 200, total 560" in bar.content
    assert "成本: min 70, max 120, total 365" in bar.content
    assert "1月 | 120 | 80" in bar.content


async def test_chart_summary_stays_compact_for_many_rows(tmp_path: Path, service: FakeWebService
                                                         ) -> None:
    toolkit = load(tmp_path, [entry(service.url())])
    rows = [{"day": f"d{i}", "visits": i} for i in range(1, 301)]
    service.push(chart("line", rows, ["day", "visits"], "day"))
    result = await call(toolkit, "svc__ask", {})
    assert result.status == "ok" and len(result.images) == 1
    assert "300 rows" in result.content and "total 45150" in result.content
    assert "… 294 more rows …" in result.content and "d300 | 300" in result.content
    assert len(result.content) < 1000


@pytest.mark.parametrize("chart_type", charts.CHART_TYPES)
def test_cjk_headers_render_without_exceptions(chart_type: str) -> None:
    data, headers, dimension = {
        "bar": (SALES, SALES_HEADERS, "月份"),
        "line": (SALES, SALES_HEADERS, "月份"),
        "pie": ([["東京", 3], ["서울", 2], ["北京", 5]], ["都市", "人口"], "都市"),
        "candlestick": (KLINE, KLINE_HEADERS, "日期"),
    }[chart_type]
    png = charts.render_chart(chart_type, data, headers, dimension, "中文标题 テスト 한국어")
    assert_valid_png(png)


def test_chart_data_shapes_are_read() -> None:
    as_lists = charts.read_table(SALES, SALES_HEADERS)
    as_objects = charts.read_table([dict(zip(SALES_HEADERS, row, strict=True)) for row in SALES], None)
    as_columns = charts.read_table({h: [row[i] for row in SALES] for i, h in enumerate(SALES_HEADERS)})
    for table in (as_lists, as_objects, as_columns):
        assert table.headers == SALES_HEADERS and table.rows == [list(r) for r in SALES]
        assert table.numeric_columns == [1, 2] and table.dimension_index(None) == 0
    # field_headers may order object rows, or give display names to their keys
    ordered = charts.read_table([{"a": 1, "b": "x"}], ["b", "a"])
    assert ordered.headers == ["b", "a"] and ordered.rows == [["x", 1]]
    renamed = charts.read_table([{"m": "1月", "v": 1}], ["月份", "值"])
    assert renamed.headers == ["月份", "值"] and renamed.rows == [["1月", 1]]
    numeric_strings = charts.read_table([["a", "1,200"], ["b", "35%"]], ["k", "v"])
    assert numeric_strings.numbers[1] == [1200.0, 35.0]
    plain = charts.read_table([3, 1, 2], ["score"])
    assert plain.headers == ["score"] and plain.dimension_index(None) is None
    for bad, reason in [([], "no rows"), ("nope", "string"), (42, "a number"),
                        ([[1], {"a": 1}], "mixes"), ({"a": 1}, "columns")]:
        with pytest.raises(charts.ChartDataError, match=reason):
            charts.read_table(bad)


def test_candlestick_columns_by_name_and_by_position() -> None:
    named = charts.read_table(KLINE, ["date", "Close", "High", "Low", "Open"])
    assert charts.candlestick_columns(named, 0) == {"open": 4, "high": 2, "low": 3, "close": 1}
    chinese = charts.read_table(KLINE, KLINE_HEADERS)
    assert charts.candlestick_columns(chinese, 0) == {"open": 1, "high": 2, "low": 3, "close": 4}
    ohlc = charts.read_table(KLINE, ["t", "a", "b", "c", "d"])
    assert charts.candlestick_columns(ohlc, 0) == {"open": 1, "high": 2, "low": 3, "close": 4}
    # ECharts' order: open, close, lowest, highest
    echarts = charts.read_table([[r[0], r[1], r[4], r[3], r[2]] for r in KLINE], ["t", "a", "b", "c", "d"])
    assert charts.candlestick_columns(echarts, 0) == {"open": 1, "close": 2, "low": 3, "high": 4}
    with pytest.raises(charts.ChartDataError, match="open, high, low and close"):
        charts.render_chart("candlestick", SALES, SALES_HEADERS, "月份", "")


def test_undrawable_data_is_a_chart_data_error() -> None:
    with pytest.raises(charts.ChartDataError, match="no numeric column"):
        charts.render_chart("bar", [["a", "b"], ["c", "d"]], ["x", "y"], "x", "")
    with pytest.raises(charts.ChartDataError, match="negative"):
        charts.render_chart("pie", [["a", -1], ["b", 2]], ["k", "v"], "k", "")
    with pytest.raises(charts.ChartDataError, match="unknown chart type"):
        charts.render_chart("radar", SALES, SALES_HEADERS, "月份", "")


def test_many_pie_slices_are_grouped_and_x_labels_thinned() -> None:
    slices = [[f"item {i}", i + 1] for i in range(40)]
    assert_valid_png(charts.render_chart("pie", slices, ["name", "n"], "name", ""))
    days = [[f"2024-01-{i:02d}", i % 7] for i in range(1, 200)]
    assert_valid_png(charts.render_chart("bar", days, ["day", "n"], "day", ""))


def test_cjk_font_is_chosen_from_installed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    charts.cjk_font_family()  # import matplotlib's font list
    from matplotlib import font_manager

    class FakeFont:
        def __init__(self, name: str) -> None:
            self.name = name

    monkeypatch.setattr(charts, "_font_searched", False)
    monkeypatch.setattr(charts, "_font_family", None)
    monkeypatch.setattr(font_manager.fontManager, "ttflist",
                        [FakeFont("DejaVu Sans"), FakeFont("SimHei"), FakeFont("Noto Sans CJK SC")])
    assert charts.cjk_font_family() == "Noto Sans CJK SC"  # earlier in the preference list

    monkeypatch.setattr(charts, "_font_searched", False)
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [FakeFont("DejaVu Sans")])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *args, **kwargs: [])  # none on disk
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}")
    try:
        assert charts.cjk_font_family() is None
        assert charts.cjk_font_family() is None
    finally:
        logger.remove(sink)
    assert len([line for line in lines if "no CJK font" in line]) == 1  # logged once


# --- bad services --------------------------------------------------------------------------------

BAD_ANSWERS: list[tuple[str, Answer, str]] = [
    ("html", raw("<html>oops</html>"), "not JSON (text/html): <html>oops</html>"),
    ("empty", raw(b"", content_type="application/json"), "not JSON (application/json): an empty body"),
    ("list", json_answer([1, 2]), "answered with a list, not a JSON object"),
    ("no type", json_answer({"data": "x", "desc": "d"}), "without 'type'"),
    ("unknown type", json_answer({"type": "html", "data": "x", "desc": "d"}), "unknown type 'html'"),
    ("no data", json_answer({"type": "markdown", "desc": "d"}), "without 'data'"),
    ("null data", json_answer({"type": "markdown", "data": None, "desc": "d"}), "'data' is null"),
    ("bad desc", json_answer({"type": "markdown", "data": "x", "desc": 5}), "'desc' that is a number"),
    ("no chart_type", json_answer({"type": "chart", "data": SALES, "desc": "d"}), "without 'chart_type'"),
    ("unknown chart_type", chart("radar", SALES, SALES_HEADERS), "unknown chart_type 'radar'"),
    ("bad headers", json_answer({"type": "chart", "chart_type": "bar", "data": SALES,
                                 "field_headers": "月份", "desc": "d"}), "'field_headers' that is a string"),
    ("chart data object", chart("bar", {"a": 1}), "cannot be drawn: 'data' is an object"),
    ("chart no numbers", chart("bar", [["a", "b"]], ["x", "y"]), "cannot be drawn: no numeric column"),
    ("chart negative pie", chart("pie", [["a", -3]], ["k", "v"]), "cannot be drawn: a pie chart"),
    ("http 500", raw("Internal trouble: db down", status=500), "HTTP 500 Internal Server Error: "
                                                               "Internal trouble: db down"),
    ("http 404 empty", raw(b"", status=404), "HTTP 404 Not Found with an empty body"),
    ("redirect", Answer(302, b"", "text/plain"), "HTTP 302"),
    ("oversized declared", raw(b"x" * 1_100_000, content_type="application/json"),
     "answered with 1100000 bytes; at most 1000000"),
    ("oversized streamed", raw(b"[" + b"1," * 600_000 + b"1]", chunked=True,
                               content_type="application/json"), "more than 1000000 bytes"),
]


@pytest.mark.parametrize(("case", "answer", "expected"), BAD_ANSWERS, ids=[c[0] for c in BAD_ANSWERS])
async def test_bad_answers_are_error_results_and_log_lines(
    case: str, answer: Answer, expected: str, tmp_path: Path, service: FakeWebService,
    logged: list[str],
) -> None:
    toolkit = load(tmp_path, [entry(service.url())])
    service.push(answer)

    result = await call(toolkit, "svc__ask", {"q": "x"})

    assert result.status == "error", result.content
    assert result.content.startswith("Error: the web service svc__ask ")
    assert expected in result.content
    assert result.images == ()
    assert any("svc__ask" in line and expected in line for line in logged)


async def test_http_error_quotes_only_the_start_of_the_body(tmp_path: Path, service: FakeWebService
                                                            ) -> None:
    toolkit = load(tmp_path, [entry(service.url())])
    service.push(raw("trouble " * 500, status=502))
    result = await call(toolkit, "svc__ask", {})
    assert result.status == "error" and "HTTP 502" in result.content
    assert len(result.content) < 500 and result.content.endswith("…")


async def test_timeout_is_an_error_result(tmp_path: Path, service: FakeWebService,
                                          logged: list[str]) -> None:
    toolkit = load(tmp_path, [entry(service.url(), timeout=0.3)])
    service.push(json_answer({"type": "markdown", "data": "late", "desc": "d"}, delay=1.5))

    result = await call(toolkit, "svc__ask", {})

    assert result.status == "error"
    assert "svc__ask did not answer within 0.3 s" in result.content
    assert any("svc__ask" in line and "0.3 s" in line for line in logged)


async def test_unreachable_service_is_an_error_result(tmp_path: Path, logged: list[str]) -> None:
    toolkit = load(tmp_path, [entry(unreachable_url() + "/x")])
    result = await call(toolkit, "svc__ask", {})
    assert result.status == "error"
    assert "svc__ask could not be reached" in result.content
    assert any("svc__ask" in line and "could not be reached" in line for line in logged)


def test_an_invalid_header_value_is_a_load_error_without_the_value(tmp_path: Path) -> None:
    path = write_config(tmp_path, [entry("http://127.0.0.1:9/", headers={"X-Key": "${BAD}"})])
    toolkit, problems = load_webservices(path, environ={"BAD": "line1\nline2-secret"})
    assert toolkit is None
    [problem] = problems
    assert problem.message.startswith("tools[0] (ask): 'headers.X-Key' holds line breaks")
    assert "line2-secret" not in str(problem)


# --- the config file ---------------------------------------------------------------------------

def test_missing_file_means_no_services(tmp_path: Path) -> None:
    assert load_webservices(tmp_path / "nothing.json") == (None, [])


@pytest.mark.parametrize(("text", "expected"), [
    ("{\n  \"tools\": [\n  }", "invalid JSON at line 3"),
    ("[]", "must be a JSON object"),
    ('{"toolkit": "a__b", "tools": []}', "'toolkit' must be"),
    ('{"toolkit": "svc"}', "'tools' is missing"),
    ('{"tools": {"name": "x"}}', "'tools' must be a list, not an object"),
])
def test_file_level_problems(tmp_path: Path, text: str, expected: str) -> None:
    path = write_config(tmp_path, [], text=text)
    toolkit, problems = load_webservices(path)
    assert toolkit is None
    [problem] = problems
    assert problem.severity == "error" and problem.path == path and expected in problem.message
    assert str(path) in str(problem)


def test_entry_problems_name_the_file_and_the_entry(tmp_path: Path) -> None:
    good = "http://127.0.0.1:1/ok"
    tools: list[Any] = [
        entry(good, name="fine", permission="admin", timeout=3),
        "not an object",
        {"description": "no name", "url": good},
        entry(good, name="two__parts"),
        entry(good, name="x" * 70),
        entry(good, name="has space"),
        {"name": "no_url", "description": "d"},
        entry("ftp://example.com/x", name="ftp"),
        entry("/relative", name="relative"),
        entry(good, name="bad_schema", parameters={"type": "object", "properties": {"a": {"type": "nope"}}}),
        entry(good, name="array_schema", parameters={"type": "array"}),
        entry(good, name="bad_timeout", timeout=0),
        entry(good, name="text_timeout", timeout="5"),
        entry(good, name="bad_permission", permission="root"),
        entry(good, name="bad_headers", headers={"X-N": 5}),
        entry(good, name="bad_header_name", headers={"Bad Header": "v"}),
        entry(good, name="fine"),
        entry(good, name="warned", headers={"X-Key": "${SVC_TOKEN}"}, method="GET",
              parameters={"type": "object", "properties": {"n": {"type": "integer", "default": "ten"}},
                          "required": ["m"]}),
        {"name": "undescribed", "url": good},
        entry(good, name="newline_header", headers={"X-A": "a\r\nInjected: 1 ${SVC_TOKEN}"}),
    ]
    path = write_config(tmp_path, tools)

    toolkit, problems = load_webservices(path, environ=ENVIRON)

    assert toolkit is not None and toolkit.name == "svc" and toolkit.path == path
    assert [t.name for t in toolkit.tools] == ["svc__fine", "svc__warned", "svc__undescribed"]
    fine = toolkit.tools[0]
    assert fine.permission == "admin" and fine.func.service.timeout == 3.0
    assert all(p.path == path and p.toolkit == "svc" for p in problems)
    errors = [p.message for p in problems if p.severity == "error"]
    warnings = [p.message for p in problems if p.severity == "warning"]
    expected_errors = [
        "tools[1]: must be a JSON object, not a string",
        "tools[2]: 'name' is missing",
        "tools[3] (two__parts): 'name' must not contain '__'",
        f"tools[4] ({'x' * 70}): 'name' must be 1-64 letters, digits",
        "tools[5] (has space): 'name' must be 1-64 letters, digits",
        "tools[6] (no_url): 'url' is missing",
        "tools[7] (ftp): 'url' must be an http:// or https://",
        "tools[8] (relative): 'url' must be",
        "tools[9] (bad_schema): 'parameters' is not a valid JSON Schema at properties/a/type",
        "tools[10] (array_schema): 'parameters' must be a schema of type \"object\"",
        "tools[11] (bad_timeout): 'timeout' must be a number of seconds",
        "tools[12] (text_timeout): 'timeout' must be",
        "tools[13] (bad_permission): 'permission' must be one of 'everyone', 'admin' or 'superuser'",
        "tools[14] (bad_headers): 'headers.X-N' must be a string",
        "tools[15] (bad_header_name): 'headers.Bad Header' is not a valid HTTP header name",
        "tools[16] (fine): a service of this name is already defined",
        "tools[19] (newline_header): 'headers.X-A' holds line breaks",
    ]
    assert len(errors) == len(expected_errors), errors
    for message, expected in zip(errors, expected_errors, strict=True):
        assert message.startswith(expected), (message, expected)
    assert any(w.startswith("tools[17] (warned): unknown key 'method'") for w in warnings)
    assert any(w.startswith("tools[17] (warned): 'required' names 'm'") for w in warnings)
    assert any(w.startswith("tools[17] (warned): the default of 'n'") for w in warnings)
    assert any(w.startswith("tools[18] (undescribed): no 'description'") for w in warnings)
    assert not any("SVC_TOKEN" in w for w in warnings)  # it is set
    assert len(warnings) == 4, warnings


def test_default_toolkit_name_and_empty_list(tmp_path: Path) -> None:
    path = write_config(tmp_path, [], text='{"tools": [{"name": "n", "description": "d", '
                        '"url": "https://example.com/x"}]}')
    toolkit, problems = load_webservices(path)
    assert problems == [] and toolkit is not None
    assert [t.name for t in toolkit.tools] == ["services__n"]
    assert toolkit.tools[0].parameters == {"type": "object", "properties": {}}

    toolkit, problems = load_webservices(write_config(tmp_path, [], text='{"tools": []}'))
    assert toolkit is None and [p.severity for p in problems] == ["warning"]


def test_charts_use_a_font_that_has_the_cjk_characters() -> None:
    """With a CJK font on the machine (CI installs fonts-wqy-microhei), chart text is legible:
    the font chosen has glyphs for the Chinese headers, even if it was installed after
    matplotlib built its font cache."""
    import os

    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font

    from nonebot_plugin_marsho.tools import charts

    family = charts.cjk_font_family()
    if family is None:
        if os.environ.get("MARSHO_REQUIRE_CJK_FONT") == "1":
            pytest.fail("no CJK font found, but .ci/run installed one")
        pytest.skip("no CJK font installed (apt-get install fonts-wqy-microhei)")
    font = FT2Font(findfont(FontProperties(family=family), fallback_to_default=False))
    assert all(font.get_char_index(ord(char)) for char in "月份销量图表")
    png = charts.render_chart("bar", [["一月", 10], ["二月", 20]], ["月份", "销量"], "月份", "销量")
    assert png.startswith(b"\x89PNG")
