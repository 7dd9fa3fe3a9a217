"""Chart answers of web services (the web-service contract: POST JSON, answer markdown or a chart)
→ a PNG for the chat, and a text summary for the model.

`read_table` turns the service's `data` (rows as lists or objects, or columns as an object) and
`field_headers` into a `ChartTable`, raising `ChartDataError` with a readable reason when it cannot;
`summarize_chart` is what the model reads; `render_chart` draws bar, pie, line or candlestick
charts with matplotlib's Agg canvas (no GUI, no pyplot), with a CJK-capable font when one is
installed. Rendering is synchronous and CPU-bound: from async code, run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
import textwrap
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..fileformat import json_type
from ..redaction import logger

CHART_TYPES: tuple[str, ...] = ("bar", "pie", "line", "candlestick")

WIDTH_INCHES, HEIGHT_INCHES, DPI = 8.0, 5.0, 100
"""800 × 500 pixels."""

MAX_ROWS = 5000
"""Rows beyond this are not drawn (the summary still says how many there were)."""

MAX_COLUMNS = 50
MAX_PIE_SLICES = 12
MAX_TICKS = 20
SUMMARY_ROWS = 5

CJK_FONT_FAMILIES: tuple[str, ...] = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR",
    "Noto Sans SC", "Noto Sans TC", "Noto Sans JP", "Noto Serif CJK SC",
    "Source Han Sans SC", "Source Han Sans CN", "Source Han Sans", "Source Han Serif SC",
    "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei Mono",
    "Sarasa Gothic SC", "Microsoft YaHei", "SimHei", "PingFang SC", "Hiragino Sans GB",
    "Heiti SC", "STHeiti", "SimSun", "AR PL UMing CN", "AR PL UKai CN", "Droid Sans Fallback",
    "Unifont",
)
"""Installed families tried in this order for Chinese, Japanese and Korean text."""

_CJK_NAME_HINT = re.compile(r"CJK|Han Sans|Han Serif|WenQuanYi|YaHei|Hei|Song|Ming|Kai|Fallback",
                            re.IGNORECASE)

FALLBACK_FAMILY = "DejaVu Sans"


class ChartDataError(ValueError):
    """The chart data cannot be drawn; the message says why, for the model to relay."""


@dataclass
class ChartTable:
    """The data as a table: column names, rows of cells, and each column's numbers (or None)."""

    headers: list[str]
    rows: list[list[Any]]

    def __post_init__(self) -> None:
        self.numbers: list[list[float | None]] = [
            [_number(row[i]) for row in self.rows] for i in range(len(self.headers))
        ]

    def is_numeric(self, index: int) -> bool:
        """True when every non-empty cell of the column is a number, and there is one."""
        cells = [row[index] for row in self.rows]
        values = self.numbers[index]
        present = [v for c, v in zip(cells, values, strict=True) if c not in (None, "")]
        return bool(present) and all(v is not None for v in present)

    @property
    def numeric_columns(self) -> list[int]:
        return [i for i in range(len(self.headers)) if self.is_numeric(i)]

    def find(self, name: str | None) -> int | None:
        """The index of the column named `name` (exactly, then ignoring case and spaces)."""
        if not name:
            return None
        if name in self.headers:
            return self.headers.index(name)
        folded = _fold(name)
        for i, header in enumerate(self.headers):
            if _fold(header) == folded:
                return i
        return None

    def dimension_index(self, dimension: str | None) -> int | None:
        """The x-axis column: the one `dimension` names, else the first non-numeric column,
        else the first column when there are others to plot; None means "row number"."""
        found = self.find(dimension)
        if found is not None:
            return found
        for i in range(len(self.headers)):
            if not self.is_numeric(i):
                return i
        return 0 if len(self.headers) > 1 else None


def _fold(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", str(text)).casefold()


def _number(value: Any) -> float | None:
    """A cell as a finite float: numbers and numeric strings ("1,234.5", "12%"); else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(",", "").replace("_", "")
        if text.endswith("%"):
            text = text[:-1]
        try:
            number = float(text)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def read_table(data: Any, field_headers: Sequence[Any] | None = None) -> ChartTable:
    """The service's `data` as a table.

    Accepted: a list of rows (lists, with `field_headers` naming the columns; or objects, whose
    keys are the columns, ordered as `field_headers` when it names them); an object of columns
    ({"月份": [...], "销量": [...]}); a list of plain numbers (one column). A JSON string holding
    one of those is read too.
    """
    if isinstance(data, str):
        data = _json_data(data)
    headers_given = [str(h) for h in field_headers] if isinstance(field_headers, (list, tuple)) else []
    if isinstance(data, Mapping):
        headers, rows = _read_columns(data)
    elif isinstance(data, list):
        headers, rows = _read_rows(data, headers_given)
    else:
        raise ChartDataError(
            f"'data' must be a list of rows or an object of columns, not {json_type(data)}"
        )
    if len(headers) > MAX_COLUMNS:
        raise ChartDataError(f"'data' has {len(headers)} columns; at most {MAX_COLUMNS} can be drawn")
    return ChartTable(headers=_distinct(headers), rows=rows)


_Shape = tuple[list[str], list[list[Any]]]
"""Headers and rows, as one of the shapes of `data` reads."""


def _json_data(text: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        raise ChartDataError("'data' is a string, not rows of chart data") from None


def _read_columns(data: Mapping[Any, Any]) -> _Shape:
    """{"月份": [...], "销量": [...]}: shorter columns are padded with None."""
    columns = {str(k): v for k, v in data.items()}
    if not columns or not all(isinstance(v, list) for v in columns.values()):
        raise ChartDataError("'data' is an object but not one of columns (each a list of values)")
    length = max(len(v) for v in columns.values())
    names = list(columns)
    rows = [[columns[n][i] if i < len(columns[n]) else None for n in names] for i in range(length)]
    return names, rows


def _read_rows(data: list[Any], headers_given: list[str]) -> _Shape:
    """A list whose rows are all objects, all lists, or all plain values."""
    if not data:
        raise ChartDataError("'data' has no rows")
    if all(isinstance(row, Mapping) for row in data):
        return _read_object_rows(data, headers_given)
    if all(isinstance(row, (list, tuple)) for row in data):
        return _read_list_rows(data, headers_given)
    if all(not isinstance(row, (list, tuple, Mapping)) for row in data):
        return headers_given[:1] or ["value"], [[value] for value in data]
    raise ChartDataError("'data' mixes rows of different kinds (lists, objects, values)")


def _read_object_rows(data: list[Mapping[Any, Any]], headers_given: list[str]) -> _Shape:
    """Objects' keys are the columns, in the order `headers_given` names them when it names them
    all; when it names as many columns as there are keys but different ones, it gives the keys'
    display names, in order."""
    keys = _keys_in_order(data)
    if headers_given and all(h in keys for h in headers_given):
        headers = headers_given + [k for k in keys if k not in headers_given]
    else:
        headers = keys
    rows = [[{str(k): v for k, v in row.items()}.get(h) for h in headers] for row in data]
    if headers_given and len(headers_given) == len(keys) and headers == keys \
            and headers_given != keys:
        headers = headers_given  # display names for the keys, in order
    return headers, rows


def _keys_in_order(data: list[Mapping[Any, Any]]) -> list[str]:
    """Every key of the objects, as text, in the order it first appears."""
    keys: list[str] = []
    for row in data:
        for key in row:
            if str(key) not in keys:
                keys.append(str(key))
    return keys


def _read_list_rows(data: list[Sequence[Any]], headers_given: list[str]) -> _Shape:
    """Rows as lists, padded with None to the widest; unnamed columns are "column N"."""
    width = max(len(row) for row in data)
    if width == 0:
        raise ChartDataError("'data' rows are empty")
    headers = headers_given[:width] + [
        f"column {i + 1}" for i in range(len(headers_given), width)
    ]
    rows = [list(row) + [None] * (width - len(row)) for row in data]
    return headers, rows


def _distinct(headers: list[str]) -> list[str]:
    """The headers with repeats numbered ("x", "x (2)"): the same name twice would make columns
    indistinguishable."""
    seen: dict[str, int] = {}
    named: list[str] = []
    for header in headers:
        if header in seen:
            seen[header] += 1
            named.append(f"{header} ({seen[header]})")
        else:
            seen[header] = 1
            named.append(header)
    return named


# --- candlesticks ------------------------------------------------------------------------------

_OHLC_NAMES: dict[str, tuple[str, ...]] = {
    "open": ("open", "opening", "openprice", "o", "开盘", "开盘价", "今开", "开", "始値", "시가"),
    "high": ("high", "highest", "highprice", "max", "h", "最高", "最高价", "高", "高値", "고가"),
    "low": ("low", "lowest", "lowprice", "min", "l", "最低", "最低价", "低", "安値", "저가"),
    "close": ("close", "closing", "closeprice", "adjclose", "c", "收盘", "收盘价", "收", "終値", "종가"),
}


def _ohlc_by_name(table: ChartTable, candidates: list[int]) -> dict[str, int] | None:
    found: dict[str, int] = {}
    for role, names in _OHLC_NAMES.items():
        for i in candidates:
            folded = _fold(table.headers[i])
            if i not in found.values() and (folded in names or any(
                len(n) >= 2 and not n.isascii() and n in folded for n in names
            ) or re.search(rf"\b{role}\b", table.headers[i], re.IGNORECASE)):
                found[role] = i
                break
    return found if len(found) == 4 else None


def candlestick_columns(table: ChartTable, x_index: int | None) -> dict[str, int]:
    """Which columns hold open, high, low and close.

    By name first (open/high/low/close, 开盘/最高/最低/收盘...). Otherwise the first four numeric
    columns by position: in OHLC order (open, high, low, close) when the second is each row's
    highest and the third its lowest, else in ECharts' order (open, close, low, high) when that
    fits, else OHLC.
    """
    candidates = [i for i in table.numeric_columns if i != x_index]
    named = _ohlc_by_name(table, candidates)
    if named:
        return named
    if len(candidates) < 4:
        raise ChartDataError(
            "a candlestick chart needs open, high, low and close columns; found "
            f"{len(candidates)} numeric column(s) besides the x axis ({', '.join(table.headers)})"
        )
    a, b, c, d = candidates[:4]
    rows = list(zip(*(table.numbers[i] for i in (a, b, c, d)), strict=True))
    complete = [r for r in rows if None not in r]

    def fits(high: int, low: int) -> bool:
        return bool(complete) and all(
            r[high] >= max(r) and r[low] <= min(r) for r in complete  # type: ignore[type-var]
        )

    if not fits(1, 2) and fits(3, 2):
        return {"open": a, "close": b, "low": c, "high": d}
    return {"open": a, "high": b, "low": c, "close": d}


# --- summary for the model ---------------------------------------------------------------------

def _fmt(value: float) -> str:
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else f"{value:.4g}"


def _cell(value: Any, limit: int = 40) -> str:
    text = _label(value).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summarize_chart(
    chart_type: str, table: ChartTable, dimension: str | None, desc: str = ""
) -> str:
    """A compact text for the model: columns, row count, min/max/total per numeric column, and a
    few rows (the first ones and the last)."""
    x_index = table.dimension_index(dimension)
    x_name = table.headers[x_index] if x_index is not None else "(row number)"
    lines = [f"A {chart_type} chart was drawn from this data and is shown to the user as a picture "
             "beside your answer."]
    if desc:
        lines.append(f"Description: {desc}")
    lines.append(f"Columns: {', '.join(table.headers)}; x axis: {x_name}; {len(table.rows)} rows.")
    for i in table.numeric_columns:
        if i == x_index:
            continue
        values = [v for v in table.numbers[i] if v is not None]
        if values:
            lines.append(f"{table.headers[i]}: min {_fmt(min(values))}, max {_fmt(max(values))}, "
                         f"total {_fmt(math.fsum(values))}")
    shown = table.rows[:SUMMARY_ROWS]
    lines.append(" | ".join(_cell(h) for h in table.headers))
    lines.extend(" | ".join(_cell(c) for c in row) for row in shown)
    if len(table.rows) > SUMMARY_ROWS + 1:
        lines.append(f"… {len(table.rows) - SUMMARY_ROWS - 1} more rows …")
    if len(table.rows) > SUMMARY_ROWS:
        lines.append(" | ".join(_cell(c) for c in table.rows[-1]))
    return "\n".join(lines)


# --- rendering ---------------------------------------------------------------------------------

_lock = threading.RLock()
_font_family: str | None = None
_font_searched = False


def _matplotlib() -> Any:
    """Import matplotlib on first use, with the headless Agg backend."""
    import sys

    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # before pyplot, should anything import it later
    return matplotlib


_CJK_FILE_HINT = re.compile(
    r"wqy|noto.*cjk|sourcehan|source-han|droidsansfallback|simhei|simsun|msyh|msjh|pingfang"
    r"|hiragino|notosanssc|notosanstc|notosansjp|notosanskr|ukai|uming|arphic",
    re.IGNORECASE,
)


def _known_cjk_family(font_manager: Any) -> str | None:
    installed = {font.name for font in font_manager.fontManager.ttflist}
    for family in CJK_FONT_FAMILIES:
        if family in installed:
            return family
    hinted = sorted(name for name in installed if _CJK_NAME_HINT.search(name))
    return hinted[0] if hinted else None


def cjk_font_family() -> str | None:
    """The installed CJK-capable font family charts use, or None (logged once) if there is none."""
    global _font_family, _font_searched
    with _lock:
        if _font_searched:
            return _font_family
        _font_searched = True
        _matplotlib()
        from matplotlib import font_manager

        _font_family = _known_cjk_family(font_manager)
        if _font_family is None:
            # matplotlib lists fonts from a cache built when it first ran: a CJK font installed
            # since is not in it. Scan the system's font folders for one and add it.
            for path in font_manager.findSystemFonts():
                if _CJK_FILE_HINT.search(Path(path).name):
                    with contextlib.suppress(Exception):
                        font_manager.fontManager.addfont(path)
            _font_family = _known_cjk_family(font_manager)
        if _font_family is None:
            logger.warning(
                "marsho: no CJK font is installed (looked for Noto Sans CJK, Source Han, WenQuanYi, "
                "Microsoft YaHei, SimHei, PingFang...); Chinese, Japanese and Korean text in charts "
                f"may not render and {FALLBACK_FAMILY} is used. Install one, e.g. "
                "`apt install fonts-noto-cjk` or `fonts-wqy-microhei`."
            )
        else:
            logger.debug(f"marsho: charts use the font {_font_family}")
        return _font_family


def _ticks(ax: Any, labels: list[str]) -> None:
    """Label at most MAX_TICKS positions (fewer when labels are long), slanted when crowded."""
    n = len(labels)
    long = any(len(label) > 6 for label in labels)
    step = max(1, math.ceil(n / (MAX_TICKS * 3 // 5 if long else MAX_TICKS)))
    positions = list(range(0, n, step))
    ax.set_xticks(positions)
    slant = long or len(positions) > 10
    ax.set_xticklabels([_cell(labels[i], 24) for i in positions],
                       rotation=30 if slant else 0, ha="right" if slant else "center")


@dataclass
class _Plot:
    """What each chart type draws from: the axes, the rows drawn (`n`), the x axis and the
    numeric columns besides it (`series`)."""

    ax: Any
    table: ChartTable
    n: int
    x_index: int | None
    x_labels: list[str]
    x_name: str
    series: list[int]
    title: str


def _draw(fig: Any, chart_type: str, table: ChartTable, dimension: str | None, title: str) -> None:
    ax = fig.add_subplot()
    rows = table.rows[:MAX_ROWS]
    n = len(rows)
    x_index = table.dimension_index(dimension)
    x_labels = [_label(row[x_index]) for row in rows] if x_index is not None \
        else [str(i + 1) for i in range(n)]
    x_name = table.headers[x_index] if x_index is not None else ""
    series = [i for i in table.numeric_columns if i != x_index]
    if title:
        ax.set_title("\n".join(textwrap.wrap(title, 60)[:2]))
    plot = _Plot(ax, table, n, x_index, x_labels, x_name, series, title)
    if chart_type != "candlestick" and not series:  # a candlestick says which columns it lacks
        raise ChartDataError(f"no numeric column to plot (columns: {', '.join(table.headers)})")
    _DRAWERS[chart_type](plot)


def _draw_candlestick(plot: _Plot) -> None:
    ax, table = plot.ax, plot.table
    cols = candlestick_columns(table, plot.x_index)
    color_up, color_down = "#d62728", "#2ca02c"  # red rises, green falls (as in China)
    for i in range(plot.n):
        o, h, lo, c = (table.numbers[cols[k]][i] for k in ("open", "high", "low", "close"))
        if None in (o, h, lo, c):
            continue
        color = color_up if c >= o else color_down  # type: ignore[operator]
        ax.vlines(i, lo, h, color=color, linewidth=1, zorder=1)
        height = abs(c - o) or (h - lo) * 0.002 or 0.001  # type: ignore[operator]
        ax.bar(i, height, bottom=min(o, c), width=0.6, color=color,  # type: ignore[type-var]
               edgecolor=color, zorder=2)
    ax.set_xlim(-0.8, plot.n - 0.2)
    _ticks(ax, plot.x_labels)
    ax.set_xlabel(plot.x_name)
    ax.set_ylabel(" / ".join(table.headers[cols[k]] for k in ("open", "high", "low", "close")))
    ax.grid(axis="y", alpha=0.3)


def _pie_slices(plot: _Plot, column: int) -> list[tuple[str, float]]:
    """The column's positive values with their labels; beyond MAX_PIE_SLICES, the smallest are
    one "other" slice."""
    table = plot.table
    values = table.numbers[column]
    pairs = [(label, v) for i, label in enumerate(plot.x_labels) if (v := values[i]) is not None]
    if any(v < 0 for _, v in pairs):
        raise ChartDataError(f"a pie chart cannot show negative values ({table.headers[column]})")
    pairs = [(label, v) for label, v in pairs if v > 0]
    if not pairs:
        raise ChartDataError(f"a pie chart needs positive values; {table.headers[column]} has none")
    if len(pairs) > MAX_PIE_SLICES:
        pairs.sort(key=lambda p: p[1], reverse=True)
        rest = pairs[MAX_PIE_SLICES - 1:]
        pairs = pairs[: MAX_PIE_SLICES - 1] + [(f"other ({len(rest)})",
                                                math.fsum(v for _, v in rest))]
    return pairs


def _draw_pie(plot: _Plot) -> None:
    ax = plot.ax
    column = plot.series[0]
    pairs = _pie_slices(plot, column)
    # labels go in the legend: on the wedges, small slices' labels collide
    wedges = ax.pie(
        [v for _, v in pairs], autopct=lambda pct: f"{pct:.1f}%" if pct >= 3 else "",
        startangle=90, counterclock=False, pctdistance=0.75,
    )[0]
    ax.axis("equal")
    ax.legend(wedges, [_cell(label, 30) for label, _ in pairs], title=plot.x_name or None,
              loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    if not plot.title:
        ax.set_title(plot.table.headers[column])


def _draw_bars(plot: _Plot) -> None:
    ax, table, series = plot.ax, plot.table, plot.series
    positions = list(range(plot.n))
    width = 0.8 / len(series)
    for k, column in enumerate(series):
        offset = (k - (len(series) - 1) / 2) * width
        heights = [v if v is not None else 0.0 for v in table.numbers[column][:plot.n]]
        ax.bar([p + offset for p in positions], heights, width=width, label=table.headers[column])
    ax.axhline(0, color="black", linewidth=0.6)
    _label_series_axes(plot)


def _draw_lines(plot: _Plot) -> None:
    positions = list(range(plot.n))
    for column in plot.series:
        values = [v if v is not None else math.nan for v in plot.table.numbers[column][:plot.n]]
        plot.ax.plot(positions, values, marker="o" if plot.n <= 40 else None, markersize=4,
                     label=plot.table.headers[column])
    _label_series_axes(plot)


def _label_series_axes(plot: _Plot) -> None:
    """Bars' and lines' x ticks, axis names (the one series names the y axis; several, a
    legend) and grid."""
    ax = plot.ax
    _ticks(ax, plot.x_labels)
    ax.set_xlabel(plot.x_name)
    if len(plot.series) == 1:
        ax.set_ylabel(plot.table.headers[plot.series[0]])
    else:
        ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)


_DRAWERS = {
    "bar": _draw_bars,
    "pie": _draw_pie,
    "line": _draw_lines,
    "candlestick": _draw_candlestick,
}
"""How each of CHART_TYPES is drawn."""


def render_table(chart_type: str, table: ChartTable, dimension: str | None, title: str = "") -> bytes:
    """Draw an already-read table; see `render_chart`."""
    if chart_type not in CHART_TYPES:
        raise ChartDataError(f"unknown chart type {chart_type!r}; expected one of {', '.join(CHART_TYPES)}")
    matplotlib = _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    family = cjk_font_family()
    fonts = [family, FALLBACK_FAMILY] if family else [FALLBACK_FAMILY]
    with _lock, matplotlib.rc_context({
        "font.family": "sans-serif",
        "font.sans-serif": fonts,
        "axes.unicode_minus": False,  # CJK fonts often lack U+2212
    }), warnings.catch_warnings():
        # without a CJK font every missing glyph warns; that was logged once already
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        fig = Figure(figsize=(WIDTH_INCHES, HEIGHT_INCHES), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        _draw(fig, chart_type, table, dimension, title)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI)
        return buffer.getvalue()


def render_chart(
    chart_type: str,
    rows: Any,
    field_headers: Sequence[Any] | None,
    dimension: str | None,
    title: str = "",
) -> bytes:
    """A PNG (800 × 500) of the chart: `rows` as `read_table` accepts them, `dimension` naming the
    x-axis column (the pie's slice labels), headers as axis labels and legend.

    Raises ChartDataError when the data cannot make this chart. Blocking: from async code, run
    it in a worker thread.
    """
    return render_table(chart_type, read_table(rows, field_headers), dimension, title)
