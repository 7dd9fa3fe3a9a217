"""HTML → compact readable text: title, headings, paragraphs, list items, table rows, and links
numbered once and listed at the end. Scripts, styles, navigation, forms and hidden parts go.

Parsed with lxml (libxml2's forgiving HTML parser): a 2 MB page takes well under a second,
where a pure-Python tree builder takes several.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

if TYPE_CHECKING:  # lxml (~10 ms) is imported at the first page read, not with the toolkit
    from lxml import html as lxml_html

SKIPPED = frozenset({
    "script", "style", "noscript", "template", "svg", "math", "canvas", "iframe", "object",
    "embed", "nav", "form", "button", "input", "select", "textarea", "option", "head", "link",
    "meta", "dialog", "audio", "video", "picture", "map", "footer",
})
"""Elements whose content is not part of what a reader reads."""

BLOCKS = frozenset({
    "p", "div", "section", "article", "main", "header", "aside", "blockquote",
    "ul", "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "figure",
    "figcaption", "address", "details", "summary", "hr", "body", "html", "center", "caption",
    "fieldset", "legend",
})
"""Elements that start and end a block of text."""

HEADINGS = {f"h{level}": level for level in range(1, 7)}

MAX_LINKS = 40
"""Links numbered at most; the ones further down the page are left unnumbered."""

_SPACES = re.compile(r"[ \t\r\f\v\u00a0\u200b]+")
_MANY_NEWLINES = re.compile(r"\n{3,}")


@dataclass
class Page:
    """A web page as text."""

    title: str
    text: str
    links: list[str] = field(default_factory=list)


def _hidden(element: lxml_html.HtmlElement) -> bool:
    if "hidden" in element.attrib or element.get("aria-hidden") == "true":
        return True
    style = (element.get("style") or "").replace(" ", "").lower()
    if "display:none" in style or "visibility:hidden" in style:
        return True
    return element.get("role") in ("navigation", "banner", "search", "dialog", "contentinfo")


class _Writer:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.blocks: list[str] = []
        self.inline: list[str] = []
        self.links: list[str] = []
        self.link_numbers: dict[str, int] = {}
        self.markers: dict[str, str] = {}
        """href as written → its marker, so that a link repeated is resolved once."""
        self.prefix = ""
        """Put before the next block written ("- " in a list item, "## " in a heading)."""

    def text(self, value: str | None) -> None:
        if value:
            self.inline.append(_SPACES.sub(" ", value.replace("\n", " ")))

    def flush(self) -> None:
        text = "".join(self.inline)
        self.inline = []
        lines = [" ".join(line.split()) for line in text.split("\n")]
        text = "\n".join(line for line in lines if line)
        if text:
            self.blocks.append(self.prefix + text)
            self.prefix = ""

    def link(self, href: str) -> str:
        """' [n]' naming the link in the list at the end, or '' for links not worth listing."""
        marker = self.markers.get(href)
        if marker is None:
            marker = "" if len(self.links) >= MAX_LINKS else self._number(href)
            self.markers[href] = marker
        return marker

    def _number(self, href: str) -> str:
        href = href.strip()
        if not href or href.startswith("#"):
            return ""
        try:
            url = urljoin(self.base_url, href)
            scheme = urlsplit(url).scheme
        except ValueError:  # a malformed address (an unclosed IPv6 bracket...)
            return ""
        if scheme not in ("http", "https"):
            return ""  # javascript:, mailto:, data:...
        url = url.split("#", 1)[0]
        number = self.link_numbers.get(url)
        if number is None:
            self.links.append(url)
            number = self.link_numbers[url] = len(self.links)
        return f" [{number}]"


def parse_html(data: bytes | str, encoding: str | None = None) -> lxml_html.HtmlElement | None:
    """The document's root element, or None when there is no document at all.

    Bytes are decoded as `encoding` (the HTTP charset) when given and known, else as the page's
    own <meta charset> says.
    """
    from lxml import etree
    from lxml import html as lxml_html

    if isinstance(data, str):
        data, encoding = data.encode("utf-8"), "utf-8"
    options = {"remove_comments": True, "remove_pis": True, "huge_tree": True, "no_network": True}
    try:
        parser = lxml_html.HTMLParser(encoding=encoding, **options)
    except LookupError:  # a charset lxml does not know: let it find one
        parser = lxml_html.HTMLParser(**options)
    try:
        root = lxml_html.document_fromstring(data, parser=parser)
    except (etree.ParserError, ValueError):  # "Document is empty"
        return None
    return root if isinstance(root, lxml_html.HtmlElement) else None


def _content_root(root: lxml_html.HtmlElement) -> lxml_html.HtmlElement:
    """The page's main content when it marks it (<main>, a single <article>), else the body."""
    for candidate in root.iterfind(".//main"):
        if candidate.text_content().strip():
            return candidate
    for candidate in root.iterfind(".//*[@role='main']"):
        if candidate.text_content().strip():
            return candidate
    articles = root.findall(".//article")
    if len(articles) == 1 and articles[0].text_content().strip():
        return articles[0]
    body = root.find("body")
    return body if body is not None else root


def html_to_text(data: bytes | str, base_url: str, encoding: str | None = None) -> Page:
    """Readable text of an HTML document; relative links are resolved against `base_url`."""
    root = parse_html(data, encoding)
    if root is None:
        return Page("", "")
    title_tag = root.find(".//title")
    title = " ".join(title_tag.text_content().split()) if title_tag is not None else ""
    writer = _Writer(_document_base(root, base_url))
    _walk(_content_root(root), writer)
    writer.flush()
    text = "\n".join(writer.blocks)
    return Page(title=title, text=_MANY_NEWLINES.sub("\n\n", text).strip(), links=writer.links)


def _document_base(root: lxml_html.HtmlElement, base_url: str) -> str:
    """The address relative links resolve against: the page's <base href>, else `base_url`."""
    base = root.find(".//base[@href]")
    if base is not None:
        try:
            return urljoin(base_url, base.get("href", ""))
        except ValueError:
            pass
    return base_url


def _walk(content: lxml_html.HtmlElement, writer: _Writer) -> None:
    """Write `content` and everything in it, in document order."""
    # walked with a stack, not recursion: a page may nest thousands of elements deep.
    # ("enter", e): start e; ("leave", e): end e; ("tail", e): the text after e, inside e's parent
    stack: list[tuple[str, lxml_html.HtmlElement, int]] = [("enter", content, 0)]
    while stack:
        action, element, started = stack.pop()
        if action == "tail":
            writer.text(element.tail)
            continue
        if action == "leave":
            _leave(element, writer, started)
            continue
        if element is not content:
            stack.append(("tail", element, 0))
        if _enter(element, writer):
            stack.append(("leave", element, len(writer.inline)))
            writer.text(element.text)
            stack.extend(("enter", child, 0) for child in reversed(element))


def _enter(element: lxml_html.HtmlElement, writer: _Writer) -> bool:
    """Start writing `element`; False when its content is not walked (skipped, hidden, or
    written whole)."""
    tag = element.tag if isinstance(element.tag, str) else ""
    tag = tag.lower()
    if not tag or tag in SKIPPED or _hidden(element):
        return False
    whole = _WRITTEN_WHOLE.get(tag)
    if whole is not None:
        whole(element, writer)
        return False
    if tag in HEADINGS or tag == "li" or tag in BLOCKS:
        writer.flush()
        if tag in HEADINGS:
            writer.prefix = "#" * HEADINGS[tag] + " "
        elif tag == "li":
            writer.prefix = "- "
    return True


def _write_break(element: lxml_html.HtmlElement, writer: _Writer) -> None:
    writer.inline.append("\n")


def _write_preformatted(element: lxml_html.HtmlElement, writer: _Writer) -> None:
    writer.flush()
    code = element.text_content().strip("\n")
    if code.strip():
        writer.blocks.append(code)


def _write_image(element: lxml_html.HtmlElement, writer: _Writer) -> None:
    alt = " ".join((element.get("alt") or "").split())
    if alt:
        writer.text(f" [image: {alt}] ")


_WRITTEN_WHOLE: dict[str, Callable[[lxml_html.HtmlElement, _Writer], None]] = {
    "br": _write_break,
    "pre": _write_preformatted,
    "img": _write_image,
}
"""Elements written at once, their content not walked: a line break, a block of code kept as
it is, a picture's alt text."""


def _leave(element: lxml_html.HtmlElement, writer: _Writer, started: int) -> None:
    tag = str(element.tag).lower()
    if tag == "a" and element.get("href") and "".join(writer.inline[started:]).strip():
        writer.inline.append(writer.link(element.get("href", "")))
    elif tag in ("td", "th"):
        writer.inline.append(" | ")
    if tag == "tr":
        text = "".join(writer.inline).rstrip()
        writer.inline = [text[:-1] if text.endswith("|") else text]
    if tag in HEADINGS or tag == "li" or tag in BLOCKS:
        writer.flush()
        writer.prefix = ""


def strip_tags(fragment: str) -> str:
    """Text of a small HTML fragment (a search snippet with <strong> in it)."""
    if "<" not in fragment and "&" not in fragment:
        return " ".join(fragment.split())
    from lxml import etree
    from lxml import html as lxml_html

    try:
        element = lxml_html.fragment_fromstring(fragment, create_parent="div")
    except (etree.ParserError, ValueError):
        return " ".join(fragment.split())
    return " ".join(element.text_content().split())
