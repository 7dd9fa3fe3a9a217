"""The plugin's own exceptions. Each names what went wrong with a `code` (a key of the i18n
catalogues) and its `params`; `str(error)` is the English text, for logs, and only chat/
translates an error for the people in a chat (`Texts.error`)."""

from __future__ import annotations

from typing import Any

from .i18n import text


class MarshoError(Exception):
    """Base of every error this plugin raises on purpose.

    `MarshoError("plain English")` for errors only code and logs read (the library API);
    `MarshoError(code="store.read", url=..., detail=...)` for errors people read, in their
    language. `hint` is the code of a sentence saying what to do, formatted with the same params.
    """

    def __init__(self, message: str = "", /, *, code: str = "", hint: str = "", **params: Any) -> None:
        self.code = code
        self.hint = hint
        self.params = params
        super().__init__(message or text("en", code, **params) if code else message)

    def __str__(self) -> str:
        message = super().__str__()
        return join_hint(message, text("en", self.hint, **self.params)) if self.hint else message


def join_hint(message: str, hint: str) -> str:
    """A message and the hint after it (no space after a Chinese full stop or bracket)."""
    joint = "" if message.endswith(("。", "！", "？", "）", "」")) else " "
    return f"{message}{joint}{hint}".strip()


class NotReadyError(MarshoError):
    """The plugin could not start (bad settings, startup failure); the message says what to fix."""


class EndpointError(MarshoError):
    """The LLM endpoint could not be reached, refused the request, or answered nonsense; `status`
    is the HTTP status when there was one."""

    def __init__(
        self, message: str = "", /, *, code: str = "", hint: str = "", status: int | None = None,
        **params: Any,
    ) -> None:
        if status is not None:
            params["status"] = status
        super().__init__(message, code=code, hint=hint, **params)
        self.status = status
        self.retry_after: float | None = None
        """Seconds the endpoint asked us to wait (its Retry-After header), when it said."""
        self.refused = False
        """The connection was refused (nothing listens there): retrying it helps nobody."""


class StoreError(MarshoError):
    """The history database failed."""


class BudgetError(MarshoError):
    """A request cannot fit in MARSHO_HISTORY_TOKENS whatever is left out."""
