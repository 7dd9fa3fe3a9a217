"""The plugin's own exceptions: each carries a message fit to show a bot owner or a user."""

from __future__ import annotations

from typing import Any


class MarshoError(Exception):
    """Base of every error this plugin raises on purpose."""


class NotReadyError(MarshoError):
    """The plugin could not start (bad settings, startup failure); the message says what to fix."""


class EndpointError(MarshoError):
    """The LLM endpoint could not be reached, refused the request, or answered nonsense."""

    def __init__(self, message: str, *, hint: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        self.status = status

    def __str__(self) -> str:
        text = super().__str__()
        # no space after a Chinese full stop or bracket
        joint = "" if text.endswith(("。", "！", "？", "）", "」")) else " "
        return f"{text}{joint}{self.hint}".strip()


class StoreError(MarshoError):
    """The history database failed; `reply` holds the answer of a turn that could not be saved."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reply: Any = None


class BudgetError(MarshoError):
    """A request cannot fit in MARSHO_HISTORY_TOKENS whatever is left out."""
