"""The code blocks of the documentation site (docs/<lang>/**.md), read for the tests.

A block is a fenced block with a language: ```` ```dotenv title=".env" ````. Blocks may be
indented (inside a list item, an admonition or a content tab); their text comes back without
that indentation. A test of its own reads a block by page and title:

    from tests.docs_blocks import doc_block
    source = doc_block("en/plugin-api.md", "my_plugin.py")
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGUAGES = ("zh", "en")
"""The site's languages, each a folder of docs/ (Chinese first: the default, at the site root)."""

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_TITLE = re.compile(r"""\btitle=(?:"([^"]*)"|'([^']*)'|(\S+))""")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    """The page, relative to docs/: `en/mcp.md`."""
    line: int
    """Line number of the opening fence (1-based)."""
    language: str
    """The first word of the info string, lower case (`dotenv`, `sh`, `json`, `python`...); "" if none."""
    title: str | None
    """`title="..."` of the info string: the file the block is, when it is one."""
    text: str
    """The block's content, its indentation removed, ending with a newline (unless empty)."""

    @property
    def where(self) -> str:
        """`en/mcp.md:12`, for messages."""
        return f"{self.page}:{self.line}"


def _dedent(line: str, indent: str) -> str:
    return line[len(indent):] if line.startswith(indent) else line.lstrip(" \t")


def parse_blocks(page: str, markdown: str) -> list[Block]:
    """Every fenced block of `markdown` (the text of `page`), in order."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"]
        language = info.split()[0].lstrip(".{").rstrip("}").lower() if info.split() else ""
        title_match = _TITLE.search(info)
        title = next((g for g in title_match.groups() if g is not None), None) if title_match else None
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = _FENCE.match(lines[index])
            if (closing is not None and not closing["info"] and closing["fence"][0] == fence[0]
                    and len(closing["fence"]) >= len(fence)):
                break
            body.append(_dedent(lines[index], indent))
            index += 1
        start = index - len(body)  # the opening fence's line number, counting from 1
        blocks.append(Block(page, start, language, title, "".join(f"{line}\n" for line in body)))
        index += 1
    return blocks


def pages(language: str | None = None) -> list[str]:
    """Every page, relative to docs/ (`zh/index.md`), of one language or of all, sorted."""
    folders = [language] if language else list(LANGUAGES)
    return sorted(path.relative_to(DOCS).as_posix()
                  for folder in folders for path in (DOCS / folder).rglob("*.md"))


@cache
def _page_blocks(page: str) -> tuple[Block, ...]:
    return tuple(parse_blocks(page, (DOCS / page).read_text(encoding="utf-8")))


def blocks(page: str | None = None) -> list[Block]:
    """The blocks of `page`, or of every page."""
    return [block for name in ([page] if page else pages()) for block in _page_blocks(name)]


def doc_block(page: str, title: str) -> str:
    """The text of the one block of `page` (`en/plugin-api.md`) titled `title`.

    Fails when the page has no such block or several: a test must know what it runs.
    """
    if not (DOCS / page).is_file():
        raise AssertionError(f"docs/{page} does not exist")
    found = [block for block in blocks(page) if block.title == title]
    if len(found) != 1:
        raise AssertionError(f"docs/{page} has {len(found)} blocks titled {title!r}, not one")
    return found[0].text
