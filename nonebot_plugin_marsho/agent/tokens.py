"""Counting tokens: tiktoken for the models it knows, else a documented, cautious estimate."""

from __future__ import annotations

import asyncio
import json
import math
import re
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
        self.name = name

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

    def count_text(self, text: str) -> int:
        """Tokens of a piece of text."""
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


async def load_counter(model: str, timeout: float = 15) -> TokenCounter:
    """`TokenCounter.for_model` off the event loop (tiktoken may fetch its tokenizer once), and
    the estimate if that takes longer than `timeout` seconds."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(TokenCounter.for_model, model), timeout)
    except asyncio.TimeoutError:
        logger.warning(f"marsho: loading the tokenizer for {model} took too long; "
                       "counting tokens with the estimate")
        return TokenCounter()
