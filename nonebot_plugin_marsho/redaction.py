"""Secrets never leave the process: every secret the bot holds (the endpoint's API key, the OneBot
access token, secret-named toolkit presets, the `${NAME}` values of web services and MCP servers)
and one way to hide them in text bound for a chat, a log line, the model, an export or the shell.

A secret is hidden whole, in the spellings it travels in (as is, URL-encoded, escaped in a JSON
string or a repr), and an API key also in the form providers echo it with its middle masked
(`sk-proj-****…abcd`, `sk-ab...wxyz`). The log is process-wide, so the registry is too: the bot
adds what it holds at startup, and `logger` here is NoneBot's logger with every message redacted.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable
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


class Secrets:
    """A set of secret values and the one compiled pattern that finds any of them."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()
        self.add(*values)

    def add(self, *values: Any) -> None:
        """Hide these too (values that are not strings, or too short, are ignored)."""
        fresh = {v.strip() for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET}
        with self._lock:
            if fresh <= self._values:
                return
            self._values |= fresh
            self._pattern = _compile(self._values)

    def discard(self, *values: str) -> None:
        """Stop hiding these (a test's own secrets, a reloaded configuration)."""
        with self._lock:
            self._values -= {v.strip() for v in values}
            self._pattern = _compile(self._values) if self._values else None

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __call__(self, text: str) -> str:
        """`text` with every secret replaced by REDACTED."""
        pattern = self._pattern
        if pattern is None or not text:
            return text
        return pattern.sub(REDACTED, text)


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


def _compile(values: set[str]) -> re.Pattern[str] | None:
    if not values:
        return None
    literal = sorted({s for value in values for s in _spellings(value)}, key=len, reverse=True)
    masked = [m for m in map(_masked, values) if m]
    return re.compile("|".join([*masked, *map(re.escape, literal)]))


@functools.lru_cache(maxsize=256)
def _pattern_of(values: frozenset[str]) -> re.Pattern[str] | None:
    return _compile(set(values))


def hide(text: str, secrets: Iterable[Any], *, min_length: int = MIN_SECRET) -> str:
    """`text` with these secrets hidden, the same way as the process's own (a web service's
    header values, a toolkit's presets): for the few places that hold secrets of their own."""
    values = frozenset(v for v in secrets if isinstance(v, str) and len(v) >= min_length)
    pattern = _pattern_of(values) if values and text else None
    return pattern.sub(REDACTED, text) if pattern is not None else text


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
