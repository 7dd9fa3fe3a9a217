"""The text of a file, per format, as sections labelled with their place; runnable on its own.

Imported by agent/documents (which runs this file as a worker process:
`python -I formats.py`, the job on stdin, the answer as one JSON line on stdout). Standard
library and the format libraries only (pypdf, python-docx, openpyxl, lxml), imported when a file
of their format comes, so that the worker starts without the plugin.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("pdf", "docx", "xlsx", "csv", "html", "markdown", "txt")
"""The formats read, by the name `Extracted.kind` gives them."""

CODES = ("too_large", "too_many_pages", "zip_bomb", "no_text", "scanned", "unsupported", "mismatch",
         "corrupt", "encrypted", "timeout", "too_many_passages")
"""What can be wrong with a file (`DocumentError.code`)."""

ROWS_PER_SECTION = 40
"""Rows of a sheet or CSV per section (each with the header row again, so a passage reads alone)."""

_SUFFIXES = {".pdf": "pdf", ".docx": "docx", ".xlsx": "xlsx", ".xlsm": "xlsx", ".csv": "csv", ".tsv": "csv",
             ".html": "html", ".htm": "html", ".xhtml": "html", ".md": "markdown", ".markdown": "markdown",
             ".txt": "txt", ".text": "txt", ".log": "txt"}
_BINARY = ("pdf", "docx", "xlsx")
_NAMES = {"pdf": "PDF", "docx": "Word document (DOCX)", "xlsx": "Excel workbook (XLSX)", "csv": "CSV table",
          "html": "web page (HTML)", "markdown": "Markdown file", "txt": "text file"}


@dataclass(frozen=True)
class Limits:
    """The bounds a file is read within (each refused with a DocumentError naming it)."""

    max_bytes: int = 20_000_000
    """The file itself (MARSHO_FILE_MAX_BYTES)."""
    max_pages: int = 500
    """PDF pages, or sheets of a workbook."""
    max_unzipped: int = 200_000_000
    """What a DOCX or XLSX (ZIP archives) may hold uncompressed: past it, a zip bomb."""
    max_chars: int = 5_000_000
    """Characters of text taken from one file (more is cut)."""
    max_rows: int = 100_000
    """Rows of all sheets (or a CSV) together."""


@dataclass(frozen=True)
class Section:
    """A stretch of a file's text and where it is: a page, under a heading, a sheet's rows."""

    text: str
    page: int | None = None
    heading: str = ""
    sheet: str = ""
    rows: tuple[int, int] | None = None
    """First and last row (1-based, the header row being 1)."""

    def place(self) -> str:
        """Where it is, in English: "page 3", "“Setup”", "sheet Sales, rows 2-41"."""
        parts = []
        if self.page is not None:
            parts.append(f"page {self.page}")
        if self.sheet:
            parts.append(f"sheet {self.sheet}")
        if self.heading:
            parts.append(f"“{self.heading}”")
        if self.rows is not None:
            parts.append(f"rows {self.rows[0]}-{self.rows[1]}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Extracted:
    """A file's text: its format (KINDS), its sections in order, and its pages (PDF pages,
    sheets; 0 for the others)."""

    name: str
    kind: str
    sections: list[Section] = field(default_factory=list)
    pages: int = 0
    cut: bool = False
    """The text passed Limits.max_chars and was cut there."""

    @property
    def chars(self) -> int:
        return sum(len(section.text) for section in self.sections)


class DocumentError(Exception):
    """A file that cannot be read: `code` (CODES) says what was wrong, the message says it with
    the file's name and the limit when one was passed."""

    def __init__(self, name: str, code: str, detail: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown DocumentError code {code!r}")
        self.name, self.code, self.detail = name, code, detail
        super().__init__(f"{name}: {detail}")


# --- what the bytes are -------------------------------------------------------------------------

PDF_LEAD = 16
"""Bytes a PDF's `%PDF-` header may come after (a BOM, blank lines, a little junk, which PDF
readers let pass); a text that mentions `%PDF-` further on is text."""


def sniff(data: bytes) -> str | None:
    """The format the bytes are, by their magic bytes: pdf, docx, xlsx, "zip" (another archive),
    "ole" (an old .doc or .xls), "binary" (no text), or None (text: its name decides which).
    An archive whose directory zipfile cannot read (damaged, or a method or version it does not
    know: NotImplementedError) is "zip"."""
    if b"%PDF-" in data[:PDF_LEAD + 5]:
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        names = _zip_names(data)
        if names is None:
            return "zip"
        if "word/document.xml" in names:
            return "docx"
        if "xl/workbook.xml" in names:
            return "xlsx"
        return "zip"
    if data.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        return "ole"
    head = data[:8192]
    if b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "binary"
    return None


def _zip_names(data: bytes) -> set[str] | None:
    """The names in a ZIP archive's directory; None when zipfile cannot read it."""
    try:
        return set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except Exception:  # whatever a damaged or crafted directory makes zipfile raise
        return None


def kind_of(data: bytes, name: str) -> str:
    """The format to read the file as: what its bytes are (its name's extension is not trusted),
    the extension only among text formats; DocumentError for a format not read."""
    said = _SUFFIXES.get(os.path.splitext(name.lower())[1])
    try:
        found = sniff(data)
    except Exception as error:  # a sniffer's failure is the file's, named
        raise DocumentError(name, "corrupt", f"a file whose format could not be told "
                            f"({type(error).__name__}: {str(error)[:200]})") from None
    if found in _BINARY:
        if said is not None and said != found:  # a renamed file: which one is wrong is not ours to guess
            raise DocumentError(name, "mismatch", f"not {_a(_NAMES[said])}: its content is "
                                f"{_a(_NAMES[found])}; give it the right extension")
        return found  # type: ignore[return-value]
    if found == "zip" and said in ("docx", "xlsx") and _zip_names(data) is None:
        raise DocumentError(name, "corrupt", f"{_a(_NAMES[said])} whose archive could not be read (damaged, "
                            "or of a ZIP version not read here)")
    if found is not None:
        what = {"zip": "a ZIP archive that is neither a Word nor an Excel document",
                "ole": "an old Office file (.doc, .xls, .ppt): save it as .docx or .xlsx",
                "binary": "neither text nor a format read here (PDF, DOCX, XLSX, CSV, HTML, Markdown, "
                          "TXT)"}[found]
        code = "mismatch" if said in _BINARY else "unsupported"
        raise DocumentError(name, code, f"not {_a(_NAMES[said])}: its content is {what}" if said in _BINARY
                            else f"cannot be read: it is {what}")
    if said in _BINARY:
        raise DocumentError(name, "mismatch", f"not {_a(_NAMES[said])}: its content is text")
    if said in ("csv", "html", "markdown"):
        return said
    head = data[:512].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "html"
    return "txt"


def _a(what: str) -> str:
    return ("an " if what[0].lower() in "aeiou" else "a ") + what


def decode(data: bytes) -> str:
    """Text bytes as text: UTF-8 (with or without its BOM), UTF-16 with a BOM, else GB18030
    (Chinese Windows' encoding, which reads any byte sequence, GBK's included)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("gb18030", errors="replace")


# --- reading -------------------------------------------------------------------------------------

def extract_here(data: bytes, name: str, limits: Limits | None = None) -> Extracted:
    """The file's text, read in this thread (agent/documents.extract runs it off the event
    loop, in a worker process for PDF, DOCX and XLSX). Raises DocumentError."""
    limits = limits or Limits()
    if len(data) > limits.max_bytes:
        raise DocumentError(name, "too_large", f"{_mb(len(data))}, over the limit of {_mb(limits.max_bytes)} "
                            "(MARSHO_FILE_MAX_BYTES)")
    kind = kind_of(data, name)
    reader = {"pdf": _pdf, "docx": _docx, "xlsx": _xlsx, "csv": _csv, "html": _html,
              "markdown": _markdown, "txt": _txt}[kind]
    try:
        sections, pages = reader(data, name, limits)
    except (DocumentError, MemoryError, RecursionError):
        raise
    except Exception as error:  # whatever a library raises on a broken file
        raise DocumentError(name, "corrupt", f"{_a(_NAMES[kind])} that could not be read "
                            f"({type(error).__name__}: {str(error)[:200]})") from None
    sections, cut = _bounded(sections, limits.max_chars)
    if not any(section.text.strip() for section in sections):
        counted = "1 page" if pages == 1 else f"{pages} pages"
        why = (f"{counted} and no text in them: a scanned PDF (pictures of pages) needs its "
               "text recognised (OCR) first" if kind == "pdf" else "no text in it")
        raise DocumentError(name, "scanned" if kind == "pdf" else "no_text", why)
    return Extracted(name, kind, sections, pages, cut)


def _mb(count: int) -> str:
    return f"{count / 1_000_000:.3g} MB"


def _bounded(sections: list[Section], max_chars: int) -> tuple[list[Section], bool]:
    kept: list[Section] = []
    room = max_chars
    for section in sections:
        text = _clean(section.text)
        if not text:
            continue
        if len(text) > room:
            if room > 0:
                kept.append(Section(text[:room], section.page, section.heading, section.sheet, section.rows))
            return kept, True
        room -= len(text)
        kept.append(Section(text, section.page, section.heading, section.sheet, section.rows))
    return kept, False


_SPACES = re.compile(r"[ \t\f\v\u00a0\u3000]+")
_BLANKS = re.compile(r"\n{3,}")


def _clean(text: str) -> str:
    """No NUL (PostgreSQL refuses it) nor lone surrogates; runs of spaces as one; at most one
    blank line in a row."""
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _pdf(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError(name, "encrypted", "the PDF is protected by a password")
        count = len(reader.pages)
    except FileNotDecryptedError:
        raise DocumentError(name, "encrypted", "the PDF is protected by a password") from None
    except PdfReadError as error:
        raise DocumentError(name, "corrupt", f"a PDF that could not be read ({str(error)[:200]})") from None
    if count == 0:
        raise DocumentError(name, "corrupt", "a PDF with no pages that could be read (damaged?)")
    if count > limits.max_pages:
        raise DocumentError(name, "too_many_pages", f"{count} pages, over the limit of {limits.max_pages} "
                            "(MARSHO_FILE_MAX_PAGES)")
    sections: list[Section] = []
    chars = 0
    for number, page in enumerate(reader.pages, start=1):
        text = page.extract_text() or ""
        sections.append(Section(text, page=number))
        chars += len(text)
        if chars > limits.max_chars:
            break
    return sections, count


MAX_PARTS = 10_000
"""Parts (files in the ZIP) a DOCX or XLSX may hold."""


def _unzipped(data: bytes, name: str, limits: Limits) -> None:
    """A DOCX or XLSX is a ZIP archive: what it holds uncompressed is summed from its directory
    before anything is opened, so a small file that would inflate to gigabytes is refused."""
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except Exception as error:  # damaged, or a method or version zipfile does not know
        raise DocumentError(name, "corrupt", f"a damaged archive ({type(error).__name__}: "
                            f"{str(error)[:200]})") from None
    if len(infos) > MAX_PARTS:
        raise DocumentError(name, "zip_bomb", f"it holds {len(infos)} parts, over the limit of {MAX_PARTS} "
                            "(a zip bomb?)")
    total = sum(info.file_size for info in infos)
    if total > limits.max_unzipped:
        raise DocumentError(name, "zip_bomb", f"it would unpack to {_mb(total)} in {len(infos)} parts, over "
                            f"the limit of {_mb(limits.max_unzipped)} (a zip bomb?)")


def _docx(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    _unzipped(data, name, limits)
    import docx
    from docx.table import Table

    document = docx.Document(io.BytesIO(data))
    sections: list[Section] = []
    heading = ""
    lines: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            lines += [" | ".join(cell.text.strip() for cell in row.cells) for row in block.rows]
            continue
        style = (block.style.name if block.style is not None else "") or ""
        if style.lower().startswith(("heading", "title", "标题")) and block.text.strip():
            sections.append(Section("\n".join(lines), heading=heading))
            heading, lines = block.text.strip()[:200], [block.text]
        else:
            lines.append(block.text)
    sections.append(Section("\n".join(lines), heading=heading))
    return sections, 0


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).replace("\n", " ").strip()


def _table(rows: list[list[str]], sheet: str = "") -> list[Section]:
    """Rows as sections of ROWS_PER_SECTION rows, each starting with the header row."""
    rows = [row for row in rows if any(row)]
    if not rows:
        return []
    header, body = rows[0], rows[1:]
    if not body:
        return [Section(" | ".join(header), sheet=sheet, rows=(1, 1))]
    sections = []
    for start in range(0, len(body), ROWS_PER_SECTION):
        chunk = body[start:start + ROWS_PER_SECTION]
        lines = [" | ".join(header), *(" | ".join(row) for row in chunk)]
        sections.append(Section("\n".join(lines), sheet=sheet, rows=(start + 2, start + 1 + len(chunk))))
    return sections


def _xlsx(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    _unzipped(data, name, limits)
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        if len(book.worksheets) > limits.max_pages:
            raise DocumentError(name, "too_many_pages", f"{len(book.worksheets)} sheets, over the limit of "
                                f"{limits.max_pages}")
        sections: list[Section] = []
        rows_left = limits.max_rows
        for sheet in book.worksheets:
            rows: list[list[str]] = []
            for row in sheet.iter_rows(values_only=True):
                rows.append([_cell(value) for value in row])
                rows_left -= 1
                if rows_left <= 0:
                    break
            sections += _table(rows, sheet.title)
            if rows_left <= 0:
                break
        return sections, len(book.worksheets)
    finally:
        book.close()


def _csv(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    text = decode(data)
    try:
        dialect: Any = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel_tab if name.lower().endswith(".tsv") else csv.excel
    rows = []
    for row in csv.reader(io.StringIO(text), dialect):
        rows.append([cell.strip() for cell in row])
        if len(rows) >= limits.max_rows:
            break
    return _table(rows), 0


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _solid(text: str) -> int:
    """Characters of `text` that cleaning keeps for certain (all but spaces): once a reader has
    more of them than Limits.max_chars, the rest would be cut anyway."""
    return sum(len(word) for word in text.replace("\x00", "").split())


def _markdown(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    sections: list[Section] = []
    heading, fenced = "", False
    lines: list[str] = []
    solid = 0
    for line in decode(data).splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        found = None if fenced else _HEADING.match(line)
        if found:
            sections.append(Section("\n".join(lines), heading=heading))
            heading, lines = found.group(2)[:200], [found.group(2)]
        else:
            lines.append(line)
        solid += _solid(lines[-1])
        if solid > limits.max_chars:  # past the cut: the rest would be cut, no more sections to build
            break
    sections.append(Section("\n".join(lines), heading=heading))
    return sections, 0


_SKIPPED = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {"p", "div", "li", "tr", "br", "table", "ul", "ol", "section", "article", "pre", "blockquote",
           "dd", "dt", "header", "footer", "main", "nav", "aside", "form", "hr"}


def _html(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    import lxml.html

    text = decode(data)
    if not text.strip():
        return [], 0  # lxml calls an empty page a broken one
    root = lxml.html.document_fromstring(text)
    sections: list[Section] = []
    state: dict[str, Any] = {"heading": "", "parts": []}

    def close(heading: str) -> None:
        sections.append(Section("".join(state["parts"]), heading=state["heading"]))
        state["heading"], state["parts"] = heading, [heading + "\n"]

    def walk(element: Any, depth: int = 0) -> None:
        if not isinstance(element.tag, str):  # a comment or processing instruction: not shown
            state["parts"].append(element.tail or "")
            return
        tag = element.tag
        if tag in _SKIPPED or depth > 200:
            pass
        elif tag in _HEADINGS:
            close(" ".join(element.text_content().split())[:200])
        else:
            state["parts"].append(element.text or "")
            for child in element:
                walk(child, depth + 1)
            if tag in _BLOCKS:
                state["parts"].append("\n")
            elif tag in ("td", "th"):
                state["parts"].append(" | ")
        state["parts"].append(element.tail or "")

    body = root.find("body")
    walk(body if body is not None else root)
    close("")
    return sections[:-1] if not sections[-1].text.strip() else sections, 0


def _txt(data: bytes, name: str, limits: Limits) -> tuple[list[Section], int]:
    return [Section(decode(data))], 0


# --- the worker process ---------------------------------------------------------------------------

def _protect(memory_bytes: int) -> None:
    """The worker's own bounds: it dies with the bot (Linux), and its memory is capped."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except Exception:  # not Linux
        pass
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except Exception:  # not POSIX, or a limit already lower
        pass


def _main() -> None:
    """Read one job from stdin (a JSON line: name, limits, memory_bytes; then the file's bytes),
    print one JSON line: {"extracted": ...} or {"error": [code, detail]}."""
    header = json.loads(sys.stdin.buffer.readline())
    data = sys.stdin.buffer.read()
    _protect(int(header["memory_bytes"]))
    name = header["name"]
    try:
        extracted = extract_here(data, name, Limits(**header["limits"]))
        answer: dict[str, Any] = {"extracted": asdict(extracted)}
    except DocumentError as error:
        answer = {"error": [error.code, error.detail]}
    except MemoryError:
        answer = {"error": ["corrupt", "a file that took more memory to read than allowed (a hostile file?)"]}
    except RecursionError:
        answer = {"error": ["corrupt", "nested too deeply to read (a hostile file?)"]}
    except Exception as error:  # a failure outside the readers' own handling is the file's too
        answer = {"error": ["corrupt", f"a file that could not be read ({type(error).__name__}: "
                            f"{str(error)[:200]})"]}
    # ASCII only: the parent splits at "\n", and U+2028 in a text must not split the line
    sys.stdout.write(json.dumps(answer, ensure_ascii=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _main()
