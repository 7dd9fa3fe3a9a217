"""arXiv's Atom answer → papers, read with the standard library's xml.etree."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

NS = {
    "atom": "http://www.w3.org/2005/Atom",
    "opensearch": "http://a9.com/-/spec/opensearch/1.1/",
    "arxiv": "http://arxiv.org/schemas/atom",
}


class FeedError(Exception):
    """The answer is not a feed that can be read, or is arXiv's own error entry."""


@dataclass
class Paper:
    """One arXiv entry."""

    title: str
    authors: list[str]
    published: str
    updated: str
    link: str
    summary: str
    categories: list[str] = field(default_factory=list)
    journal_ref: str = ""


@dataclass
class Feed:
    """A page of results, and how many there are in all (None when arXiv does not say)."""

    papers: list[Paper]
    total: int | None


def _text(element: ET.Element | None) -> str:
    return " ".join((element.text or "").split()) if element is not None else ""


def _https(url: str) -> str:
    return "https://" + url[len("http://"):] if url.startswith("http://arxiv.org/") else url


def parse_feed(body: bytes) -> Feed:
    """Papers of an arXiv API answer; FeedError for a malformed body or an error entry."""
    root = _feed_root(body)
    total_text = _text(root.find("opensearch:totalResults", NS))
    total = int(total_text) if total_text.isdigit() else None
    papers = [paper for entry in root.findall("atom:entry", NS)
              if (paper := _paper(entry)) is not None]
    return Feed(papers, total)


def _feed_root(body: bytes) -> ET.Element:
    """The Atom feed element of the answer, read without a DTD; FeedError for anything else."""
    head = body[:4096].upper()
    if b"<!DOCTYPE" in head or b"<!ENTITY" in head:
        raise FeedError("the answer declares a DTD, which an arXiv feed never does; it was not read")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as error:
        raise FeedError(f"the answer is not valid XML ({error})") from None
    if root.tag != f"{{{NS['atom']}}}feed":
        raise FeedError(f"the answer is XML but not an Atom feed (its root is <{root.tag}>)")
    return root


def _paper(entry: ET.Element) -> Paper | None:
    """One entry as a Paper; None for an entry with neither id nor link, FeedError for arXiv's
    error entry."""
    entry_id = _text(entry.find("atom:id", NS))
    if "/api/errors" in entry_id:  # arXiv reports a bad query as an entry titled "Error"
        raise FeedError(f"arXiv rejected the query: {_text(entry.find('atom:summary', NS))}")
    link = entry_id
    for candidate in entry.findall("atom:link", NS):
        if candidate.get("rel") == "alternate" and candidate.get("href"):
            link = candidate.get("href", link)
    if not entry_id and not link:
        return None
    return Paper(
        title=_text(entry.find("atom:title", NS)) or "(no title)",
        authors=[_text(a.find("atom:name", NS)) for a in entry.findall("atom:author", NS)],
        published=_text(entry.find("atom:published", NS))[:10],
        updated=_text(entry.find("atom:updated", NS))[:10],
        link=_https(link),
        summary=_text(entry.find("atom:summary", NS)),
        categories=_categories(entry),
        journal_ref=_text(entry.find("arxiv:journal_ref", NS)),
    )


def _categories(entry: ET.Element) -> list[str]:
    """The primary category first, then the others, each once."""
    primary = entry.find("arxiv:primary_category", NS)
    categories = [primary.get("term", "")] if primary is not None else []
    categories += [
        c.get("term", "") for c in entry.findall("atom:category", NS)
        if c.get("term") and c.get("term") not in categories
    ]
    return [c for c in categories if c]
