"""Reading files people share (issue 29): their text, as sections labelled with their place, and
cut into passages. NoneBot-free; the knowledge base and the files read in questions use it.

The API:

    from nonebot_plugin_marsho.agent.documents import DocumentError, Limits, extract, passages

    extracted = await extract(data, "report.pdf", limits=Limits(max_bytes=20_000_000), timeout=60)
    extracted.kind        # "pdf", "docx", "xlsx", "csv", "html", "markdown" or "txt"
    extracted.pages       # PDF pages, workbook sheets; 0 for the others
    extracted.sections    # [Section(text, page=3) | Section(text, heading="Setup") |
                          #  Section(text, sheet="Sales", rows=(2, 41)) | Section(text, rows=...)]
    section.place()       # "page 3", "“Setup”", "sheet Sales, rows 2-41" (English)
    extracted.cut         # True when the text passed Limits.max_chars and was cut there
    for passage in passages(extracted, chars=800, max_passages=2000): passage.text, passage.section

- The format is what the bytes are (magic bytes), not what the name says; the name's extension
  only tells the text formats apart (.csv, .md, .html; anything else is plain text). Text is read
  as UTF-8 (with or without BOM), UTF-16 with a BOM, else GB18030.
- `extract` never blocks the event loop: every format (and the sniffing of what it is) is read in
  a worker process of its own (`python -I formats.py`, memory capped, killed at `timeout`), so a
  hostile file cannot hang or bloat the bot; at most WORKERS_AT_ONCE run at once across the bot,
  the others wait their turn within their own `timeout`. `extract_here` reads in the calling
  thread.
- Every way a file can be wrong is a DocumentError naming the file, with `code` (formats.CODES:
  too_large, too_many_pages, zip_bomb (a DOCX/XLSX whose ZIP would unpack past
  Limits.max_unzipped, checked before it is opened), no_text (a scanned PDF), unsupported,
  mismatch (a wrong extension), corrupt, encrypted, timeout, too_many_passages) and a sentence
  in English (`str(error)`: "report.pdf: 612 pages, over the limit of 500").
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .formats import (
    CODES,
    KINDS,
    DocumentError,
    Extracted,
    Limits,
    Section,
    decode,
    extract_here,
    kind_of,
    sniff,
)

__all__ = ["CODES", "KINDS", "DocumentError", "Extracted", "Limits", "Passage", "Section", "decode",
           "extract", "extract_here", "kind_of", "passages", "sniff"]

WORKER = Path(__file__).with_name("formats.py")
WORKER_MEMORY = 1_500_000_000
"""Bytes of address space a worker may take (a PDF of a million objects stops there, not in the bot)."""
SENTENCES = re.compile(r".+?(?:[.!?。！？；;]+\s*|$)", re.DOTALL)
WORKERS_AT_ONCE = 2
"""Worker processes reading at once across the bot; a file waits its turn within its timeout."""


async def extract(data: bytes, name: str, *, limits: Limits | None = None,
                  timeout: float = 60.0) -> Extracted:
    """The text of file `name` (its bytes `data`), off the event loop, within `limits` (the
    defaults of Limits when None) and `timeout` seconds: the wait for a worker's turn
    (WORKERS_AT_ONCE) and the reading together. Raises DocumentError."""
    limits = limits or Limits()
    if len(data) > limits.max_bytes:
        return extract_here(data, name, limits)  # refused at once, naming the limit
    started: list[bool] = []
    try:
        return await asyncio.wait_for(_queued(data, name, limits, started), timeout)
    except asyncio.TimeoutError:
        if not started:
            raise DocumentError(name, "timeout", f"I am busy reading other files and its turn did not come "
                                f"within {timeout:g} s; try again in a moment") from None
        raise DocumentError(name, "timeout", f"reading it took longer than {timeout:g} s (a hostile "
                            "file?)") from None


_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _slot() -> asyncio.Semaphore:
    """The bot's worker slots (one semaphore per event loop: tests run several loops)."""
    loop = asyncio.get_running_loop()
    slot = _slots.get(loop)
    if slot is None:
        slot = _slots[loop] = asyncio.Semaphore(WORKERS_AT_ONCE)
    return slot


async def _queued(data: bytes, name: str, limits: Limits, started: list[bool]) -> Extracted:
    async with _slot():
        started.append(True)
        return await _in_worker(data, name, limits)


async def _in_worker(data: bytes, name: str, limits: Limits) -> Extracted:
    """Read in a worker process, killed when this is cancelled (extract's time bound)."""
    header = json.dumps({"name": name, "limits": asdict(limits), "memory_bytes": WORKER_MEMORY}).encode()
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "SYSTEMROOT", "TEMP", "TMP")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-B", str(WORKER), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        out, err = await process.communicate(header + b"\n" + data)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return _answer(name, out, err, process.returncode)


def _answer(name: str, out: bytes, err: bytes, returncode: int | None) -> Extracted:
    """The worker's answer, from its last line of stdout."""
    try:  # split at b"\n" only (the JSON is ASCII)
        answer: dict[str, Any] = json.loads(out.rstrip(b"\r\n").rsplit(b"\n", 1)[-1])
    except ValueError:
        last = (err.decode("utf-8", "replace").strip().splitlines()[-1:]
                or [f"exit status {returncode}"])
        raise DocumentError(name, "corrupt", f"a file the reader stopped on ({last[0][:200]}; a hostile "
                            "file, or too big to read within the memory allowed?)") from None
    if "error" in answer:
        code, detail = answer["error"]
        raise DocumentError(name, code, detail)
    found = answer["extracted"]
    sections = [Section(s["text"], s["page"], s["heading"], s["sheet"],
                        tuple(s["rows"]) if s["rows"] else None) for s in found["sections"]]
    return Extracted(found["name"], found["kind"], sections, found["pages"], found["cut"])


@dataclass(frozen=True)
class Passage:
    """A piece of a file short enough to search and to show beside a question: its text, and the
    section it is from (its place)."""

    text: str
    section: Section

    def place(self) -> str:
        return self.section.place()


def passages(extracted: Extracted, *, chars: int = 800, max_passages: int = 2000) -> list[Passage]:
    """The file's text in passages of at most `chars` characters, cut between paragraphs (then
    lines, then sentences, then anywhere); a section never shares a passage with another.
    DocumentError (too_many_passages) past `max_passages`."""
    found: list[Passage] = []
    for section in extracted.sections:
        for text in _pieces(section.text, chars):
            found.append(Passage(text, section))
            if len(found) > max_passages:
                raise DocumentError(extracted.name, "too_many_passages",
                                    f"more than {max_passages} passages, over the limit (a shorter file, or "
                                    "split it)")
    return found


def _pieces(text: str, chars: int) -> list[str]:
    pieces: list[str] = []
    current = ""
    for unit in _units(text, chars):
        joined = f"{current}\n{unit}" if current else unit
        if len(joined) <= chars:
            current = joined
        else:
            if current:
                pieces.append(current)
            current = unit
    if current.strip():
        pieces.append(current)
    return [piece.strip() for piece in pieces if piece.strip()]


def _units(text: str, chars: int) -> list[str]:
    """The text's paragraphs, each split further (lines, sentences, then every `chars`) until it fits."""
    units: list[str] = []
    for paragraph in text.split("\n\n"):
        if len(paragraph) <= chars:
            units.append(paragraph)
            continue
        for line in paragraph.split("\n"):
            if len(line) <= chars:
                units.append(line)
                continue
            sentence = ""
            for part in SENTENCES.findall(line):
                if len(sentence) + len(part) <= chars:
                    sentence += part
                    continue
                if sentence:
                    units.append(sentence)
                sentence = part
                while len(sentence) > chars:
                    units.append(sentence[:chars])
                    sentence = sentence[chars:]
            if sentence:
                units.append(sentence)
    return units
