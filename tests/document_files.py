"""Files made on the spot for the documents tests and the knowledge-base benchmark: a PDF written
by hand (pages of text in Helvetica, or pages with no text: a "scanned" one), a DOCX and an XLSX
through python-docx and openpyxl, and hostile ones (a zip bomb, a PDF of a million objects)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf(pages: Sequence[Sequence[str] | str]) -> bytes:
    """A PDF whose pages show these lines (ASCII) in Helvetica; an empty page has no text at all
    (as a scanned page, which is a picture)."""
    objects: list[bytes] = []
    count = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(count))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for page in pages:
        lines = [page] if isinstance(page, str) else list(page)
        lines = [line for line in lines if line]
        stream = "BT /F1 11 Tf 14 TL 56 780 Td " + " ".join(f"({_escape(line)}) Tj T*" for line in lines) + " ET"
        content = stream.encode("latin-1") if lines else b""
        number = len(objects) + 1
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {number + 1} 0 R "
                       "/Resources << /Font << /F1 3 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def million_object_pdf(objects: int = 1_000_000) -> bytes:
    """A PDF whose page tree names `objects` pages (each an object of its own)."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n")
    kids = b" ".join(b"%d 0 R" % (3 + i) for i in range(objects))
    out.write(b"2 0 obj\n<< /Type /Pages /Count %d /Kids [%s] >>\nendobj\n" % (objects, kids))
    out.write(b"".join(b"%d 0 obj<</Type/Page/Parent 2 0 R>>endobj\n" % (3 + i) for i in range(objects)))
    # no cross-reference table: a reader rebuilds it by scanning every object
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n0\n%%%%EOF\n" % (objects + 3))
    return out.getvalue()


def docx(blocks: Sequence[tuple[str, str]]) -> bytes:
    """A DOCX of (style, text) blocks: style "h1"/"h2" a heading, "table" a row "a|b|c", else a
    paragraph."""
    import docx as python_docx

    document = python_docx.Document()
    for style, text in blocks:
        if style in ("h1", "h2"):
            document.add_heading(text, level=int(style[1]))
        elif style == "table":
            cells = text.split("|")
            table = document.add_table(rows=1, cols=len(cells))
            for cell, value in zip(table.rows[0].cells, cells, strict=True):
                cell.text = value
        else:
            document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    """An XLSX with these sheets of rows."""
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for title, rows in sheets.items():
        sheet = book.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def zip_bomb_docx(inflated: int) -> bytes:
    """A DOCX-shaped ZIP whose document.xml inflates to `inflated` bytes (zeros: tiny compressed)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as member:
            block = b"0" * 1_000_000
            for _ in range(inflated // len(block)):
                member.write(block)
    return out.getvalue()
