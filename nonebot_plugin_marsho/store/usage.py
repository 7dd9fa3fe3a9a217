"""The owner's bill in the database: each request's tokens, daily roll-ups, running daily totals
for quotas, and the quotas superusers set; in the history's database, so bot processes share it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import case, delete, func, insert, literal, or_, select, text, union_all
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .sql import (
    SqlStore,
    _describe,
    _lock_id,
    quotas_table,
    usage_daily_table,
    usage_table,
    usage_totals_table,
)

ALL = "*"
"""The target of the `all` scope: every user together."""

SHARE_ENDPOINT = ""
"""The endpoint of a row that is a group's part of another row's request (the earlier conversation
of a shared one, the recent chat of others: agent/metering.py states the rule): its user_key is
empty, it counts in the group's and everyone's tokens, and it is not a request of its own."""


@dataclass(frozen=True)
class UsageRow:
    """One request to an endpoint: when, whose, which model where, and its tokens."""

    created_at: float
    day: str
    session_key: str
    user_key: str
    group_key: str
    model: str
    endpoint: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    questions: int = 0
    estimated: int = 0

    @property
    def tokens(self) -> int:
        """What a quota counts: prompt tokens (cached ones included) plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def scopes(self) -> list[tuple[str, str]]:
        """The running totals this row adds to (a group's part of a request: no user's)."""
        scopes = [("user", self.user_key), ("all", ALL)] if self.user_key else [("all", ALL)]
        if self.group_key:
            scopes.append(("group", self.group_key))
        return scopes


@dataclass(frozen=True)
class DailyUse:
    """The use of one day by one user in one group with one model (a report's line)."""

    day: str
    user_key: str
    group_key: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    questions: int
    estimated: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


_SUMS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "questions", "estimated")


def _requests(endpoint: Any) -> Any:
    """The requests among rows: each row but a group's part of another's request."""
    return func.sum(case((endpoint == SHARE_ENDPOINT, 0), else_=1)).label("requests")


class UsageStore:
    """Reads and writes the usage tables through the history's SqlStore."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def _insert(self, table: Any) -> Any:
        return self.store.upsert(table)

    async def write(self, rows: Sequence[UsageRow]) -> None:
        """Store the rows and add their tokens to the running totals, in one transaction."""
        if not rows:
            return
        totals: dict[tuple[str, str, str], int] = {}
        for row in rows:
            for scope, target in row.scopes():
                key = (row.day, scope, target)
                totals[key] = totals.get(key, 0) + row.tokens
        await self.store._ready()
        direct, lock = self.store._direct, self.store._write_lock
        if direct is not None and lock is not None:
            # a SQLite file: both statements in one hop to its thread, in one transaction
            params = [{"day": day, "scope": scope, "target": target, "tokens": tokens}
                      for (day, scope, target), tokens in sorted(totals.items())]
            values = [row.__dict__ for row in rows]
            try:
                async with lock:
                    await direct.insert(INSERT_USAGE, values, (ADD_TOTALS, params))
            except (sqlite3.Error, TypeError, ValueError) as error:
                raise StoreError(code="store.save", url=self.store.safe_url,
                                 detail=_describe(error)) from None
            return
        try:
            async with self.store._connection(write=True) as conn:
                await conn.execute(insert(usage_table), [row.__dict__ for row in rows])
                statement = self._insert(usage_totals_table)
                statement = statement.on_conflict_do_update(
                    index_elements=["day", "scope", "target"],
                    set_={"tokens": usage_totals_table.c.tokens + statement.excluded.tokens})
                # one statement for every total of the batch, in one order (no deadlock between
                # processes): a burst of fifty questions is one round trip, not a hundred
                await conn.execute(statement, [
                    {"day": day, "scope": scope, "target": target, "tokens": tokens}
                    for (day, scope, target), tokens in sorted(totals.items())])
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None

    async def quota_view(self, day: str, scopes: Iterable[tuple[str, str]]
                         ) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """Tokens used on `day` and the quotas set, for each (scope, target): one read."""
        wanted = list(scopes)
        used = usage_totals_table.c
        quota = quotas_table.c
        query = union_all(
            select(literal("used").label("kind"), used.scope, used.target, used.tokens).where(
                used.day == day, or_(*((used.scope == s) & (used.target == t) for s, t in wanted))),
            select(literal("quota").label("kind"), quota.scope, quota.target, quota.tokens).where(
                or_(*((quota.scope == s) & (quota.target == t) for s, t in wanted))),
        )
        await self.store._ready()
        direct = self.store._direct
        try:
            if direct is not None:
                # on the thread the usage rows are written on: the read comes wholly before or
                # after a batch's commit, in the order the meter asked (it counts a batch until
                # its write returns), so a batch committed meanwhile is never missed nor counted twice
                sql, params = _compiled(query)
                rows = await direct.call(lambda db: db.execute(sql, params).fetchall())
            else:
                async with self.store._connection(write=False) as conn:
                    rows = list((await conn.execute(query)).all())
        except (SQLAlchemyError, sqlite3.Error) as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        spent = {(scope, target): int(tokens) for kind, scope, target, tokens in rows if kind == "used"}
        quotas = {(scope, target): int(tokens) for kind, scope, target, tokens in rows if kind == "quota"}
        return spent, quotas

    async def quotas(self) -> dict[tuple[str, str], int]:
        """Every quota a superuser set."""
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                rows = (await conn.execute(select(quotas_table))).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        return {(r.scope, r.target): int(r.tokens) for r in rows}

    async def set_quota(self, scope: str, target: str, tokens: int | None, at: float) -> None:
        """Set a user's or group's daily quota (0: none for them); None: back to the default."""
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                await conn.execute(delete(quotas_table).where(
                    quotas_table.c.scope == scope, quotas_table.c.target == target))
                if tokens is not None:
                    await conn.execute(insert(quotas_table).values(
                        scope=scope, target=target, tokens=tokens, updated_at=at))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None

    async def daily(self, since: str, *, user_key: str | None = None,
                    group_key: str | None = None) -> list[DailyUse]:
        """Use per day, user, group and model from day `since` on (recent rows and rolled-up days
        alike), of one user or group if given."""
        raw, rolled = usage_table.c, usage_daily_table.c
        keys = ("day", "user_key", "group_key", "model")
        recent = select(*(raw[k] for k in keys), _requests(raw.endpoint),
                        *(func.sum(raw[k]).label(k) for k in _SUMS)).where(raw.day >= since)
        old = select(*(rolled[k] for k in keys), rolled.requests,
                     *(rolled[k] for k in _SUMS)).where(rolled.day >= since)
        for column, value in (("user_key", user_key), ("group_key", group_key)):
            if value is not None:
                recent = recent.where(raw[column] == value)
                old = old.where(rolled[column] == value)
        recent = recent.group_by(*(raw[k] for k in keys))
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                rows = [*(await conn.execute(recent)).all(), *(await conn.execute(old)).all()]
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        merged: dict[tuple[str, str, str, str], list[int]] = {}
        for row in rows:
            sums = merged.setdefault((row[0], row[1], row[2], row[3]), [0] * (1 + len(_SUMS)))
            for index, value in enumerate(row[4:]):
                sums[index] += int(value or 0)
        return [DailyUse(day, user, group, model, *sums)
                for (day, user, group, model), sums in sorted(merged.items())]

    async def roll_up(self, before: str) -> int:
        """Fold the rows of days before `before` into daily totals and delete them, in one
        transaction; drop running totals of those days. Returns the rows folded."""
        raw, rolled = usage_table.c, usage_daily_table.c
        keys = ("day", "user_key", "group_key", "model", "endpoint")
        grouped = select(*(raw[k] for k in keys), _requests(raw.endpoint),
                         *(func.sum(raw[k]).label(k) for k in _SUMS)
                         ).where(raw.day < before).group_by(*(raw[k] for k in keys))
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                if self.store.dialect == "postgresql":
                    # bot processes rolling up at once take turns: the second finds the rows
                    # already folded and deleted, not the same rows to fold again (SQLite's
                    # writers take turns already)
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _lock_id("marsho:usage-roll-up")})
                rows = (await conn.execute(grouped)).all()
                for row in rows:
                    values = dict(row._mapping)
                    statement = self._insert(usage_daily_table).values(**values)
                    await conn.execute(statement.on_conflict_do_update(
                        index_elements=list(keys),
                        set_={name: rolled[name] + statement.excluded[name]
                              for name in ("requests", *_SUMS)}))
                folded = (await conn.execute(delete(usage_table).where(raw.day < before))).rowcount
                await conn.execute(delete(usage_totals_table).where(usage_totals_table.c.day < before))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None
        return int(folded or 0)


USAGE_COLUMNS = tuple(field.name for field in fields(UsageRow))
INSERT_USAGE = (f"INSERT INTO {usage_table.name} ({', '.join(USAGE_COLUMNS)}) "
                f"VALUES ({', '.join(':' + column for column in USAGE_COLUMNS)})")
"""A batch's rows, inserted without SQLAlchemy (store/sqlite_direct.py), as `write` does."""
ADD_TOTALS = (f"INSERT INTO {usage_totals_table.name} (day, scope, target, tokens) "
              "VALUES (:day, :scope, :target, :tokens) "
              "ON CONFLICT (day, scope, target) DO UPDATE SET tokens = tokens + excluded.tokens")
"""The running totals, added to as `write`'s upsert does."""



def _compiled(query: Any) -> tuple[str, list[Any]]:
    """`query` as SQLite's sqlite3 takes it: the SQL with `?` and its parameters in order."""
    from sqlalchemy.dialects import sqlite

    compiled = query.compile(dialect=sqlite.dialect())
    return str(compiled), [compiled.params[name] for name in compiled.positiontup or ()]
