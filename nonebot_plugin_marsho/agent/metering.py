"""The owner's bill: what each request to an endpoint used and who it was for, written in the
background after the answer, and the daily token quotas, which hold within a turn.

The chat layer says whom the running turn is for with `charged_to(asker)` (a context variable, so
every request of the turn is charged to it: tool rounds, judges and summaries, and tasks the turn
starts); the model's `Metered` part calls `Meter.record` after each answered request. Each request is one row
(`questions` 1 on the first request of a question). Rows are kept in memory and written together
a moment later (`FLUSH_DELAY`); a failed write is logged and never fails a question.

Quotas hold within a turn: inside `held_to_quota(...)` the `Metered` part asks `Meter.hold` before
every request (each tool round, summaries, the judge), which refuses it with `QuotaReached` when a
quota of whom it is billed to is used up, and otherwise holds an estimate of its prompt against
those quotas until its usage is known, so requests in flight count too (six questions at once
cannot all pass on the same room).

Who pays in a group (`split_with_group`, `billed_to_group`): a member pays for what they add, their
question, its tool rounds and its answer, and the system prompt and tools each request of theirs
carries; what other people wrote is the group's: in a shared conversation (MARSHO_SESSION_SCOPE
group) the earlier conversation each request carries (the summary and earlier turns), in any group
the recent chat of others that goes with a question, and the whole of an unsolicited reply (and
the judge's request before it) and of a shared conversation's summaries. The group's part of a
request is a row of its own with no user (`store.usage.SHARE_ENDPOINT`): the group's and
everyone's totals count all of it, the member's only their own part, so no member can spend
another's quota on purpose, and `marsho.usage` shows the same figures the quotas count.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..exceptions import MarshoError, StoreError
from ..redaction import logger
from ..store.usage import ALL, SHARE_ENDPOINT, UsageRow, UsageStore
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
    """Whom a turn's requests are charged to (`user_key` "": the group's, `billed_to_group`);
    `question`: the turn is a question (counted once)."""

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


class QuotaReached(MarshoError):
    """A request refused before it was sent: a daily quota of whom it is billed to is used up
    (`over` says whose); the engine ends the turn with what was answered so far."""

    def __init__(self, over: OverQuota) -> None:
        super().__init__(code=f"quota.used_up_{over.scope}", used=f"{over.used:,}", limit=f"{over.limit:,}",
                         resets=over.resets_at.strftime("%Y-%m-%d %H:%M %Z").strip())
        self.over = over


_held: ContextVar[tuple[Limits | None] | None] = ContextVar("marsho_quota_held", default=None)


@contextmanager
def held_to_quota(limits: Limits | None = None) -> Iterator[None]:
    """Every request until the block ends (here and in tasks started here) is first checked
    against the daily quotas of whom it is billed to, with `limits` the defaults (None: the
    meter's own), and counts against them while in flight (`Meter.hold`). Outside such a block
    nothing is checked: superusers, a turn the cheaper model answers."""
    token = _held.set((limits,))
    try:
        yield
    finally:
        _held.reset(token)


@dataclass
class Share:
    """What of each request of a turn in a group is the group's to pay, not the asker's (the
    rule: this module's docstring). The chat layer gives `shared` and `recent`; the engine sets
    `history` before each request it sends."""

    shared: bool
    """The conversation is the group's (MARSHO_SESSION_SCOPE group): its earlier turns are too."""
    recent: int = 0
    """Tokens of the recent chat of others that goes with the question."""
    history: int = 0
    """Tokens of the earlier conversation (summary, earlier turns) in the request being sent."""

    def tokens(self) -> int:
        """The group's part of the request being sent (our count)."""
        return self.recent + (self.history if self.shared else 0)


_share: ContextVar[Share | None] = ContextVar("marsho_share", default=None)


@contextmanager
def split_with_group(shared: bool, recent: int = 0) -> Iterator[Share]:
    """Requests until the block ends are split between the asker and their group (`Share`)."""
    share = Share(shared, recent)
    token = _share.set(share)
    try:
        yield share
    finally:
        _share.reset(token)


def current_share() -> Share | None:
    """The running turn's split with its group, if it is in one."""
    return _share.get()


@contextmanager
def billed_to_group(*, turn: bool = False) -> Iterator[None]:
    """Requests until the block ends go wholly to the running asker's group, not to them: the
    judge's, a shared conversation's summaries (`billed_to_conversation`); `turn`: a whole turn
    nobody asked for (an unsolicited reply), whose question is counted there too. Outside a
    group nothing changes."""
    asker = _asker.get()
    if asker is None or not asker.group_key or not asker.user_key:
        yield
        return
    token = _asker.set(dataclasses.replace(asker, user_key="", question=turn and asker.question))
    try:
        yield
    finally:
        _asker.reset(token)


@contextmanager
def billed_to_conversation() -> Iterator[None]:
    """A request made of the conversation itself (a summary of its turns): the group's in a
    shared conversation, the asker's otherwise."""
    share = _share.get()
    if share is None or not share.shared:
        yield
        return
    with billed_to_group():
        yield


def _scopes(asker: Asker) -> list[tuple[str, str]]:
    """The quotas requests billed to `asker` count against."""
    return ([("user", asker.user_key)] if asker.user_key else []) + (
        [("group", asker.group_key)] if asker.group_key else []) + [("all", ALL)]


IMAGE_TOKENS = 1000
"""What a picture in a request holds while in flight (a high-detail picture costs OpenAI's models
765 to 1,105 tokens), whatever the size of its base64."""


def prompt_estimate(request: ModelRequest) -> int:
    """A quick estimate of a request's prompt tokens, for what it holds while in flight: its
    JSON's length over four (ASCII-escaped, a CJK character counts 1.5) and IMAGE_TOKENS per
    picture, at least 1."""
    size, images = 0, 0
    for message in request.messages:
        content = message.get("content")
        if isinstance(content, list):
            kept = [part for part in content
                    if not (isinstance(part, dict) and part.get("type") == "image_url")]
            images += len(content) - len(kept)
            message = {**message, "content": kept}
        size += len(json.dumps(message, default=str))
    if request.tools:
        size += len(json.dumps(request.tools, default=str))
    return max(1, size // 4 + images * IMAGE_TOKENS)


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
        meter = self.meter
        if meter is None:
            return await self.inner.request(request)
        hold = await meter.hold(request)  # QuotaReached: not sent
        try:
            completion = await self.inner.request(request)
            # a stream without its usage chunk: its reasoning was written too, and is billed
            said = (f"{completion.reasoning}\n{completion.content}"
                    if completion.streamed and completion.reasoning else completion.content)
            meter.record(request.model, self.host, completion.usage, request=request.body(),
                         content=said, calls=completion.tool_calls)
        finally:
            meter.release(hold)  # in the same step as the record: the tokens are never counted twice
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
        self._holds: dict[int, dict[tuple[str, str], int]] = {}
        """What each request in flight holds against the quotas (Meter.hold), by its number."""
        self._hold_numbers = itertools.count(1)

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
        share = _share.get()
        common = min(share.tokens(), usage.prompt) if share and asker.user_key and asker.group_key else 0
        common_cached = usage.cached * common // usage.prompt if common else 0
        row = UsageRow(
            created_at=time.time(), day=self.today(), session_key=asker.session_key[:KEY_CHARS],
            user_key=asker.user_key[:KEY_CHARS], group_key=asker.group_key[:KEY_CHARS],
            model=model[:MODEL_CHARS], endpoint=endpoint[:KEY_CHARS],
            prompt_tokens=usage.prompt - common, completion_tokens=usage.completion,
            cached_tokens=usage.cached - common_cached, reasoning_tokens=usage.reasoning,
            questions=questions, estimated=int(usage.estimated))
        self._pending.append(row)
        if common:  # the group's part of the same request: a row of its own, not a request
            self._pending.append(dataclasses.replace(
                row, user_key="", endpoint=SHARE_ENDPOINT, prompt_tokens=common, completion_tokens=0,
                cached_tokens=common_cached, reasoning_tokens=0, questions=0, estimated=0))
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
        one indexed read, plus what this process has not written yet and what its requests in
        flight hold (a question asked while others are answered waits for none of them to
        finish). `limits`: the defaults (else the meter's own)."""
        return await self._over([("user", user_key)] + ([("group", group_key)] if group_key else [])
                                + [("all", ALL)], limits or self.limits)

    async def over_group_quota(self, group_key: str, limits: Limits | None = None) -> OverQuota | None:
        """The group's or everyone's quota used up today, or None: for what is the group's bill
        (an unsolicited reply), whatever the member it answers has used."""
        return await self._over([("group", group_key), ("all", ALL)], limits or self.limits)

    async def _over(self, scopes: list[tuple[str, str]], limits: Limits) -> OverQuota | None:
        """The first of `scopes` whose quota is used up: what the database holds, what this
        process has not written yet, and what its requests in flight hold."""
        if not await self._applies(limits):
            return None
        day = self.today()
        used, quotas = await self.store.quota_view(day, scopes)
        # from here on nothing is awaited: a request checked at the same time as another sees
        # what the other holds, or the other sees its hold (Meter.hold)
        for row in [*(row for batch in self._writing for row in batch), *self._pending]:  # not committed yet
            if row.day == day:
                for pair in row.scopes():
                    if pair in scopes:
                        used[pair] = used.get(pair, 0) + row.tokens
        for hold in self._holds.values():
            for pair, tokens in hold.items():
                if pair in scopes:
                    used[pair] = used.get(pair, 0) + tokens
        for pair in scopes:
            limit = quotas.get(pair, limits.default(pair[0]))
            if limit and used.get(pair, 0) >= limit:
                return OverQuota(pair[0], used.get(pair, 0), limit, self.resets_at())
        return None

    async def hold(self, request: ModelRequest) -> int | None:
        """Before a request inside `held_to_quota`: QuotaReached if a quota of whom it is billed to
        is used up (what is in flight counted), else an estimate of its prompt held against those
        quotas until `release` (its number; None: nothing is checked or held)."""
        held, asker = _held.get(), _asker.get()
        if held is None or asker is None:
            return None
        limits = held[0] or self.limits
        if not await self._applies(limits):
            return None  # no quota anywhere (the default): no read, nothing held
        scopes = _scopes(asker)
        over = await self._over(scopes, limits)
        if over is not None:
            raise QuotaReached(over)
        estimate = prompt_estimate(request)
        share = _share.get()
        own = max(1, estimate - share.tokens()) if share is not None and asker.group_key else estimate
        number = next(self._hold_numbers)
        self._holds[number] = {pair: own if pair[0] == "user" else estimate for pair in scopes}
        return number

    def release(self, number: int | None) -> None:
        """A request's usage is known (or it failed): what it held counts no more."""
        if number is not None:
            self._holds.pop(number, None)

    async def _applies(self, limits: Limits) -> bool:
        """Whether any quota may apply: a default one, or one a superuser set (read at most every
        QUOTAS_FRESH s)."""
        return bool(limits.user or limits.group or limits.all) or await self._any_quota_set()

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
