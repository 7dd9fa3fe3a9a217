"""Counting tokens: tiktoken for the models it knows, else a documented, cautious estimate."""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from ..redaction import logger

_NOTES = ("\n…[cut to fit the conversation's token budget]", "…[cut]")

MESSAGE_OVERHEAD = 4
"""Tokens each chat message costs beyond its content (role and separators), as OpenAI counts."""

_CJK = re.compile(r"[\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef]")
_ASTRAL = re.compile(r"[\U00010000-\U0010ffff]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


IMAGE_TOKENS = 800
"""What one picture costs a request: OpenAI's models charge 85-1105 tokens a picture by size and
detail, others similar; counted at a flat, cautious rate (its base64 is never counted as text)."""


def estimate_tokens(text: str) -> int:
    """The estimate used when tiktoken does not know the model, cautious on purpose: 1 token
    per 3 ASCII characters, 1.5 per Chinese/Japanese/Korean character, 3 per emoji (or other
    character beyond U+FFFF), 1 per other character. Real tokenizers give about 1 per 4 English
    characters and about 1.2 per Chinese character, so a budget counted this way holds."""
    if text.isascii():  # the common case (English, JSON schemas), without a Python loop
        return math.ceil(len(text) / 3)
    astral = len(_ASTRAL.findall(text))
    cjk = len(_CJK.findall(text))
    ascii_chars = len(text) - len(_NON_ASCII.findall(text))
    other = len(text) - astral - cjk - ascii_chars
    return math.ceil(ascii_chars / 3 + cjk * 1.5 + astral * 3 + other)


class _Encoding(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...


class TokenCounter:
    """Counts the tokens of messages for one model."""

    def __init__(self, encoding: _Encoding | None = None, name: str = "estimate") -> None:
        self._encoding = encoding
        self._name = name
        self._model: str | None = None
        """The model whose encoding is looked up at the first count (`deferred`), until then."""

    @property
    def name(self) -> str:
        """What counts: `tiktoken <encoding>`, `estimate`, or, before the first count of a
        `deferred` counter (a start's log line asks before any), `chosen at the first count`."""
        return self._name

    @classmethod
    def for_model(cls, model: str) -> TokenCounter:
        """tiktoken's encoding when it knows the model and can load it, else the estimate.

        Loading may fetch the encoding once from the internet (tiktoken caches it); call this
        off the event loop.
        """
        try:
            import tiktoken

            encoding_name = tiktoken.encoding_name_for_model(model)
        except (ImportError, KeyError):
            return cls()
        try:
            return cls(tiktoken.get_encoding(encoding_name), f"tiktoken {encoding_name}")
        except Exception as error:  # offline, or a broken cache
            logger.warning(f"marsho: tiktoken could not load {encoding_name} for {model} "
                           f"({type(error).__name__}); counting tokens with the estimate")
            return cls()

    @classmethod
    def deferred(cls, model: str) -> TokenCounter:
        """The counter `for_model` gives, looked up at its first count: nothing is imported
        before (tiktoken is about 1.2 MB, an encoding tens of MB), and nothing is downloaded on
        the thread that counts. An encoding tiktoken has on disk (its cache, or a package's file)
        is loaded then; one it would have to fetch is fetched in a thread of its own, counting
        with the estimate until it is loaded."""
        counter = cls(name="chosen at the first count")
        counter._model = model
        return counter

    def _resolve(self) -> None:
        model, self._model = self._model, None
        if model is None:
            return
        self._name = "estimate"
        try:
            import tiktoken

            encoding_name = tiktoken.encoding_name_for_model(model)
        except (ImportError, KeyError):
            return
        try:
            with _offline():
                self._encoding, self._name = tiktoken.get_encoding(encoding_name), f"tiktoken {encoding_name}"
        except _NotOnDisk:
            logger.info(f"marsho: fetching tiktoken's {encoding_name} for {model}; counting tokens with "
                        "the estimate until it is loaded")
            threading.Thread(target=self._fetch, args=(model, encoding_name), daemon=True,
                             name="marsho-tiktoken").start()
        except Exception as error:  # a broken cache
            logger.warning(f"marsho: tiktoken could not load {encoding_name} for {model} "
                           f"({type(error).__name__}); counting tokens with the estimate")

    def _fetch(self, model: str, encoding_name: str) -> None:
        loaded = TokenCounter.for_model(model)  # logs when it cannot
        if loaded._encoding is not None:
            self._encoding, self._name = loaded._encoding, f"tiktoken {encoding_name}"

    def count_text(self, text: str) -> int:
        """Tokens of a piece of text."""
        if self._model is not None:
            self._resolve()
        if self._encoding is None:
            return estimate_tokens(text)
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_message(self, message: dict[str, Any]) -> int:
        """Tokens one message adds to a request: its content, tool calls and overhead."""
        total = MESSAGE_OVERHEAD
        content = message.get("content")
        if isinstance(content, str):
            total += self.count_text(content)
        elif isinstance(content, list):  # content parts: text, and pictures at a flat rate
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    total += self.count_text(str(part.get("text", "")))
                elif isinstance(part, dict) and part.get("type") == "image_url":
                    total += IMAGE_TOKENS
                else:
                    total += self.count_text(json.dumps(part, ensure_ascii=False))
        elif content:
            total += self.count_text(json.dumps(content, ensure_ascii=False))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += self.count_text(f"{function.get('name', '')}{function.get('arguments', '')}") + 3
        if message.get("reasoning_content"):
            total += self.count_text(str(message["reasoning_content"]))
        return total

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        """Tokens the tool schemas add to a request."""
        return self.count_text(json.dumps(tools, ensure_ascii=False)) if tools else 0

    def truncate(self, text: str, max_tokens: int) -> str:
        """The start of `text` within `max_tokens`, with a note saying it was cut."""
        if self.count_text(text) <= max_tokens:
            return text
        # the longest note that leaves room, so even a tiny limit is kept
        note = next((n for n in _NOTES if self.count_text(n) < max_tokens), "")
        room = max(0, max_tokens - self.count_text(note))
        low, high = 0, len(text)
        while low < high:  # the longest prefix that fits
            middle = (low + high + 1) // 2
            if self.count_text(text[:middle]) <= room:
                low = middle
            else:
                high = middle - 1
        return text[:low] + note


async def load_counter(model: str) -> TokenCounter:
    """The counter for `model`, looked up at its first count (`TokenCounter.deferred`): a start
    imports and downloads nothing for it."""
    return TokenCounter.deferred(model)


class _NotOnDisk(Exception):
    """tiktoken would have to download the encoding (`_offline`)."""


_local = threading.local()
_guard_lock = threading.Lock()


@contextmanager
def _offline() -> Iterator[None]:
    """In this thread, until the block ends, tiktoken reads its files from disk only: a file it
    would download raises _NotOnDisk instead (other threads are left alone)."""
    import tiktoken.load

    with _guard_lock:
        if not getattr(tiktoken.load.read_file, "_marsho_guard", False):
            tiktoken.load.read_file = _guarded(tiktoken.load.read_file)
    _local.offline = True
    try:
        yield
    finally:
        _local.offline = False


def _guarded(read_file: Any) -> Any:
    def read(blobpath: str) -> bytes:
        if getattr(_local, "offline", False) and "://" in blobpath:
            raise _NotOnDisk(blobpath)
        data: bytes = read_file(blobpath)
        return data

    read._marsho_guard = True  # type: ignore[attr-defined]
    return read
