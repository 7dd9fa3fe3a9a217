"""Who Marsho is: the system prompt (persona, additional prompt, the people she likes), what each
turn adds to it (the date and time, the asker's nickname), and nicknames kept per person."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ..i18n import language, t, weekday
from ..store.session import History

NICKNAME_FORBIDDEN = set("@[]<>{}\r\n\t:：\"「」『』【】")
"""Characters a nickname cannot hold: no mentions, no CQ-code or markup brackets, one line, no
colon (a nickname names the speaker, `Alice: ...`, so it must not fake a second speaker) and no
quotes (it is quoted in the system prompt)."""


class PraisesError(ValueError):
    """The "people Marsho likes" file is unreadable; the message names the file and the entry."""


@dataclass(frozen=True)
class Liked:
    """One person Marsho likes, and why (an entry of praises.json)."""

    name: str
    advantages: str = ""


def read_praises(path: Path) -> list[Liked]:
    """The people in `path`: marshoai's praises.json, `{"like": [{"name": ..., "advantages":
    ...}]}` (a bare list of entries is read too). Raises PraisesError saying what is wrong where."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise PraisesError(f"{path}: cannot read it ({error.strerror or error})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise PraisesError(f"{path}, line {error.lineno}, column {error.colno}: {error.msg}") from None
    entries = data.get("like") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise PraisesError(f'{path}: expected {{"like": [{{"name": ..., "advantages": ...}}]}}')
    people = []
    for index, entry in enumerate(entries):
        where = f'{path}: "like"[{index}]'
        if not isinstance(entry, dict):
            raise PraisesError(f"{where} is not an object with a name")
        name, advantages = entry.get("name"), entry.get("advantages", "")
        if not isinstance(name, str) or not name.strip():
            raise PraisesError(f'{where} has no "name" (a non-empty string)')
        if not isinstance(advantages, str):
            raise PraisesError(f'{where}: "advantages" must be a string')
        people.append(Liked(name.strip(), advantages.strip()))
    return people


class PraisesFile:
    """The "people Marsho likes" file, read again whenever it changes (no restart needed); a
    broken edit is logged once and the last good list kept."""

    RACY_NS = 2_000_000_000
    """A file changed this recently may change again within its timestamp's resolution (one
    kernel tick, 2 s on FAT) keeping size and mtime: it is read again until it is older."""

    def __init__(self, path: Path, log: Callable[[str], None]) -> None:
        self.path = path
        self.log = log
        self._stamp: tuple[int, int] | None = None
        self._racy = False
        self._problem: str | None = None
        self._people: list[Liked] = []

    def people(self) -> list[Liked]:
        try:
            stat = self.path.stat()
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp and not self._racy:
            return self._people
        changed, self._stamp = stamp != self._stamp, stamp
        if stamp is None:
            self._racy, self._problem, self._people = False, None, []
            return self._people
        self._racy = abs(time.time_ns() - stamp[0]) < self.RACY_NS
        try:
            self._people = read_praises(self.path)
            self._problem = None
        except PraisesError as error:
            if changed or str(error) != self._problem:  # once per broken edit, not per turn
                self.log(f"{error} (keeping the {len(self._people)} people read before)")
            self._problem = str(error)
        return self._people


def base_prompt(persona: str | None, additional: str = "", likes: list[Liked] | None = None) -> str:
    """The unchanging part of the system prompt: the persona (Marsho's own in MARSHO_LANG when
    `persona` is None; "" for none), the additional prompt, and the people Marsho likes."""
    parts = [t("persona") if persona is None else persona.strip(), additional.strip()]
    if likes:
        lines = [t("prompt.likes")]
        lines += [f"- {p.name}" + (f": {p.advantages}" if p.advantages else "") for p in likes]
        parts.append("\n".join(lines))
    return "\n\n".join(part for part in parts if part)


def time_line(now: datetime) -> str:
    """The date and time (to the minute), weekday and zone; the lunar date in Chinese."""
    line = t("prompt.time", now=now.strftime("%Y-%m-%d %H:%M"), weekday=weekday(now.weekday()),
             zone=zone_name(now))
    if language() == "zh-CN":
        lunar = lunar_date(now)
        if lunar:
            line += t("prompt.lunar", lunar=lunar)
    return line


def zone_name(now: datetime) -> str:
    """"CST, UTC+08:00": an abbreviation alone is ambiguous (CST is also US Central time), and
    some zones have none ("+04"), so the offset is always given."""
    offset = now.utcoffset()
    if offset is None:  # a naive time: its zone is unknown
        return now.tzname() or "UTC"
    minutes = round(offset.total_seconds() / 60)
    sign = "-" if minutes < 0 else "+"
    utc = f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    name = now.tzname() or ""
    if not name or name[0] in "+-" or name.upper() in ("UTC", "GMT", utc):
        return utc
    return f"{name}, {utc}"


def lunar_date(now: datetime) -> str:
    """二〇二六年十月廿一 for a date, or "" if lunar-python is missing or out of range."""
    return _lunar_day(now.year, now.month, now.day)


@functools.lru_cache(maxsize=8)
def _lunar_day(year: int, month: int, day: int) -> str:
    # computed once a day, not each turn (lunar-python takes about half a millisecond)
    try:
        from lunar_python import Solar

        lunar = Solar.fromYmd(year, month, day).getLunar()
        return f"{lunar.getYearInChinese()}年{lunar.getMonthInChinese()}月{lunar.getDayInChinese()}"
    except Exception:  # lunar-python missing or the date out of its range: leave it out
        return ""


def turn_prompt(
    base: str,
    *,
    now: datetime | None = None,
    nickname: str | None = None,
    shared: bool = False,
) -> str:
    """The system prompt of one turn: the base, then the time, who speaks, how to call them."""
    parts = [base]
    if now is not None:
        parts.append(time_line(now))
    if shared:
        parts.append(t("prompt.speaker_names"))
    elif nickname:
        parts.append(t("prompt.nickname", nickname=nickname))
    return "\n\n".join(part for part in parts if part)


def clock(timezone: str = "") -> Callable[[], datetime]:
    """Now, in MARSHO_TIMEZONE or the machine's zone."""
    zone: tzinfo | None = ZoneInfo(timezone) if timezone else None
    return lambda: datetime.now(zone).astimezone(zone)


def check_nickname(text: str, limit: int, reserved: Iterable[str] = ()) -> str:
    """The nickname to keep, or ValueError with the i18n key of what is wrong; `reserved`: names
    nobody may take (Marsho's own: a member called "Marsho" would speak as the bot)."""
    name = " ".join(text.split())
    if any(c in NICKNAME_FORBIDDEN for c in text.strip()) or not name.isprintable():
        raise ValueError("nickname.invalid")
    if len(name) > limit:
        raise ValueError("nickname.too_long")
    if name.casefold() in {r.casefold() for r in reserved}:
        raise ValueError("nickname.reserved")
    return name


class Nicknames:
    """Nicknames read through a short-lived cache: one lookup per person per minute, not one
    per question (with PostgreSQL, another bot process's change shows within `ttl`)."""

    def __init__(self, history: History, ttl: float = 60.0, size: int = 4096) -> None:
        self.history = history
        self.ttl = ttl
        self.size = size
        self._cache: dict[str, tuple[str | None, float]] = {}

    async def get(self, user_key: str) -> str | None:
        cached = self._cache.get(user_key)
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        value = await self.history.get_nickname(user_key)
        if len(self._cache) >= self.size:
            self._cache.clear()
        self._cache[user_key] = (value, now + self.ttl)
        return value

    async def set(self, user_key: str, nickname: str | None) -> None:
        await self.history.set_nickname(user_key, nickname)
        self._cache[user_key] = (nickname, time.monotonic() + self.ttl)
