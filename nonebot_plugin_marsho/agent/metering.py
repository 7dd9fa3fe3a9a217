"""The owner's bill: what each request to an endpoint used and who it was for, written in the
background after the answer, and the daily token quotas checked before a question is asked.

The chat layer says whom the running turn is for with `charged_to(asker)` (a context variable, so
every request of the turn is charged to it: tool rounds, judges and summaries, and tasks the turn
starts); the model's `Metered` part calls `Meter.record` after each answered request. Each request is one row
(`questions` 1 on the first request of a question). Rows are kept in memory and written together
a moment later (`FLUSH_DELAY`); a failed write is logged and never fails a question.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..exceptions import StoreError
from ..redaction import logger
from ..store.usage import ALL, UsageRow, UsageStore
from .model.base import Wrapper
from .tokens import TokenCounter

if TYPE_CHECKING:
    from .model.base import Completion, Model, ModelRequest

FLUSH_DELAY = 0.5
"""Seconds rows wait in memory, so one question's requests (and a burst's) are one write."""

QUOTAS_FRESH = 30.0
"""Seconds this process trusts what it read of the quotas superusers set, when no default quota
is set: until one is, a question costs no read at all (one set by another bot process applies
here within this time; one set here applies at once)."""

MAX_PENDING = 10_000
"""Rows kept in memory while the database fails; older ones are dropped (and logged)."""

MODEL_CHARS = 128
KEY_CHARS = 255
"""The lengths of the usage table's model column and of its key and endpoint columns: longer
values are cut when recorded (a row the database refuses would otherwise block every write)."""


@dataclass(frozen=True)
class TokenUsage:
    """One completion's tokens: as the endpoint reported them, or our estimate (`estimated`)."""

    prompt: int
    completion: int
    cached: int = 0
    """Prompt tokens served from the provider's cache (part of `prompt`)."""
    reasoning: int = 0
    """Completion tokens spent thinking (part of `completion`)."""
    estimated: bool = False


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**12 else 0


def usage_of(response: Mapping[str, Any]) -> TokenUsage | None:
    """The `usage` of a chat completion: OpenAI's shape (`prompt_tokens_details.cached_tokens`,
    `completion_tokens_details.reasoning_tokens`) or DeepSeek's (`prompt_cache_hit_tokens`);
    None when the endpoint sent none, or counts that cannot be right (prompt tokens not a whole
    number above 0, completion tokens not a whole number of 0 or more)."""
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (isinstance(prompt, int) and _count(prompt) > 0
            and isinstance(completion, int) and not isinstance(completion, bool)
            and _count(completion) == completion):
        return None  # zero, negative, booleans, strings: not a real count; our estimate is stored
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = _count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    cached = cached or _count(usage.get("prompt_cache_hit_tokens"))
    reasoning = (_count(completion_details.get("reasoning_tokens"))
                 if isinstance(completion_details, dict) else 0)
    return TokenUsage(prompt, completion, min(cached, prompt), reasoning)


def estimated_usage(counter: TokenCounter, request: Mapping[str, Any], content: str,
                    calls: list[Any]) -> TokenUsage:
    """Our count of a request and its answer, for an endpoint that reports no usage."""
    prompt = sum(counter.count_message(m) for m in request.get("messages") or [] if isinstance(m, dict))
    prompt += counter.count_tools(request.get("tools") or [])
    completion = counter.count_text(content) + sum(
        counter.count_text(f"{call.name}{call.arguments}") + 3 for call in calls)
    return TokenUsage(prompt, completion, estimated=True)


@dataclass
class Asker:
    """Whom a turn's requests are charged to; `question`: the turn is a question (counted once)."""

    session_key: str
    user_key: str
    group_key: str = ""
    question: bool = True


_asker: ContextVar[Asker | None] = ContextVar("marsho_asker", default=None)


@contextmanager
def charged_to(asker: Asker) -> Iterator[Asker]:
    """Requests made until the block ends (here and in tasks started here) are `asker`'s."""
    token = _asker.set(asker)
    try:
        yield asker
    finally:
        _asker.reset(token)


_turn_model: ContextVar[str] = ContextVar("marsho_turn_model", default="")


@contextmanager
def model_for_turn(model: str) -> Iterator[None]:
    """The primary endpoint is asked with `model` until the block ends (MARSHO_QUOTA_FALLBACK_MODEL)."""
    token = _turn_model.set(model)
    try:
        yield
    finally:
        _turn_model.reset(token)


def turn_model() -> str:
    """The model chosen for the running turn ("": the configured one)."""
    return _turn_model.get()


@dataclass(frozen=True)
class Limits:
    """Daily token quotas by default (MARSHO_USER_DAILY_TOKENS...): 0 is none."""

    user: int = 0
    group: int = 0
    all: int = 0

    def default(self, scope: str) -> int:
        return {"user": self.user, "group": self.group, "all": self.all}[scope]


@dataclass(frozen=True)
class OverQuota:
    """A quota already used up: whose (`scope` user, group or all), used and allowed, and when
    it starts again."""

    scope: str
    used: int
    limit: int
    resets_at: datetime


def _data_error(error: StoreError) -> bool:
    """The database refused the data itself (too long, out of range, a constraint), not the
    connection: SQLAlchemy's DataError or IntegrityError behind the StoreError."""
    from sqlalchemy.exc import DataError, IntegrityError

    cause = error.__cause__ or error.__context__
    return isinstance(cause, (DataError, IntegrityError))


class Metered(Wrapper):
    """The part that bills: each answered request of the endpoint at `host` goes to `meter`
    (when one is set), charged to the running turn's asker (`charged_to`, a context variable)."""

    def __init__(self, inner: Model, host: str, meter: Meter | None = None) -> None:
        super().__init__(inner)
        self.host = host
        self.meter = meter

    async def request(self, request: ModelRequest) -> Completion:
        completion = await self.inner.request(request)
        if self.meter is not None:
            self.meter.record(request.model, self.host, completion.usage, request=request.body(),
                              content=completion.content, calls=completion.tool_calls)
        return completion


class Meter:
    """Records usage in the background and checks the daily quotas."""

    def __init__(self, store: UsageStore, *, now: Callable[[], datetime], limits: Limits = Limits(),
                 counter: Callable[[], TokenCounter] = TokenCounter, retention_days: int = 90,
                 flush_delay: float = FLUSH_DELAY) -> None:
        self.store = store
        self.now = now
        """The time in MARSHO_TIMEZONE: its date is the day rows and quotas count in."""
        self.limits = limits
        self.counter = counter
        self.retention_days = retention_days
        self.flush_delay = flush_delay
        self._pending: list[UsageRow] = []
        self._writing: list[list[UsageRow]] = []
        """Rows being written now: the quota check counts them too until they are committed."""
        self._flushing: asyncio.Task[None] | None = None
        self._rolled_day = ""
        self._any_quota: bool | None = None
        self._quotas_read_at = 0.0

    def today(self) -> str:
        return self.now().date().isoformat()

    def record(self, model: str, endpoint: str, usage: TokenUsage | None, *,
               request: Mapping[str, Any], content: str = "", calls: list[Any] | None = None) -> None:
        """Keep one answered request's usage (our estimate when `usage` is None), for the asker of
        the running turn; written shortly after, in the background."""
        if usage is None:
            usage = estimated_usage(self.counter(), request, content, calls or [])
        asker = _asker.get() or Asker(session_key="", user_key="")
        questions = 0
        if asker.question:
            asker.question, questions = False, 1  # the question's first request counts it
        self._pending.append(UsageRow(
            created_at=time.time(), day=self.today(), session_key=asker.session_key[:KEY_CHARS],
            user_key=asker.user_key[:KEY_CHARS], group_key=asker.group_key[:KEY_CHARS],
            model=model[:MODEL_CHARS], endpoint=endpoint[:KEY_CHARS],
            prompt_tokens=usage.prompt, completion_tokens=usage.completion, cached_tokens=usage.cached,
            reasoning_tokens=usage.reasoning, questions=questions, estimated=int(usage.estimated)))
        if len(self._pending) > MAX_PENDING:
            dropped = len(self._pending) - MAX_PENDING
            del self._pending[:dropped]
            logger.error(f"marsho: {dropped} usage rows dropped: the database has not taken them")
        if self._flushing is None or self._flushing.done():
            # a context of its own: not the turn's (its database connection, its asker)
            self._flushing = contextvars.Context().run(asyncio.ensure_future, self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.flush_delay)
        await self.flush()

    async def flush(self) -> None:
        """Write what is pending now. If the batch fails, its rows are tried one at a time: a row
        the database refuses while others are taken (or with a data error) is dropped and logged;
        the rest wait for the next write. A failure never fails a question."""
        rows, self._pending = self._pending, []
        if not rows:
            return
        self._writing.append(rows)
        try:
            try:
                await self.store.write(rows)
            except StoreError as error:
                logger.error(f"marsho: usage of {len(rows)} requests not written yet: {error}")
                self._pending[:0] = await self._write_one_by_one(rows)
                return
            except Exception as error:  # never let the bill fail a question
                logger.opt(exception=error).error("marsho: usage not written")
                return
        finally:
            self._writing = [batch for batch in self._writing if batch is not rows]
        if self._rolled_day != rows[-1].day:
            await self.roll_up()

    async def _write_one_by_one(self, rows: list[UsageRow]) -> list[UsageRow]:
        """Write `rows` one at a time after their batch failed; returns those to try again."""
        failed: list[tuple[UsageRow, StoreError]] = []
        written = 0
        for index, row in enumerate(rows):
            try:
                await self.store.write([row])
            except StoreError as error:
                failed.append((row, error))
                if not written and len(failed) >= 3 and not any(_data_error(e) for _, e in failed):
                    # nothing taken three times: the database is down, not a row wrong; all wait
                    return [failed_row for failed_row, _ in failed] + rows[index + 1:]
            except Exception as unexpected:
                logger.opt(exception=unexpected).error("marsho: a usage row not written")
            else:
                written += 1
        if not failed:
            return []
        keep: list[UsageRow] = []
        for row, refused in failed:
            if written or _data_error(refused):
                logger.error(f"marsho: usage row dropped (the database refuses it: {refused}): "
                             f"model {row.model!r}, user {row.user_key!r}, {row.tokens} tokens")
            else:
                keep.append(row)  # nothing was taken: the database is down, not the row wrong
        return keep

    async def settled(self) -> None:
        """Everything recorded so far is written (or its write failed)."""
        while self._flushing is not None and not self._flushing.done():
            await asyncio.shield(self._flushing)
        await self.flush()

    async def roll_up(self) -> None:
        """Fold rows older than the retention period into daily totals (at startup, and on the
        first write of each day)."""
        self._rolled_day = self.today()
        before = (self.now().date() - timedelta(days=self.retention_days)).isoformat()
        try:
            folded = await self.store.roll_up(before)
        except StoreError as error:
            logger.error(f"marsho: usage older than {before} not rolled up: {error}")
            return
        if folded:
            logger.info(f"marsho: {folded} usage rows older than {before} rolled up into daily totals")

    def resets_at(self) -> datetime:
        """The next midnight in MARSHO_TIMEZONE, when today's quotas start again."""
        now = self.now()
        return datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), now.tzinfo)

    async def over_quota(self, user_key: str, group_key: str = "", limits: Limits | None = None
                         ) -> OverQuota | None:
        """The first quota (the user's, the group's, everyone's) already used up today, or None:
        one indexed read, plus what this process has not written yet. `limits`: the defaults
        (else the meter's own)."""
        limits = limits or self.limits
        if not (limits.user or limits.group or limits.all) and not await self._any_quota_set():
            return None
        scopes = [("user", user_key)] + ([("group", group_key)] if group_key else []) + [("all", ALL)]
        day = self.today()
        used, quotas = await self.store.quota_view(day, scopes)
        for row in [*(row for batch in self._writing for row in batch), *self._pending]:  # not committed yet
            if row.day == day:
                for pair in row.scopes():
                    if pair in scopes:
                        used[pair] = used.get(pair, 0) + row.tokens
        for pair in scopes:
            limit = quotas.get(pair, limits.default(pair[0]))
            if limit and used.get(pair, 0) >= limit:
                return OverQuota(pair[0], used.get(pair, 0), limit, self.resets_at())
        return None

    async def _any_quota_set(self) -> bool:
        if self._any_quota is None or time.monotonic() - self._quotas_read_at > QUOTAS_FRESH:
            self._any_quota = any((await self.store.quotas()).values())
            self._quotas_read_at = time.monotonic()
        return self._any_quota

    async def set_quota(self, scope: str, target: str, tokens: int | None) -> None:
        """A superuser's quota for one user or group (0: none for them; None: the default)."""
        await self.store.set_quota(scope, target, tokens, time.time())
        self._any_quota = None

    async def close(self) -> None:
        """Write what is left."""
        await self.settled()
