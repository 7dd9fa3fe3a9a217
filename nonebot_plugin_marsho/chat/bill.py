"""The owner's bill in chat: `marsho.usage` (what was used, by whom, what it cost, a chart of 30
days), `marsho.quota` (superusers set daily token quotas), and the reply to a question over one."""

from __future__ import annotations

import asyncio
import fnmatch
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta

from ..agent.metering import Limits, Meter, OverQuota
from ..config import Config, Price
from ..i18n import Texts
from ..redaction import logger
from ..store.usage import ALL, DailyUse
from ..tools.model import Role
from .where import Where

PERIODS = (("today", 1), ("week", 7), ("month", 30))
"""The periods `marsho.usage` shows: their text key and days (today included)."""
TOP = 5
"""Users (and groups, models) listed by name in a report."""
OFF_WORDS = ("off", "0", "none", "关", "关闭")
DEFAULT_WORDS = ("default", "reset", "-", "默认", "重置")


def limits_of(config: Config) -> Limits:
    """The default daily quotas of the settings (asked twice a turn: the same three quotas give
    the same Limits, which is frozen)."""
    return _limits(config.marsho_user_daily_tokens, config.marsho_group_daily_tokens,
                   config.marsho_daily_tokens)


@functools.lru_cache(maxsize=32)
def _limits(user: int, group: int, everyone: int) -> Limits:
    return Limits(user=user, group=group, all=everyone)


def price_of(prices: Mapping[str, Price], model: str) -> Price | None:
    """The price of `model`: its own entry, else the first pattern that matches it (any case)."""
    if model in prices:
        return prices[model]
    folded = model.casefold()
    return next((price for pattern, price in prices.items()
                 if fnmatch.fnmatchcase(folded, pattern.casefold())), None)


@dataclass
class Totals:
    """Sums of some days' use."""

    questions: int = 0
    requests: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    estimated: int = 0
    cost: dict[str, float] = field(default_factory=dict)
    """By currency label."""

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def add(self, row: DailyUse, prices: Mapping[str, Price]) -> None:
        self.questions += row.questions
        self.requests += row.requests
        self.prompt += row.prompt_tokens
        self.completion += row.completion_tokens
        self.cached += row.cached_tokens
        self.estimated += row.estimated
        price = price_of(prices, row.model)
        if price is not None:
            cached_price = price.input if price.cached_input is None else price.cached_input
            cost = ((row.prompt_tokens - row.cached_tokens) * price.input + row.cached_tokens * cached_price
                    + row.completion_tokens * price.output) / 1_000_000
            self.cost[price.currency] = self.cost.get(price.currency, 0.0) + cost


def totals(rows: Iterable[DailyUse], prices: Mapping[str, Price]) -> Totals:
    """The sums of `rows`."""
    sums = Totals()
    for row in rows:
        sums.add(row, prices)
    return sums


def _cost_text(t: Texts, sums: Totals) -> str:
    if not sums.cost:
        return ""
    amounts = ", ".join(f"{amount:.4g} {currency}".strip() for currency, amount in sorted(sums.cost.items()))
    return t("bill.cost", cost=amounts)


def totals_text(t: Texts, label: str, sums: Totals) -> str:
    """One line: questions, tokens, the share served from the provider's cache, the cost."""
    share = round(100 * sums.cached / sums.prompt) if sums.prompt else 0
    line = t("bill.line", period=label, questions=sums.questions, tokens=f"{sums.tokens:,}",
             cached=share, requests=sums.requests)
    if sums.estimated:
        line += t("bill.estimated", n=sums.estimated)
    return line + _cost_text(t, sums)


def periods_text(t: Texts, rows: list[DailyUse], today: date, prices: Mapping[str, Price]) -> list[str]:
    """Today, 7 days and 30 days."""
    return [totals_text(t, t(f"bill.{name}"), totals(
        (row for row in rows if row.day >= (today - timedelta(days=days - 1)).isoformat()), prices))
        for name, days in PERIODS]


def shown_id(key: str) -> str:
    """A user's or group's id as people know it (without the platform before it)."""
    return key.split(":", 1)[-1] if key != ALL else key


def top_text(t: Texts, title: str, rows: list[DailyUse], by: str, prices: Mapping[str, Price],
             limit: int = TOP) -> list[str]:
    """The biggest users (or groups, models) of `rows` by tokens."""
    grouped: dict[str, Totals] = {}
    for row in rows:
        name = getattr(row, by)
        if by == "user_key" and not name:  # a group's part of its members' requests (metering)
            name = t("bill.shared")
        elif by != "model":
            name = shown_id(name) if name else t("bill.private")
        grouped.setdefault(name, Totals()).add(row, prices)
    ranked = sorted(grouped.items(), key=lambda item: -item[1].tokens)[:limit]
    return [title, *(totals_text(t, f"  {name}", sums) for name, sums in ranked)] if ranked else []


def render_chart(chart_type: str, rows: list[list[object]], field_headers: list[str],
                 dimension: str | None, title: str = "") -> bytes:
    """tools/charts.render_chart, whose module loads with the first chart drawn, not at start."""
    from ..tools import charts

    return charts.render_chart(chart_type, rows, field_headers, dimension, title)


def chart_png(t: Texts, rows: list[DailyUse], today: date, title: str,
              series: Mapping[str, list[DailyUse]] | None = None) -> bytes | None:
    """A bar chart of the daily tokens of the last 30 days (None if it cannot be drawn): of
    `rows`, or, given `series`, a bar of each (by its label) per day."""
    days = [(today - timedelta(days=back)).isoformat() for back in range(29, -1, -1)]
    named = dict(series) if series else {t("bill.chart_tokens"): rows}
    by_day = {day: [0] * len(named) for day in days}
    for index, some in enumerate(named.values()):
        for row in some:
            if row.day in by_day:
                by_day[row.day][index] += row.tokens
    table = [[day[5:], *tokens] for day, tokens in by_day.items()]
    from ..tools.charts import ChartDataError

    try:
        return render_chart("bar", table, [t("bill.chart_day"), *named], None, title)
    except (ChartDataError, ImportError, RuntimeError) as error:
        logger.warning(f"marsho: usage chart not drawn: {error}")
        return None


async def usage_report(meter: Meter, t: Texts, config: Config, where: Where, role: Role,
                       text: str) -> tuple[str, list[bytes]]:
    """`marsho.usage`: the asker's own use; group admins also their group's with its top users;
    superusers, with `all`, everyone's by model, group and user. A chart of 30 days' tokens."""
    name, prices = config.marsho_name, config.marsho_prices
    today = meter.now().date()
    since = (today - timedelta(days=29)).isoformat()
    await meter.settled()  # what this process answered just now counts too
    if text.strip().casefold() in ("all", "全部"):
        if role != "superuser":
            return t("command.superusers", command=f"{name}.usage all"), []
        rows = await meter.store.daily(since)
        lines = [t("bill.everyone"), *periods_text(t, rows, today, prices),
                 *top_text(t, t("bill.by_model"), rows, "model", prices, limit=20),
                 *top_text(t, t("bill.by_group"), rows, "group_key", prices, limit=10),
                 *top_text(t, t("bill.by_user"), rows, "user_key", prices, limit=10)]
        title = t("bill.chart_everyone")
    else:
        rows = await meter.store.daily(since, user_key=where.person)
        lines = [t("bill.yours"), *periods_text(t, rows, today, prices)]
        title = t("bill.chart_yours")
        if where.chat is not None and role != "member":
            # the group's section stands on its own, and the chart shows both: the admin's and
            # the group's bars per day
            if not rows:
                lines.append(t("bill.nothing"))
            group_rows = await meter.store.daily(since, group_key=where.chat)
            lines += [t("bill.group"), *periods_text(t, group_rows, today, prices),
                      *top_text(t, t("bill.top_users"), group_rows, "user_key", prices)]
            if not group_rows:
                lines.append(t("bill.nothing"))
                return "\n".join(lines), []
            series = {_label(t("bill.yours")): rows, _label(t("bill.group")): group_rows}
            png = await asyncio.to_thread(chart_png, t, group_rows, today, t("bill.chart_tokens"), series)
            return "\n".join(lines), [png] if png else []
    if not rows:
        lines.append(t("bill.nothing"))
        return "\n".join(lines), []
    png = await asyncio.to_thread(chart_png, t, rows, today, title)
    return "\n".join(lines), [png] if png else []


def _label(heading: str) -> str:
    """A section's heading ("Your use:") as a chart's legend label ("Your use")."""
    return heading.rstrip(":：").strip()


def quota_text(t: Texts, over: OverQuota) -> str:
    """The reply to a question over a quota: whose, how much is used, when it resets."""
    return t(f"quota.used_up_{over.scope}", used=f"{over.used:,}", limit=f"{over.limit:,}",
             resets=over.resets_at.strftime("%Y-%m-%d %H:%M %Z").strip())


def _limit_text(t: Texts, tokens: int) -> str:
    return f"{tokens:,}" if tokens else t("quota.none")


async def quota_command(meter: Meter, t: Texts, config: Config, where: Where, role: Role, text: str) -> str:
    """`marsho.quota` (show), `marsho.quota user|group <id> <tokens|off|default>` (superusers)."""
    name = config.marsho_name
    if role != "superuser":
        return t("command.superusers", command=f"{name}.quota")
    words = text.split()
    limits = limits_of(config)
    if not words:
        await meter.settled()
        set_ = await meter.store.quotas()
        used, _ = await meter.store.quota_view(meter.today(), [("all", ALL), *set_])
        lines = [t("quota.defaults", user=_limit_text(t, limits.user), group=_limit_text(t, limits.group),
                   all=_limit_text(t, limits.all), used=f"{used.get(('all', ALL), 0):,}")]
        lines += [t(f"quota.set_{scope}", id=shown_id(target), tokens=_limit_text(t, tokens),
                    used=f"{used.get((scope, target), 0):,}")
                  for (scope, target), tokens in sorted(set_.items())]
        return "\n".join(lines)
    if len(words) != 3 or words[0].casefold() not in ("user", "group"):
        return t("quota.bad", name=name)
    scope, target, value = words[0].casefold(), f"{where.platform}:{words[1]}", words[2].casefold()
    tokens: int | None
    digits = value.replace(",", "").replace("_", "")
    if value in OFF_WORDS:
        tokens = 0
    elif value in DEFAULT_WORDS:
        tokens = None
    elif digits.isascii() and digits.isdigit() and len(value) <= 15:  # "²".isdigit(), but not int("²")
        tokens = int(digits)
    else:
        return t("quota.bad", name=name)
    await meter.set_quota(scope, target, tokens)
    if tokens is None:
        return t(f"quota.default_{scope}", id=words[1], tokens=_limit_text(t, limits.default(scope)))
    return t(f"quota.changed_{scope}", id=words[1], tokens=_limit_text(t, tokens))
