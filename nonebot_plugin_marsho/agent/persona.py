"""Who Marsho is: the system prompt (persona, additional prompt, the people she likes), the note
each turn adds beside its question (the date and time, the asker's nickname), and nicknames kept
per person."""

from __future__ import annotations

import asyncio
import functools
import time
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from ..exceptions import MarshoError
from ..i18n import Language, Texts
from ..redaction import logger
from ..store.session import History
from ..store.sql import SqlStore
from .framing import framed, short_id
from .praises import Liked, PraisesFile

DOUBLE_QUOTES = set("\"＂“”„‟«»‹›「」『』〝〞〟″❝❞﹁﹂﹃﹄")
"""Quotes of every script that may close a quoted name or persona as `"` would (ASCII's, curly,
low, guillemets, CJK corner brackets, double primes...): refused like `"`."""
SINGLE_QUOTES = str.maketrans(dict.fromkeys("‘’‚‛′", "'"))
"""Single quotes of other scripts, normalised to ASCII `'` (allowed like it: they close none of
the quotes the system prompt uses, and `’` is an apostrophe)."""
NICKNAME_FORBIDDEN = set("@[]<>{}\r\n\t:：【】") | DOUBLE_QUOTES
"""Characters a nickname cannot hold: no mentions, no CQ-code or markup brackets, one line, no
colon (a nickname names the speaker, `Alice: ...`, so it must not fake a second speaker) and no
quotes (it is quoted in the system prompt)."""


def base_prompt(
    persona: str | None, additional: str = "", likes: list[Liked] | None = None, *,
    language: Language = "zh-CN", group_persona: str | None = None,
) -> str:
    """The unchanging part of the system prompt: the persona (Marsho's own in `language` when
    `persona` is None; "" for none), the group's own persona (`marsho.persona`, quoted and
    labelled as the group admins' words), the additional prompt, and the people Marsho likes."""
    t = Texts(language)
    parts = [t("persona") if persona is None else persona.strip()]
    if group_persona:
        parts.append(t("prompt.group_persona", persona=quotable(group_persona)))
    parts.append(additional.strip())
    if likes:
        lines = [t("prompt.likes")]
        lines += [f"- {p.name}" + (f": {p.advantages}" if p.advantages else "") for p in likes]
        parts.append("\n".join(lines))
    return "\n\n".join(part for part in parts if part)


_TIME_LINES: dict[tuple[Any, ...], str] = {}
"""time_line's texts by what they are made of (the minute, the zone, the language)."""


def time_line(now: datetime, language: Language = "zh-CN") -> str:
    """The date and time (to the minute), weekday and zone; the lunar date in Chinese."""
    # made once a minute (6.5 us: strftime, the zone's name, the catalogue's lines), not per turn
    key = (now.year, now.month, now.day, now.hour, now.minute, now.utcoffset(), now.tzname(), language)
    line = _TIME_LINES.get(key)
    if line is None:
        if len(_TIME_LINES) >= 64:
            _TIME_LINES.clear()
        line = _TIME_LINES[key] = _time_line(now, language)
    return line


def _time_line(now: datetime, language: Language) -> str:
    t = Texts(language)
    line = t("prompt.time", now=now.strftime("%Y-%m-%d %H:%M"), weekday=t.weekday(now.weekday()),
             zone=zone_name(now))
    if language == "zh-CN":
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


def turn_prompt(base: str, *, shared: bool = False, language: Language = "zh-CN") -> str:
    """The system prompt of a conversation: the base, then (shared by several people) how the
    speakers are named. Nothing in it changes from turn to turn: providers bill a prompt whose
    start repeats an earlier request's at a fraction of the price, so what does change goes in
    the turn's note (`turn_note`), after the history."""
    t = Texts(language)
    parts = [base, t("prompt.speaker_names") if shared else ""]
    return "\n\n".join(part for part in parts if part)


def turn_note(*, now: datetime | None = None, nickname: str | None = None,
              language: Language = "zh-CN") -> str:
    """What this turn adds beside its question: the time, how to call the asker; "" for nothing.
    Labelled as the bot's, so the model does not take it for the asker's words."""
    t = Texts(language)
    facts = [time_line(now, language) if now is not None else "",
             t("prompt.nickname", nickname=nickname) if nickname else ""]
    text = " ".join(fact for fact in facts if fact)
    return t("prompt.turn_note", facts=text) if text else ""


def with_turn_note(content: str | list[dict[str, Any]], note: str) -> str | list[dict[str, Any]]:
    """The question's content as this turn's request sends it: the note after the words (a text
    part of its own when the question has pictures), so the question itself stays a prefix of
    what later requests repeat. History stores the question without it."""
    if not note:
        return content
    if isinstance(content, str):
        return f"{content}\n\n{note}" if content else note
    return [*content, {"type": "text", "text": note}]


_SYSTEM_PROMPTS: dict[tuple[Any, ...], str] = {}
"""Prompt.system's prompts by what they are made of."""


@dataclass
class Prompt:
    """The one place the prompt is built, for questions and pokes alike: the system prompt (the
    persona, the additional prompt and the people Marsho likes, read again when praises.json
    changes), and each turn's note (the time, how to call the asker)."""

    persona: str | None = None
    """MARSHO_SYSTEM_PROMPT: None for Marsho's own in `language`, "" for none."""
    additional: str = ""
    praises: PraisesFile | None = None
    language: Language = "zh-CN"
    time_prompt: bool = True
    now: Callable[[], datetime] = field(default_factory=lambda: clock())
    """The clock of the time line (MARSHO_TIMEZONE; tests give their own)."""

    def base(self, group_persona: str | None = None) -> str:
        """The part that is the same for every turn (of the group, with its own persona)."""
        likes = self.praises.people() if self.praises else []
        return base_prompt(self.persona, self.additional, likes, language=self.language,
                           group_persona=group_persona)

    def system(self, *, shared: bool = False, group_persona: str | None = None) -> str:
        """The conversation's system prompt, byte for byte the same every turn; `group_persona`:
        the asker's group's own (`marsho.persona`)."""
        likes = tuple(self.praises.people()) if self.praises else ()  # praises.json looked at each turn
        # made once per what it is made of, not per turn (the same str: its hash is kept too)
        key = (self.persona, self.additional, likes, self.language, group_persona, shared)
        prompt = _SYSTEM_PROMPTS.get(key)
        if prompt is None:
            if len(_SYSTEM_PROMPTS) >= 256:
                _SYSTEM_PROMPTS.clear()
            base = base_prompt(self.persona, self.additional, list(likes), language=self.language,
                               group_persona=group_persona)
            prompt = _SYSTEM_PROMPTS[key] = turn_prompt(base, shared=shared, language=self.language)
        return prompt

    def note(self, *, nickname: str | None = None) -> str:
        """This turn's note (see `turn_note`): the time now, and the asker's nickname."""
        return turn_note(now=self.now() if self.time_prompt else None, nickname=nickname,
                         language=self.language)


def clock(timezone: str = "") -> Callable[[], datetime]:
    """Now, in MARSHO_TIMEZONE or the machine's zone."""
    zone: tzinfo | None = ZoneInfo(timezone) if timezone else None
    return lambda: datetime.now(zone).astimezone(zone)


class NicknameError(MarshoError):
    """A nickname that cannot be kept; the code says why."""


def name_key(name: str) -> str:
    """How names are compared: NFKC (full-width `Ｍａｒｓｈｏ` is `Marsho`), case folded, spaces
    collapsed, and invisible format characters dropped."""
    folded = unicodedata.normalize("NFKC", name).casefold()
    return " ".join("".join(c for c in folded if unicodedata.category(c) != "Cf").split())


def check_nickname(text: str, limit: int, reserved: Iterable[str] = ()) -> str:
    """The nickname to keep, or NicknameError saying what is wrong; `reserved`: names nobody may
    take (Marsho's own and the bot account's: a member called "Marsho" would speak as the bot),
    compared after NFKC normalisation."""
    normal = unicodedata.normalize("NFKC", text).translate(SINGLE_QUOTES).strip()
    name = " ".join(normal.split())
    if any(c in NICKNAME_FORBIDDEN for c in normal) or not name.isprintable():
        raise NicknameError(code="nickname.invalid", limit=limit)
    if len(name) > limit:
        raise NicknameError(code="nickname.too_long", limit=limit)
    if name_key(name) in {name_key(r) for r in reserved}:
        raise NicknameError(code="nickname.reserved", limit=limit)
    return name


SPEAKER_CHARS = 32
"""Characters of a speaker label (a nickname, group card or account name) the model sees."""
LABEL_FORBIDDEN = NICKNAME_FORBIDDEN | set("#")
"""What a speaker label cannot hold: what a nickname cannot, and `#`, which starts the speaker's
short id (`Alice#3f2a`): a card cannot write another's id."""


def speaker_label(name: str, user_id: str, reserved: Iterable[str] = ()) -> str:
    """A name as the label before a shared conversation's message (`Alice: ...`): NFKC, one line,
    without the label's separator or brackets, at most SPEAKER_CHARS characters, so a group card
    such as `marsho: I confirm...\nuser10003` cannot forge a second speaker line; a name that is
    (after normalisation) one of `reserved` is marked with the user id, so nobody speaks as the bot."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join("" if unicodedata.category(c) == "Cf"  # invisible: zero-width spaces...
                   else " " if c in LABEL_FORBIDDEN or not c.isprintable() else c for c in text)
    label = " ".join(text.split())[:SPEAKER_CHARS].strip() or user_id
    if name_key(label) in {name_key(r) for r in reserved}:
        return f"{label} (user {user_id})"
    return label


def tagged_speaker(name: str, platform: str, user_id: str, reserved: Iterable[str] = (), *,
                   limit: int | None = None) -> str:
    """Who speaks, as every line of a shared conversation and of the recent chat names them:
    their `speaker_label` and their short id (`Alice#3f2a`, see framing.short_id), at most
    `limit` characters (the name is cut, never the id). Two members with the same card differ."""
    return _tagged_speaker(name, platform, user_id, tuple(reserved), limit)


@functools.lru_cache(maxsize=4096)
def _tagged_speaker(name: str, platform: str, user_id: str, reserved: tuple[str, ...],
                    limit: int | None) -> str:
    # a function of its arguments alone, made once per speaker (NFKC, a character walk, a
    # digest: 8 us) rather than once per question and per message observed
    tag = "#" + short_id(platform, user_id)
    label = speaker_label(name, user_id, reserved)
    if limit is not None:
        label = label[: max(1, limit - len(tag))].rstrip()
    return label + tag


class CachedTexts:
    """Texts kept per key (a person's nickname, a group's persona) read through a short-lived
    cache: one lookup per key per `ttl`, not one per question (with PostgreSQL, another bot
    process's change shows within `ttl`)."""

    def __init__(self, ttl: float = 60.0, size: int = 4096) -> None:
        self.ttl = ttl
        self.size = size
        self._cache: dict[str, tuple[str | None, float]] = {}

    async def read(self, key: str) -> str | None:
        """The stored text."""
        raise NotImplementedError

    async def write(self, key: str, value: str | None) -> None:
        """Store the text (None forgets it)."""
        raise NotImplementedError

    async def get(self, key: str) -> str | None:
        cached = self._cache.get(key)
        now = time.monotonic()
        if cached is not None and cached[1] > now:
            return cached[0]
        value = await self.read(key)
        if len(self._cache) >= self.size:
            self._cache.clear()
        self._cache[key] = (value, now + self.ttl)
        return value

    async def set(self, key: str, value: str | None) -> None:
        await self.write(key, value)
        self._cache[key] = (value, time.monotonic() + self.ttl)


class Nicknames(CachedTexts):
    """What each person asked to be called (`marsho.nickname`), by `platform:user id`."""

    def __init__(self, history: History, ttl: float = 60.0, size: int = 4096) -> None:
        super().__init__(ttl, size)
        self.history = history

    async def read(self, key: str) -> str | None:
        return await self.history.get_nickname(key)

    async def write(self, key: str, value: str | None) -> None:
        await self.history.set_nickname(key, value)


GROUP_PERSONA_CHARS = 300
"""Characters a group's persona (`marsho.persona`) may have."""
GROUP_PERSONA_SETTING = "persona"
PERSONA_FORBIDDEN = set("[]<>{}【】") | DOUBLE_QUOTES
"""Characters a group's persona cannot hold: it is quoted in the system prompt as the group
admins' words, so no quote (of any script) may close it early and no bracket may pass for markup
or a label."""


class PersonaError(MarshoError):
    """A group persona that cannot be kept; the code says why."""


def check_persona(text: str, limit: int = GROUP_PERSONA_CHARS) -> str:
    """The group persona to keep, or PersonaError: NFKC, invisible format characters dropped,
    one line (line breaks become spaces, so it cannot fake a section of the system prompt of its
    own), without quotes or brackets, at most `limit` characters."""
    normal = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    persona = " ".join(normal.translate(SINGLE_QUOTES).split())
    if any(c in PERSONA_FORBIDDEN for c in persona) or not persona.isprintable():
        raise PersonaError(code="persona.invalid", limit=limit)
    if len(persona) > limit:
        raise PersonaError(code="persona.too_long", limit=limit)
    return persona


def quotable(persona: str) -> str:
    """A group's persona as the system prompt quotes it, whatever was stored (kept before quotes
    of every script were refused, or written to the database by hand): quotes of every script
    as `'`, and framed (one line in practice: a stored line break cannot start a line)."""
    return framed("".join("'" if c in DOUBLE_QUOTES else c for c in persona.translate(SINGLE_QUOTES)))


class GroupPersonas(CachedTexts):
    """Each group's own persona (`marsho.persona`), by group key. Few groups set one, and every
    question in a group asks, so all of them are held in memory: read at once, and again in the
    background at most every `ttl` (another bot process's change shows within it); a question in
    a group without one costs a dictionary lookup, not a database read."""

    def __init__(self, store: SqlStore, ttl: float = 60.0, size: int = 4096) -> None:
        super().__init__(ttl, size)
        self.store = store
        self._all: dict[str, str] | None = None
        self._fresh_until = 0.0
        self._changes = 0
        self._refreshing: asyncio.Task[None] | None = None

    async def read(self, key: str) -> str | None:
        return await self.store.get_group_setting(key, GROUP_PERSONA_SETTING)

    async def write(self, key: str, value: str | None) -> None:
        await self.store.set_group_setting(key, GROUP_PERSONA_SETTING, value)

    async def _load(self) -> None:
        changes = self._changes
        values = await self.store.group_settings(GROUP_PERSONA_SETTING)
        if changes == self._changes or self._all is None:  # not older than a choice made here
            self._all = {key: value for key, value in values.items() if value}
        self._fresh_until = time.monotonic() + self.ttl

    async def _refresh(self) -> None:
        try:
            await self._load()
        except MarshoError as error:  # the database is away: the personas known stay
            logger.warning(f"marsho: could not re-read the groups' personas: {error}")
            self._fresh_until = time.monotonic() + self.ttl

    async def get(self, key: str) -> str | None:
        if self._all is None:
            await self._load()
        elif time.monotonic() > self._fresh_until and (self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.ensure_future(self._refresh())
        assert self._all is not None
        return self._all.get(key)

    async def set(self, key: str, value: str | None) -> None:
        self._changes += 1
        await self.write(key, value)
        if self._all is None:
            await self._load()
        assert self._all is not None
        if value:
            self._all[key] = value
        else:
            self._all.pop(key, None)
