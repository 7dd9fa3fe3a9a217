"""Counting tokens: tiktoken for the models it knows, else a documented, cautious estimate."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Protocol

from nonebot.log import logger

MESSAGE_OVERHEAD = 4
"""Tokens each chat message costs beyond its content (role and separators), as OpenAI counts."""

_WIDE = re.compile(
    r"[\u1100-\u11ff\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff00-\uffef"
    r"\U00020000-\U0003ffff]"
)


def estimate_tokens(text: str) -> int:
    """The estimate used when tiktoken does not know the model: one token per CJK (or other
    wide) character, one per three other characters. Real tokenizers give about one per
    character for Chinese and one per four for English, so this errs on the high side: a
    budget counted this way is never exceeded."""
    wide = len(_WIDE.findall(text))
    return wide + math.ceil((len(text) - wide) / 3)


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
        elif content:  # a list of parts (images later): count its JSON, cautiously
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
        note = "\n…[cut to fit the conversation's token budget]"
        room = max(0, max_tokens - self.count_text(note))
        low, high = 0, len(text)
        while low < high:  # the longest prefix that fits
            middle = (low + high + 1) // 2
            if self.count_text(text[:middle]) <= room:
                low = middle
            else:
                high = middle - 1
        return text[:low] + note
