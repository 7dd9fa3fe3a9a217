"""Files read for a question (issue 29): their text as the model reads it beside the question, cut
to the room the turn's budget leaves, and the one line the stored question keeps. NoneBot-free.

What is kept: the file's text goes with this turn's requests only (TurnFacts.files, sent after
the note, never stored); the question as history keeps it names the file in one line ("[file
report.pdf, 12 pages, read for this question]"), so the history does not fill with a PDF and
later turns know a file was discussed (to ask about its text again, quote the file again). A
file that could not be read is named too, so the model knows it came.

A file's text is framed as every text nobody here vouches for (framing.framed: no line of it can
pass for a speaker, a mark of ours or an instruction), its name on a label line of ours, each
section under its place (page, sheet and rows, heading), whole sections in order while they fit,
the beginning of the first that does not, then a line saying what was cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..i18n import Texts
from .documents import Extracted, Section
from .framing import CONTROL, framed
from .persona import DOUBLE_QUOTES
from .tokens import TokenCounter

FILE_SHARE = 0.5
"""The share of the budget (MARSHO_HISTORY_TOKENS) the files of one question may take together:
the rest stays for the system prompt, the tools, the question and some history."""
MAX_FILES = 3
"""Files read per question (the quoted message's first, then the question's own); more get a tip."""
MIN_PART_TOKENS = 64
"""Tokens below which the beginning of a section that does not fit is not worth showing."""
CHARS_PER_TOKEN = 8
"""No token holds more characters than this (in practice): a section is sliced to its room times
this before its tokens are counted, so a 5 MB text file costs no 5 MB count."""
NAME_CHARS = 120
_BRACKETS = re.compile(r"[\[\]【】]")
_PLAIN_NAME = re.compile(r"[\w\-.()+&#~@ ]{1,64}")
"""A name that reads as a file's name alone: letters of any script, digits, spaces and the marks
names use, no comma, colon or quote that could end our label's phrase and start a sentence."""


def file_name(name: str, *, quoted: bool = True) -> str:
    """A file's name (or a sheet's, a heading's) as our lines show it: one line, no brackets (it
    cannot close our label), and a name that is more than a name — a comma, a colon, a quote,
    words past 64 characters: one that might read as our own words — in quotes of ours, without
    its own (`quoted=False`: the caller's text quotes it already)."""
    one = " ".join(_BRACKETS.sub("", CONTROL.sub(" ", name)).split())[:NAME_CHARS] or "file"
    if _PLAIN_NAME.fullmatch(one):
        return one
    bare = "".join(c for c in one if c not in DOUBLE_QUOTES).strip() or "file"
    return f"“{bare}”" if quoted else bare


def _kind(t: Texts, extracted: Extracted) -> str:
    """"PDF, 40 pages", "Excel workbook, 2 sheets", "text file"."""
    kind = t(f"file.kind.{extracted.kind}")
    if extracted.kind == "pdf":
        return t("file.kind_parts", kind=kind, parts=t.plural("count.pages", extracted.pages))
    if extracted.kind == "xlsx":
        return t("file.kind_parts", kind=kind, parts=t.plural("count.sheets", extracted.pages))
    return kind


def place_text(t: Texts, section: Section) -> str:
    """A section's place as people read it: "page 3", "sheet Sales, rows 2-41", "“Setup”"."""
    parts = []
    if section.page is not None:
        parts.append(t("kb.place_page", page=section.page))
    # a sheet's name and a heading are the document's: one line, no brackets (as a file's name)
    if section.sheet:
        parts.append(t("kb.place_sheet", sheet=file_name(section.sheet)))
    if section.heading:
        parts.append(t("kb.place_heading", heading=file_name(section.heading, quoted=False)))
    if section.rows is not None:
        parts.append(t("kb.place_rows", first=section.rows[0], last=section.rows[1]))
    return t("kb.place_joint").join(parts)


def stored_line(t: Texts, extracted: Extracted) -> str:
    """The line the stored question keeps of a file read for it."""
    name = file_name(extracted.name)
    if extracted.kind == "pdf":
        return t("file.stored_parts", file=name, parts=t.plural("count.pages", extracted.pages))
    if extracted.kind == "xlsx":
        return t("file.stored_parts", file=name, parts=t.plural("count.sheets", extracted.pages))
    return t("file.stored", file=name)


def files_note(files: Sequence[Extracted], t: Texts, counter: TokenCounter, room: int) -> str:
    """The files' text for the model, within `room` tokens shared out evenly; "" for none."""
    if not files:
        return ""
    each = room // len(files)
    return "\n\n".join(file_text(extracted, t, counter, each) for extracted in files)


def _block(t: Texts, section: Section) -> str:
    text = "\n".join(line for line in section.text.splitlines() if line.strip())
    place = place_text(t, section)
    return f"[{place}]\n{framed(text, alone=True)}" if place else framed(text, alone=True)


def file_text(extracted: Extracted, t: Texts, counter: TokenCounter, room: int) -> str:
    """One file as the model reads it, within `room` tokens: its label, the sections that fit
    (the beginning of the first that does not), what was cut, its end mark."""
    name = file_name(extracted.name)
    head = t("file.label", file=name, kind=_kind(t, extracted))
    end = t("file.end", file=name)
    used = counter.count_text(head) + counter.count_text(end) + 2 * MIN_PART_TOKENS  # the cut lines
    blocks: list[str] = []
    shown = 0
    cut_at: int | None = None
    partly = False
    for index, section in enumerate(extracted.sections):
        block, left = _block(t, section), room - used
        # longer than `left` tokens can hold: it does not fit, uncounted
        size = counter.count_text(block) if len(block) <= left * CHARS_PER_TOKEN else left + 1
        if size <= left:
            blocks.append(block)
            used += size
            shown += len(section.text)
            continue
        cut_at = index
        if left >= MIN_PART_TOKENS:
            part = counter.truncate(block[: left * CHARS_PER_TOKEN], left)
            blocks.append(part)
            shown += len(part)
            partly = True
        break
    cut = _cut_lines(t, extracted, cut_at, partly, shown)
    return "\n".join([head, *blocks, *cut, end])


def _cut_lines(t: Texts, extracted: Extracted, cut_at: int | None, partly: bool, shown: int) -> list[str]:
    """The lines saying what of the file the model does not get: the pages (of a PDF), else how
    many of its characters (or, when reading stopped at Limits.max_chars, how many it got)."""
    lines: list[str] = []
    if cut_at is not None:
        section = extracted.sections[cut_at]
        if extracted.kind == "pdf" and section.page is not None:
            first, last = section.page + (1 if partly else 0), extracted.pages
            if partly:
                lines.append(t("file.cut_partly", page=section.page, pages=last))
            if first == last:
                lines.append(t("file.cut_page", page=first, pages=last))
            elif first < last:
                lines.append(t("file.cut_pages", first=first, last=last, pages=last))
            return lines  # (the pages a reading cut short are among those)
    if extracted.cut:  # read no further than the room: how long it is, is not known
        lines.append(t("file.cut_read", chars=shown))
    elif cut_at is not None:
        lines.append(t("file.cut_chars", rest=max(0, extracted.chars - shown), total=extracted.chars))
    return lines
