"""Answers going out: long answers cut into chat-sized chunks, formulas and image links found, and
formulas drawn as pictures.

- `split_paragraphs` cuts an answer at paragraph boundaries first, then at line ends, sentence ends,
  spaces, and only then hard; a fenced code block is never cut unless it alone is too long, and then
  every piece is fenced again, so each chunk is valid markdown on its own.
- `find_rich` splits an answer into text, LaTeX formulas and markdown images, leaving code alone.
- `render_formula` draws a formula as a PNG with matplotlib's mathtext (its Agg rasteriser; no
  pyplot, no figure, no global state), or returns None when mathtext cannot read it.

Pure functions: nothing here imports NoneBot.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FormulaPart",
    "ImageLinkPart",
    "MAX_FORMULA_CHARS",
    "Part",
    "TextPart",
    "find_rich",
    "render_formula",
    "split_paragraphs",
]

# --- code fences (shared by both halves) --------------------------------------------------------

_FENCE_OPEN = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Fence:
    """A fenced code block: [start, end) in the text, end at the end of its closing line (or of
    the text, when it is never closed)."""

    start: int
    end: int
    fence: str  # the opening run of backticks or tildes
    open_line: str  # the opening line, indentation dropped
    body_start: int  # where the code starts (after the opening line's newline)
    body_end: int  # where the code ends (before the closing line), == end when unclosed
    closed: bool


def _lines(text: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    """(start, end) of every line of text[start:end], the newline excluded."""
    stop = len(text) if end is None else end
    position = start
    while position < stop:
        newline = text.find("\n", position, stop)
        if newline < 0:
            yield position, stop
            return
        yield position, newline
        position = newline + 1


def code_fences(text: str) -> list[Fence]:
    """The fenced code blocks of a markdown text, in order."""
    found: list[Fence] = []
    lines = list(_lines(text))
    index = 0
    while index < len(lines):
        start, end = lines[index]
        match = _FENCE_OPEN.match(text, start, end)
        if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
            index += 1
            continue
        fence = match["fence"]
        closing = re.compile(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t\r]*$")
        body_start = min(end + 1, len(text))
        for later in range(index + 1, len(lines)):
            line_start, line_end = lines[later]
            if closing.match(text, line_start, line_end):
                found.append(Fence(start, line_end, fence, text[start:end].lstrip(" "),
                                    body_start, line_start, True))
                index = later + 1
                break
        else:
            found.append(Fence(start, len(text), fence, text[start:end].lstrip(" "),
                                body_start, len(text), False))
            index = len(lines)
    return found


# --- splitting ----------------------------------------------------------------------------------

_ASCII_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s)")
_CJK_SENTENCE_END = re.compile(r"(?:[。！？]|…+)[”’」』）》]*")
_SPACE = re.compile(r"\s+")


def _strip_span(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cut_points(text: str, start: int, end: int, level: int) -> list[tuple[int, int]]:
    """text[start:end] cut into consecutive spans covering it: at line ends (level 0), sentence
    ends (1), runs of whitespace (2)."""
    if level == 0:
        return list(_lines(text, start, end))
    cuts: list[int] = []
    if level == 1:
        for pattern in (_ASCII_SENTENCE_END, _CJK_SENTENCE_END):
            cuts.extend(match.end() for match in pattern.finditer(text, start, end))
    else:
        cuts.extend(match.start() for match in _SPACE.finditer(text, start, end))
    bounds = [start, *sorted(c for c in set(cuts) if start < c < end), end]
    return list(zip(bounds, bounds[1:], strict=False))


def _split_span(text: str, start: int, end: int, limit: int, level: int = 0) -> list[str]:
    """text[start:end] as stripped chunks of at most `limit` characters, cut as late as possible
    at the coarsest boundary that works."""
    start, end = _strip_span(text, start, end)
    if start == end:
        return []
    if end - start <= limit:
        return [text[start:end]]
    if level > 2:  # hard cuts
        chunks = []
        for position in range(start, end, limit):
            piece = text[position:min(position + limit, end)].strip()
            if piece:
                chunks.append(piece)
        return chunks
    spans = _cut_points(text, start, end, level)
    if len(spans) <= 1:
        return _split_span(text, start, end, limit, level + 1)
    return _pack(text, spans, limit, lambda s, e: _split_span(text, s, e, limit, level + 1))


def _pack(text: str, spans: list[tuple[int, int]], limit: int, too_long: Any) -> list[str]:
    """Greedily join consecutive spans (their original text between them kept) into chunks of at
    most `limit` stripped characters; a span too long on its own goes to `too_long(start, end)`."""
    chunks: list[str] = []
    current: tuple[int, int] | None = None
    for span_start, span_end in spans:
        if current is not None:
            joined = _strip_span(text, current[0], span_end)
            if joined[1] - joined[0] <= limit:
                current = (current[0], span_end)
                continue
            _append_stripped(chunks, text[current[0]:current[1]])
            current = None
        size = _strip_span(text, span_start, span_end)
        if size[1] - size[0] <= limit:
            current = (span_start, span_end)
        else:
            chunks.extend(too_long(span_start, span_end))
    if current is not None:
        _append_stripped(chunks, text[current[0]:current[1]])
    return chunks


def _append_stripped(chunks: list[str], piece: str) -> None:
    piece = piece.strip()
    if piece:
        chunks.append(piece)


def _split_fence(text: str, fence: Fence, limit: int) -> list[str]:
    """A code block too long for one chunk, as several blocks each fenced again."""
    opening = fence.open_line.rstrip()
    closing = fence.fence
    room = limit - len(opening) - len(closing) - 2  # two newlines
    if room < 8:  # no space for fences: cut it like prose
        return _split_span(text, fence.start, fence.end, limit)
    pieces: list[str] = []
    lines: list[str] = []
    size = -1

    def flush() -> None:
        nonlocal lines, size
        body = "\n".join(lines).rstrip()
        if body.strip():
            pieces.append(f"{opening}\n{body}\n{closing}")
        lines, size = [], -1

    for line_start, line_end in _lines(text, fence.body_start, fence.body_end):
        line = text[line_start:line_end].rstrip()
        while len(line) > room:  # a line longer than a whole chunk: hard cut
            flush()
            lines, size = [line[:room]], room
            flush()
            line = line[room:]
        if size + 1 + len(line) > room:
            flush()
        lines.append(line)
        size += 1 + len(line)
    flush()
    return pieces


def split_paragraphs(text: str, max_chars: int) -> list[str]:
    """Cut a long answer into chunks of at most max_chars characters.

    Cut at paragraph boundaries (blank lines) first; a paragraph longer than max_chars is cut at
    line ends, then at sentence ends (. ! ? followed by a space; 。！？… anywhere), then at spaces,
    then hard. A fenced code block (``` or ~~~) is never cut unless it alone is longer than
    max_chars; then it is cut at line ends and every piece is fenced again (same opening line,
    language included), so each chunk is valid markdown. Chunks are stripped and never empty;
    joining them with blank lines loses no non-whitespace character (re-fencing only adds).
    A text whose stripped length is at most max_chars comes back as one chunk, stripped ([] when
    it is blank).
    """
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    stripped = text.strip()
    if len(stripped) <= max_chars:
        return [stripped] if stripped else []
    fences = {fence.start: fence for fence in code_fences(text)}
    # units: paragraphs (runs of non-blank lines) and whole code blocks, as spans of the text
    units: list[tuple[int, int, Fence | None]] = []
    paragraph: tuple[int, int] | None = None
    skip_to = 0
    for line_start, line_end in _lines(text):
        if line_start < skip_to:
            continue
        fence = fences.get(line_start)
        if fence is not None:
            if paragraph is not None:
                units.append((*paragraph, None))
                paragraph = None
            units.append((fence.start, fence.end, fence))
            skip_to = fence.end
            continue
        if not text[line_start:line_end].strip():
            if paragraph is not None:
                units.append((*paragraph, None))
                paragraph = None
            continue
        paragraph = (paragraph[0] if paragraph else line_start, line_end)
    if paragraph is not None:
        units.append((*paragraph, None))
    by_span = {(start, end): fence for start, end, fence in units}

    def too_long(start: int, end: int) -> list[str]:
        fence = by_span.get((start, end))
        if fence is not None:
            return _split_fence(text, fence, max_chars)
        return _split_span(text, start, end, max_chars)

    return _pack(text, [(start, end) for start, end, _ in units], max_chars, too_long)


# --- formulas and images in an answer -----------------------------------------------------------


@dataclass(frozen=True)
class TextPart:
    """Plain text (markdown included) between the rich parts."""

    text: str

    @property
    def raw(self) -> str:
        """The text itself: every part has a `raw`, so "".join(p.raw for p in parts) is the input."""
        return self.text


@dataclass(frozen=True)
class FormulaPart:
    """A LaTeX formula: `source` without its delimiters (stripped), `raw` with them."""

    source: str
    display: bool
    raw: str


@dataclass(frozen=True)
class ImageLinkPart:
    """A markdown image ![alt](url), http(s) only; a title after the URL is dropped."""

    alt: str
    url: str
    raw: str


Part = TextPart | FormulaPart | ImageLinkPart

_URL = r"https?://[^\s<>()]+(?:\([^\s<>()]*\)[^\s<>()]*)*"
_IMAGE = re.compile(
    r"!\[(?P<alt>[^\[\]\n]*(?:\[[^\[\]\n]*\][^\[\]\n]*)*)\]"
    r"\([ \t]*(?:<(?P<angled>" + _URL + r")>|(?P<url>" + _URL + r"))"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?[ \t]*\)",
    re.IGNORECASE,
)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_MONEY = re.compile(r"\d[\d.,]*\s")


def _find_closing(text: str, start: int, stop: int, closing: str) -> int:
    """Index of `closing` in text[start:stop], skipping backslash-escaped characters; -1 if none."""
    position = start
    while position < stop:
        if text.startswith(closing, position) and position + len(closing) <= stop:
            return position
        position += 2 if text[position] == "\\" else 1
    return -1


def _paragraph_end(text: str, start: int, fence_start: int) -> int:
    """Where a formula starting at `start` must close by: the next blank line or code block."""
    blank = _BLANK_LINE.search(text, start)
    end = blank.start() if blank else len(text)
    return min(end, fence_start)


def _code_span_end(text: str, start: int, stop: int) -> int:
    """End of the `inline code` span opening at `start` and closing before `stop`, or the end of
    its backtick run when it does not close (the backticks are then plain text)."""
    run = start
    while run < len(text) and text[run] == "`":
        run += 1
    width = run - start
    position = run
    while True:
        found = text.find("`" * width, position, stop)
        if found < 0:
            return run
        after = found + width
        if after < len(text) and text[after] == "`":  # a longer run: not the closing one
            while after < len(text) and text[after] == "`":
                after += 1
            position = after
            continue
        return after


def find_rich(text: str, *, inline_formulas: bool = False) -> list[Part]:
    """Split an answer into text, LaTeX formulas and markdown images.

    Display formulas: $$...$$ and \\[...\\], which may span lines but not a blank line. Inline
    formulas $...$ and \\(...\\) only with inline_formulas=True; $...$ then must not look like money:
    no space just inside either delimiter, the closing $ not followed by a digit, and not a number
    and a space right after the opening $ ("$5 and $10" is text). Images: ![alt](url) with an
    http(s) URL (optionally in <>), a quoted title after it allowed and ignored. Escaped
    delimiters (\\$), fenced code blocks and `inline code` are left alone. Adjacent text is one
    TextPart, and "".join(part.raw for part in parts) is the input exactly.
    """
    parts: list[Part] = []
    fences = code_fences(text)
    scan = _Scan(text, inline_formulas, [fence.start for fence in fences])
    pending = 0
    position = 0
    length = len(text)
    upcoming = 0  # the first fence that may start at `position` or later
    while position < length:
        while upcoming < len(fences) and fences[upcoming].start < position:
            upcoming += 1  # (a fence something before it ran over is read as text)
        fence_start = fences[upcoming].start if upcoming < len(fences) else length
        # the next character a reader starts at, before the next fence (one search, not a
        # step per character: most of an answer is plain text)
        found = _READER_START.search(text, position, fence_start)
        if found is None:
            if fence_start == length:
                break
            position = fences[upcoming].end
            continue
        position = found.start()
        part, end = _READERS[text[position]](scan, position)
        if part is not None:
            if pending < position:
                parts.append(TextPart(text[pending:position]))
            parts.append(part)
            pending = end
        position = end
    if pending < length:
        parts.append(TextPart(text[pending:]))
    return parts


@dataclass(frozen=True)
class _Scan:
    """The answer `find_rich` reads, and what every reader needs of it."""

    text: str
    inline_formulas: bool
    fence_starts: list[int]

    def paragraph_end(self, start: int, position: int) -> int:
        """Where something starting at `start` (opened at `position`) must end by: the next
        blank line or code block."""
        fence = next((f for f in self.fence_starts if f > position), len(self.text))
        return _paragraph_end(self.text, start, fence)


# Each reader takes the position of its character and returns (the part found there, or None
# when it is plain text, and where to go on reading).

def _read_backtick(scan: _Scan, position: int) -> tuple[Part | None, int]:
    """`inline code`: skipped whole, so nothing inside it is read as a formula or image."""
    return None, _code_span_end(scan.text, position, scan.paragraph_end(position, position))


def _read_backslash(scan: _Scan, position: int) -> tuple[Part | None, int]:
    """\\[...\\] (and \\(...\\) with inline formulas), else an escaped character."""
    following = scan.text[position + 1:position + 2]
    if following in ("[", "(") and (following == "[" or scan.inline_formulas):
        formula = _closed_formula(scan, position, "\\]" if following == "[" else "\\)",
                                  display=following == "[")
        if formula is not None:
            return formula
    return None, position + 2  # an escaped character, or a delimiter that does not close


def _read_dollar(scan: _Scan, position: int) -> tuple[Part | None, int]:
    """$$...$$, and $...$ with inline formulas."""
    text = scan.text
    if text.startswith("$$", position):
        return _closed_formula(scan, position, "$$", display=True) or (None, position + 2)
    if scan.inline_formulas:
        end = _inline_dollar(text, position)
        if end > 0:
            return FormulaPart(text[position + 1:end - 1], False, text[position:end]), end
    return None, position + 1


def _read_bang(scan: _Scan, position: int) -> tuple[Part | None, int]:
    """![alt](url)."""
    match = _IMAGE.match(scan.text, position) if scan.text.startswith("![", position) else None
    if match is None:
        return None, position + 1
    url = match["angled"] or match["url"]
    return ImageLinkPart(match["alt"], url, match.group(0)), match.end()


def _closed_formula(
    scan: _Scan, position: int, closing: str, *, display: bool
) -> tuple[FormulaPart, int] | None:
    """The formula whose two-character opening is at `position`, when `closing` ends it within
    its paragraph and it is not empty; with where it ends."""
    text = scan.text
    stop = scan.paragraph_end(position + 2, position)
    close = _find_closing(text, position + 2, stop, closing)
    if close >= 0 and text[position + 2:close].strip():
        end = close + 2
        return FormulaPart(text[position + 2:close].strip(), display, text[position:end]), end
    return None


_READERS = {"`": _read_backtick, "\\": _read_backslash, "$": _read_dollar, "!": _read_bang}
"""The characters where something other than plain text may start, and their readers."""
_READER_START = re.compile("[" + re.escape("".join(_READERS)) + "]")


def _inline_dollar(text: str, start: int) -> int:
    """End (after the closing $) of an inline $...$ formula opening at `start`, or -1."""
    line_end = text.find("\n", start)
    stop = len(text) if line_end < 0 else line_end
    if start + 1 >= stop or text[start + 1].isspace():
        return -1
    close = _find_closing(text, start + 1, stop, "$")
    if close < 0 or close == start + 1:
        return -1
    content = text[start + 1:close]
    if content[-1].isspace() or _MONEY.match(content):
        return -1
    after = text[close + 1:close + 2]
    if after.isdigit() or after == "$":
        return -1
    return close + 1


# --- drawing formulas ---------------------------------------------------------------------------

MAX_FORMULA_CHARS = 2000
"""Longer sources are not drawn."""

MAX_LINES = 20
"""Lines (sources cut at \\\\) drawn at most."""

MAX_SIDE_PIXELS = 4096
"""A larger picture is scaled down to this; one that would have to shrink below a third of its
size is not drawn at all."""

_REWRITES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(pattern), replacement)
    for pattern, replacement in [
        # TeX that mathtext lacks, as what mathtext has
        (r"\\(?:display|text|script|scriptscript)style(?![A-Za-z])\s*", ""),
        (r"\\(?:nonumber|notag|limits|nolimits)(?![A-Za-z])", ""),
        (r"\\([dtc]?frac)\s*([0-9A-Za-z])\s*([0-9A-Za-z])", r"\\\1{\2}{\3}"),
        (r"\\[tc]frac(?![A-Za-z])", r"\\frac"),
        (r"\\le(?![A-Za-z])", r"\\leq"),
        (r"\\ge(?![A-Za-z])", r"\\geq"),
        (r"\\[lr]vert(?![A-Za-z])", "|"),
        (r"\\(?:[lr]Vert)(?![A-Za-z])", r"\\|"),
        (r"\\[bB]igg?[lrm]?(?![A-Za-z])", ""),
        (r"\\implies(?![A-Za-z])", r"\\Longrightarrow"),
        (r"\\impliedby(?![A-Za-z])", r"\\Longleftarrow"),
        (r"\\iff(?![A-Za-z])", r"\\Longleftrightarrow"),
        (r"\\land(?![A-Za-z])", r"\\wedge"),
        (r"\\lor(?![A-Za-z])", r"\\vee"),
        (r"\\lnot(?![A-Za-z])", r"\\neg"),
        (r"\\textbf\s*\{", r"\\mathbf{"),
        (r"\\textit\s*\{", r"\\mathit{"),
        (r"\\(?:textrm|textnormal|textsf|texttt|mbox)\s*\{", r"\\text{"),
        (r"\\(?:bm|pmb)\s*\{", r"\\boldsymbol{"),
        (r"\\operatorname\*", r"\\operatorname"),
        (r"\\stackrel\s*\{", r"\\overset{"),
        (r"\\x(right|left)arrow\s*\{([^{}]*)\}", r"\\overset{\2}{\\long\1arrow}"),
        (r"\\pmod\s*\{([^{}]*)\}", r"\\ (\\mathrm{mod}\\ \1)"),
        (r"\\[bp]?mod(?![A-Za-z])", r"\\,\\mathrm{mod}\\,"),
        (r"\\tag\*?\s*\{([^{}]*)\}", r"\\qquad(\1)"),
        (r"\\color\s*\{[^{}]*\}", ""),
        (r"\\boxed(?![A-Za-z])", ""),
    ]
]

_log_state = threading.local()
_lock = threading.Lock()
_filter_installed = False


class _MissingGlyphs(logging.Filter):
    """Notes (and silences) mathtext's "no glyph" warnings raised by the rendering thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_log_state, "rendering", False):
            return True
        message = str(record.msg)
        if "does not have a glyph" in message or "No TeX to Unicode mapping" in message:
            _log_state.missing = True
            return False
        return True


def _top_level_lines(source: str) -> list[str]:
    """The source cut at \\\\ outside braces ([...] spacing after it dropped)."""
    lines: list[str] = []
    depth = 0
    current: list[str] = []
    position = 0
    while position < len(source):
        char = source[position]
        if char == "\\" and source.startswith("\\\\", position) and depth == 0:
            lines.append("".join(current))
            current = []
            position += 2
            spacing = re.match(r"\s*\[[^\]]*\]", source[position:])
            if spacing:
                position += spacing.end()
            continue
        if char == "\\":
            current.append(source[position:position + 2])
            position += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth = max(0, depth - 1)
        current.append(char)
        position += 1
    lines.append("".join(current))
    return [line.strip() for line in lines if line.strip()]


def _mathtext_source(line: str) -> str:
    """One line of TeX as mathtext reads it: alignment marks dropped, `$` escaped, a few commands
    mathtext lacks rewritten to ones it has."""
    line = re.sub(r"(?<!\\)&", " ", line)
    line = line.replace("\\&", "&")
    line = re.sub(r"(?<!\\)\$", r"\\$", line)
    for pattern, replacement in _REWRITES:
        line = pattern.sub(replacement, line)
    return line


_parser_class: Any = None


def _parser() -> Any:
    """A MathTextParser of our own, with its own pyparsing grammar instance: matplotlib caches one
    grammar for every parser in the process and a parse keeps state on it, so a chart being drawn
    in another thread would otherwise share it."""
    global _parser_class
    if _parser_class is None:
        from matplotlib.mathtext import MathTextParser

        class _OwnParser(MathTextParser):  # type: ignore[misc]
            _parser = None

        _parser_class = _OwnParser
    return _parser_class("agg")  # a new one each time: parses are cached per parser, warnings too


def _rasterize(lines: list[str], fontsize: float, dpi: float) -> list[Any] | None:
    """Each line as a uint8 coverage image, or None if mathtext cannot read one or lacks a glyph."""
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(family="DejaVu Sans", size=fontsize, math_fontfamily="dejavusans")
    images = []
    _log_state.rendering, _log_state.missing = True, False
    try:
        for line in lines:
            parser = _parser()
            try:
                result = parser.parse(f"${line}$", dpi=dpi, prop=prop, antialiased=True)
            except ValueError:  # mathtext's parse errors
                return None
            if _log_state.missing:
                return None
            images.append(result.image)
    finally:
        _log_state.rendering = False
    return images


def _compose(images: list[Any], fontsize: float, dpi: float) -> bytes | None:
    import numpy as np
    from PIL import Image

    scale = dpi / 72.0
    pad = max(2, round(0.3 * fontsize * scale))
    gap = max(1, round(0.35 * fontsize * scale))
    images = [np.asarray(image, dtype=np.uint8) for image in images if image.size]
    if not images:
        return None
    width = max(image.shape[1] for image in images) + 2 * pad
    height = sum(image.shape[0] for image in images) + gap * (len(images) - 1) + 2 * pad
    if max(width, height) > 3 * MAX_SIDE_PIXELS:
        return None
    canvas = np.full((height, width), 255, dtype=np.uint8)
    top = pad
    for image in images:
        rows, columns = image.shape
        left = (width - columns) // 2  # lines centred, as display math is
        region = canvas[top:top + rows, left:left + columns]
        np.minimum(region, 255 - image, out=region)
        top += rows + gap
    picture = Image.fromarray(canvas)  # 2-D uint8: greyscale
    if max(width, height) > MAX_SIDE_PIXELS:
        ratio = MAX_SIDE_PIXELS / max(width, height)
        picture = picture.resize((max(1, round(width * ratio)), max(1, round(height * ratio))),
                                 Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def render_formula(source: str, *, fontsize: int = 20, dpi: int = 150) -> bytes | None:
    """A PNG of the formula drawn by matplotlib's mathtext, or None when it cannot be drawn.

    Black on white, cropped to the ink with a small padding. mathtext reads a subset of TeX
    (\\frac, \\sqrt, ^, _, Greek letters, \\sum, \\int, \\left( \\right), \\text{}, \\mathbf{}...);
    a few common commands it lacks are rewritten first (\\le, \\ge, \\tfrac, \\displaystyle,
    \\big(, \\implies, \\iff, \\textbf, \\pmod, \\tag...). A source with line breaks (\\\\ outside
    braces) is drawn line by line, each centred, alignment marks (&) dropped; environments
    (\\begin{...}) are not supported: None.

    Also None for: an empty source or one over MAX_FORMULA_CHARS characters, more than MAX_LINES
    lines, a character the math fonts lack (CJK text in \\text{}, say: it would be drawn as boxes,
    so the caller had better show the source), or a picture more than three times larger than
    MAX_SIDE_PIXELS (smaller ones over it are scaled down). Never raises. Safe from worker threads:
    no pyplot, no rcParams, its own parser, drawing serialized by a lock. CPU-bound (a few ms to
    tens of ms): from async code run it in a worker thread.
    """
    try:
        if not isinstance(source, str):
            return None
        text = source.strip()
        if not text or len(text) > MAX_FORMULA_CHARS or "\\begin" in text or "\\end{" in text:
            return None
        size = float(fontsize)
        resolution = float(dpi)
        if not (1 <= size <= 200 and 10 <= resolution <= 1200):
            return None
        lines = [_mathtext_source(line) for line in _top_level_lines(text)]
        if not lines or len(lines) > MAX_LINES:
            return None
        _install_filter()
        with _lock:
            images = _rasterize(lines, size, resolution)
            if images is None:
                return None
            return _compose(images, size, resolution)
    except Exception:  # a formula that breaks the renderer is just not drawn
        return None


def _install_filter() -> None:
    global _filter_installed
    if not _filter_installed:
        with _lock:
            if not _filter_installed:
                logging.getLogger("matplotlib.mathtext").addFilter(_MissingGlyphs())
                _filter_installed = True
