"""Secrets never leave the process: every secret the bot holds (the endpoint's API key, the OneBot
access token, secret-named toolkit presets, the `${NAME}` values of web services and MCP servers)
and one way to hide them in text bound for a chat, a log line, the model, an export or the shell.

A secret is hidden whole, in the spellings it travels in (as is, URL-encoded, escaped in a JSON
string or a repr), and an API key also in the form providers echo it with its middle masked
(`sk-proj-****…abcd`, `sk-ab...wxyz`). What a hostile web service or tool does to a secret it
echoes is undone too: upper or lower case (any case, for secrets of MIN_SECRET characters or
more), base64 (standard or URL-safe, padded or not, alone or inside a longer encoding), hex, a
line break (or an escaped `\n`, or `<br>`) anywhere inside it, and, for secrets of PIECE_SECRET
characters or more, any run of at least half of it (a secret sent in halves loses both). The
log is process-wide, so the registry is too: the bot adds what it holds at startup, and
`logger` here is NoneBot's logger with every message redacted.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote, quote_plus

from nonebot.log import logger as _nonebot_logger

REDACTED = "[redacted]"
"""What a secret becomes."""

MIN_SECRET = 6
"""Shorter values are not hidden: replacing every "admin" or "1234" would garble messages, and
a secret that short protects nothing."""

MASKED_KEY_MIN = 16
"""Keys at least this long are also hidden in the masked form a provider echoes."""

PIECE_SECRET = 16
"""Secrets at least this long are also hidden piece by piece: any run of half of them (at least
PIECE_MIN characters) is a piece, so a secret sent in two halves, or split across two fields of
one result, loses both."""

PIECE_MIN = 10
"""Characters of the shortest piece hidden: half of a 16-character secret such as
`weather-secret-1` is `weather-` (8), a word that must stay readable elsewhere."""

_LINE_BREAK = re.compile(r"(?:\r\n|\n|\\r\\n|\\n|<br\s*/?>)[ \t]*")
"""What may split a secret across lines: a line break, its escape in a JSON string, or an HTML
`<br>`, and the next line's indent (matched in lower case). (CR LF and LF as two branches,
not an optional CR: the same matches, but a pattern that starts with an optional character is
tried at every character of the text, five times slower.)"""


class Secrets:
    """A set of secret values and the one compiled redactor that finds any of them."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._redactor: _Redactor | None = None
        self._lock = threading.Lock()
        self.add(*values)

    def add(self, *values: Any) -> None:
        """Hide these too (values that are not strings, or too short, are ignored)."""
        fresh = {v.strip() for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET}
        with self._lock:
            if fresh <= self._values:
                return
            self._values |= fresh
            self._redactor = _compile(self._values)

    def discard(self, *values: str) -> None:
        """Stop hiding these (a test's own secrets, a reloaded configuration)."""
        with self._lock:
            self._values -= {v.strip() for v in values}
            self._redactor = _compile(self._values) if self._values else None

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __call__(self, text: str) -> str:
        """`text` with every secret replaced by REDACTED."""
        redactor = self._redactor
        if redactor is None or not text:
            return text
        return redactor(text)


def _spellings(secret: str) -> set[str]:
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(secret)[1:-1],
        repr(secret)[1:-1],
    }


def _masked(secret: str) -> str | None:
    """The provider-masked form of an API key: its first characters, a run of `*`, `•`, `x` or
    `...`, and its last four (`sk-proj-********abcd`, `sk-ab...wxyz`)."""
    if len(secret) < MASKED_KEY_MIN:
        return None
    head, tail = re.escape(secret[:3]), re.escape(secret[-4:])
    return rf"{head}[A-Za-z0-9_\-]{{0,12}}(?:[*•]{{3,}}|\.{{3}}|…|x{{6,}})[A-Za-z0-9_\-*•]{{0,8}}?{tail}"


def _encodings(secret: str) -> set[str]:
    """The secret (as is, upper- and lower-cased) in base64, standard and URL-safe, padded and
    not, and the part of its base64 that is the same wherever it starts inside a longer
    encoding (at each of the three byte offsets); and in hex. Forms shorter than MIN_SECRET are
    left out (a short run of base64 matches too much)."""
    forms: set[str] = set()
    for variant in {secret, secret.upper(), secret.lower()}:
        raw = variant.encode("utf-8")
        forms.add(raw.hex())
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            whole = encode(raw).decode("ascii")
            forms |= {whole, whole.rstrip("=")}
            for offset in range(3):  # inside a longer encoding: the characters of its bits only
                shifted = encode(b"\0" * offset + raw).decode("ascii")
                first, end = -(-8 * offset // 6), 8 * (offset + len(raw)) // 6
                forms.add(shifted[first:end])
    return {form for form in forms if len(form) >= MIN_SECRET}


class _Redactor:
    """Finds the secrets in a text: their spellings as written (and the masked form of a key);
    in the text's lower case, every spelling and encoding of those of MIN_SECRET characters or
    more, also with the line breaks taken out; and the pieces of the long ones. Literal
    alternations only, and the lower-cased text searched as is: as fast as the exact search."""

    def __init__(self, values: set[str]) -> None:
        exact = {s for value in values for s in _spellings(value)}
        masked = [m for m in map(_masked, values) if m]
        self.exact = re.compile("|".join([*masked, _trie(exact, alone=True)]))
        long = [value for value in values if len(value) >= MIN_SECRET]
        folded = {form.lower() for value in long for form in _spellings(value) | _encodings(value)}
        self.folded = re.compile(_trie(folded, alone=True)) if folded else None
        self.pieces: dict[str, list[tuple[_Pieces, int]]] = {}
        """Each chunk of the long secrets: the secrets it is of, and where in them."""
        for value in values:
            if len(value) >= PIECE_SECRET:
                pieces = _Pieces(value.lower())
                for chunk, at in pieces.chunks:
                    self.pieces.setdefault(chunk, []).append((pieces, at))
        self.chunks = re.compile(f"({_trie(self.pieces, alone=True)})") if self.pieces else None

    def __call__(self, text: str) -> str:
        spans = [match.span() for match in self.exact.finditer(text)]
        lowered = text.lower()
        if self.folded is not None and len(lowered) == len(text):  # else a letter's lower case is longer
            spans += [match.span() for match in self.folded.finditer(lowered)]
            spans += self._across_lines(lowered)
            spans += self._pieces(lowered)
        return _hidden(text, spans) if spans else text

    def _pieces(self, lowered: str) -> list[tuple[int, int]]:
        """The runs of half a long secret or more (see _Pieces)."""
        if self.chunks is None:
            return []
        spans = []
        for match in _overlapping(self.chunks, lowered):
            for pieces, at in self.pieces[match.group(1)]:
                start, end = pieces.extent(lowered, match.start(), at)
                if end - start >= pieces.width:
                    # the spaces at a piece's ends stay: "token tok-…" is "token [redacted]"
                    while start < end and lowered[start].isspace():
                        start += 1
                    while end > start and lowered[end - 1].isspace():
                        end -= 1
                    spans.append((start, end))
        return spans

    def _across_lines(self, lowered: str) -> list[tuple[int, int]]:
        """The secrets split by line breaks: searched in the text without them, found where
        they stand in the text."""
        if self.folded is None:
            return []
        joined, count = _LINE_BREAK.subn("", lowered)
        # most texts with line breaks hold no secret across them: where each kept character
        # stands is worked out only for one that does
        if not count or self.folded.search(joined) is None:
            return []
        starts: list[int] = []  # where each kept character stands in the text
        last = 0
        for line_break in _LINE_BREAK.finditer(lowered):
            starts += range(last, line_break.start())
            last = line_break.end()
        starts += range(last, len(lowered))
        return [(starts[match.start()], starts[match.end() - 1] + 1)
                for match in self.folded.finditer(joined)]


def _trie(words: Iterable[str], *, alone: bool = False) -> str:
    """A pattern matching any of `words`, the longest first, as a trie: the re module tries an
    alternation's branches one by one at each character, which for the hundreds of forms of a
    few secrets costs ten times the search of this one. `alone`: the pattern is the whole
    pattern, or one branch of it (`a|b`, not `(?:a|b)`: the same matches, but a pattern whose
    every branch starts with a character is searched for those characters first, two to three
    times faster than one that starts with a group)."""
    root: dict[str, dict] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    if alone and "" not in root:
        return "|".join(re.escape(char) + _branches(child) for char, child in sorted(root.items()))
    return _branches(root)


def _overlapping(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """Where `pattern` matches, at every position it matches at, overlapping matches too (what
    `(?=(...))` finds, but a search for its first characters rather than a try at each one)."""
    position = 0
    while (match := pattern.search(text, position)) is not None:
        yield match
        position = match.start() + 1


def _branches(node: dict[str, dict]) -> str:
    branches = [re.escape(char) + _branches(child) for char, child in sorted(node.items()) if char]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
    if "" not in node:
        return body
    return f"(?:{body})?" if len(branches) == 1 else f"{body}?"


def _hidden(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span (overlapping ones together) replaced by REDACTED."""
    kept, last = [], 0
    for start, end in sorted(spans):
        if start < last:  # overlaps the span before: hidden with it
            last = max(last, end)
            continue
        kept += [text[last:start], REDACTED]
        last = end
    return "".join([*kept, text[last:]])


class _Pieces:
    """The runs of at least half of a long secret (PIECE_MIN at least) in a text, in any case:
    found by the secret's chunks of a quarter of it, each extended as far as the text goes on
    along the secret (a run of half the secret holds one whole chunk)."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.width = max(PIECE_MIN, len(secret) // 2)
        self.chunk = max(1, self.width // 2)
        self.chunks = [(secret[at:at + self.chunk], at)
                       for at in range(0, len(secret) - self.chunk + 1, self.chunk)]

    def extent(self, folded: str, found: int, at: int) -> tuple[int, int]:
        """The run of the secret around its chunk at `at`, found at `found` in the text."""
        before = 0
        while before < min(found, at) and folded[found - before - 1] == self.secret[at - before - 1]:
            before += 1
        after = found + self.chunk
        stop = min(len(folded), found + len(self.secret) - at)
        while after < stop and folded[after] == self.secret[at + after - found]:
            after += 1
        return found - before, after


def _compile(values: set[str]) -> _Redactor | None:
    return _Redactor(values) if values else None


@functools.lru_cache(maxsize=256)
def _redactor_of(values: frozenset[str]) -> _Redactor | None:
    return _compile(set(values))


def hide(text: str, secrets: Iterable[Any], *, min_length: int = MIN_SECRET) -> str:
    """`text` with these secrets hidden, the same way as the process's own (a web service's
    header values, a toolkit's presets): for the few places that hold secrets of their own."""
    values = frozenset(v for v in secrets if isinstance(v, str) and len(v) >= min_length)
    redactor = _redactor_of(values) if values and text else None
    return redactor(text) if redactor is not None else text


SECRETS = Secrets()
"""The secrets of this process, which the log, the chat, the model and the shell never see."""


def redact(text: str) -> str:
    """`text` without any of this process's secrets."""
    return SECRETS(text)


def _redact_record(record: Any) -> None:
    record["message"] = SECRETS(record["message"])
    caught = record["exception"]
    if caught is not None and caught.value is not None:
        said = f"{type(caught.value).__name__}: {caught.value}"
        hidden = SECRETS(said)
        if hidden != said:  # the traceback would print the secret: only its redacted line is kept
            record["exception"] = None
            record["message"] += f" ({hidden})"


logger = _nonebot_logger.patch(_redact_record)
"""NoneBot's logger, every message redacted: the plugin's modules log through it."""
