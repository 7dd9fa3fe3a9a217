"""No loops with other bots (issue 25): who is taken for a bot, and the per-chat circuit breaker
behind that.

Two marsho bots in one group whose answers start with "Marsho ..." answer each other forever,
and an account that repeats each answer ("Marsho said: ...") gets an answer to every repeat; on
OneBot v11 no sender is marked as a bot. So a sender is taken for a bot when:

- the platform says so (Telegram `is_bot`, Discord, Kook and QQ's `bot`, Satori's `is_bot`,
  Feishu's `sender_type` "app");
- the message carries `MARKER`, the invisible sequence every instance of this plugin puts at the
  end of its answers that could call a marsho (those starting with a trigger word, as a persona
  speaking of herself does): another marsho (or a copy of such an answer) says it;
- it behaves like one: messages for marsho that quote marsho's answer to the sender and come
  sooner after it than a person reads it and types them (as another marsho's answers do: they
  quote the question), or that repeat one of marsho's last answers in the chat (an echo),
  `SUSPICION_LIMIT` times in a row.

Behind that, `Breaker`: MARSHO_CHAT_ANSWERS_PER_MINUTE answers in a chat within a minute, and
the next request pauses answering there (told once), until MARSHO_CHAT_PAUSE_SECONDS pass without a
message for marsho there (at most `MAX_PAUSE_FACTOR` times that), or a superuser says
`marsho.resume`. Superusers are never taken for bots, nor held by the breaker.

Everything here is in memory, bounded, and costs dict look-ups per message for marsho; a message
not for marsho costs only the marker's removal (`strip_marker`, a substring test per text).
"""

from __future__ import annotations

import difflib
import functools
import time
import unicodedata
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..redaction import logger
from ..store.session import session_key
from .active import flagged_bot
from .fairuse import Notices
from .lookup import attribute

if TYPE_CHECKING:
    from .app import Marsho
    from .where import Where

DEFAULT_NAMES = ("marsho", "小棉")
"""The default trigger words: another marsho is most likely called by them."""
MARKER = "\u200b\u200d\u200c\u200d"
"""What marsho puts at the end of its answers that start with a trigger word: zero-width space,
joiner, non-joiner, joiner. Invisible, unlikely in a person's text (a sequence of four, not one
zero-width space pasted from the web), taken out of every message before it is read, so it never
reaches the model nor the stored chat. Where a platform drops it, behaviour still tells."""
REACTION_SECONDS = 2.0
TYPING_CHARS_PER_SECOND = 8.0
"""A person needs at least REACTION_SECONDS to read an answer, plus a second per this many
characters to type a reply (a fast typist: about 100 words a minute): a message for marsho that
quotes marsho's message and comes sooner after marsho's answer to its sender is suspicious. One
that quotes nothing never is: people paste long texts one after another, and fire off "marsho
ok" the moment an answer comes."""
SUSPICION_LIMIT = 3
"""A sender is taken for a bot at this much suspicion in a row: a quick message counts 1, one
that repeats marsho's last answers 2 (both: 3 at once); any other message starts again at 0. A
person who answers quickly once or twice is still answered."""
BOT_SECONDS = 600.0
"""How long a sender taken for a bot is not answered in that chat (then they start afresh); one
log line per sender per this long."""
RECENT_ANSWERS = 3
"""marsho's last answers remembered per chat, to tell a repeat of them."""
ANSWER_CHARS = 240
"""Characters of each answer remembered (normalised), and of a message compared with them."""
MIN_ECHO_CHARS = 8
"""An answer shorter than this (normalised) is never taken as repeated ("ok", "hi")."""
ECHO_RATIO = 0.8
"""difflib's similarity above which a message repeats an answer."""
MAX_CHATS = 2000
"""Chats whose last answers are remembered (the least recent forgotten first)."""
MAX_SENDERS = 20000
"""(chat, sender) pairs whose last answer and suspicion are remembered."""
MAX_PAUSE_FACTOR = 10
"""A paused chat resumes after at most this many MARSHO_CHAT_PAUSE_SECONDS, even if never quiet."""
WINDOW = 60.0


def platform_marks_bot(event: Any) -> bool:
    """Whether the platform marks the sender as a bot, where the event says so: Telegram,
    Discord, Satori and QQ's official API (chat/active.py's `flagged_bot`), Kook
    (`extra.author.bot`), Feishu (`event.sender.sender_type` "app")."""
    if flagged_bot(event):
        return True
    author = getattr(attribute(event, "extra"), "author", None)
    if getattr(author, "bot", None) is True:
        return True
    sender = getattr(attribute(event, "event"), "sender", None)
    return getattr(sender, "sender_type", None) == "app"


def quotes_the_bot(bot: Any, event: Any) -> bool:
    """Whether the message quotes one of the bot's own (OneBot v11's `reply`, read by the
    adapter; the platforms that mark bots need no such hint)."""
    sender = getattr(attribute(event, "reply"), "sender", None)
    user_id = getattr(sender, "user_id", None)
    return user_id is not None and str(user_id) == str(getattr(bot, "self_id", ""))


def with_marker(text: str) -> str:
    """`text` with the marker at its end: after its last line, unless that line closes a code
    block (a fence followed by anything is no longer a closing fence in markdown), then on a
    line of its own."""
    if not text.strip():
        return text
    last = text.rstrip().rsplit("\n", 1)[-1].strip()
    if last.startswith(("```", "~~~")):
        return f"{text}\n{MARKER}"
    return text + MARKER


def calls_a_marsho(text: str, names: Iterable[str] = ()) -> bool:
    """Whether `text` starts (past spaces, punctuation and a command prefix) with a word that
    calls a marsho: `names` (this bot's trigger words) or `DEFAULT_NAMES`, in any case or width."""
    start = unicodedata.normalize("NFKC", text[:80]).casefold()
    first = next((i for i, c in enumerate(start) if c.isalnum()), len(start))
    return start.startswith(_folded_names(tuple(names)), first)


def marked(text: str) -> str:
    """The text as marsho sends it: with the marker when it could call another marsho (it starts
    with a trigger word, as "Marsho, ..." does); any other text as it is, since only a message
    that calls a marsho can start a loop."""
    return with_marker(text) if calls_a_marsho(text, _running_names()) else text


def _running_names() -> list[str]:
    from .app import current_app  # (lazily: app.py imports chat/outgoing.py, which imports this)

    try:
        return current_app().config.trigger_names
    except RuntimeError:  # no bot running (a test of the delivery alone): the defaults
        return []


@functools.lru_cache(maxsize=64)
def _folded(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


@functools.lru_cache(maxsize=64)
def _folded_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` and DEFAULT_NAMES as a message's start is compared with them (once per list of
    trigger words, not once per message)."""
    return tuple(_folded(name) for name in (*names, *DEFAULT_NAMES) if name)


def _text_segments(message: Any) -> list[Any]:
    try:
        return [s for s in message
                if getattr(s, "type", None) == "text" and isinstance(s.data.get("text"), str)]
    except Exception:  # not a message of segments
        return []


def strip_marker(event: Any) -> bool:
    """Take the marker out of the event's message, its original message (OneBot's, read by the
    trigger), its raw CQ string and the quoted message, so nothing downstream (the question, the
    recent chat, a quote) sees it; whether the sender's own message carried it."""
    carried = False
    for holder, own in (("message", True), ("original_message", True), ("reply", False)):
        message = attribute(event, holder)
        if holder == "reply":
            message = getattr(message, "message", None)
        for segment in _text_segments(message) if message is not None else ():
            said: str = segment.data["text"]
            if MARKER in said:
                segment.data["text"] = said.replace(MARKER, "")
                carried = carried or own
    raw = attribute(event, "raw_message")
    if isinstance(raw, str) and MARKER in raw:
        try:
            event.raw_message = raw.replace(MARKER, "")
        except Exception:  # a frozen event: its raw text stays
            pass
    return carried


def normalised(text: str) -> str:
    """Text as a repeat is compared: NFKC, case-folded, letters and digits only (so "Marsho
    said: ..." and a re-punctuated copy compare with the answer itself)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if c.isalnum())


def _repeats(message: str, answer: str) -> bool:
    if len(answer) < MIN_ECHO_CHARS:
        return False
    if answer[:ANSWER_CHARS // 2] in message:
        return True
    # real_quick_ratio, the bound by the lengths alone, before the matcher indexes the answer
    # (most messages are far shorter or longer than marsho's last answers)
    if 2.0 * min(len(message), len(answer)) / (len(message) + len(answer)) < ECHO_RATIO:
        return False
    matcher = difflib.SequenceMatcher(None, message, answer, autojunk=False)
    return matcher.quick_ratio() >= ECHO_RATIO and matcher.ratio() >= ECHO_RATIO


@dataclass
class _Sender:
    answered: float | None = None
    """When marsho last answered this sender in this chat."""
    suspicion: int = 0


Verdict = Literal["", "marker", "behaviour"]


@dataclass
class BotDetector:
    """Who is taken for a bot (see the module's docstring); one per running bot."""

    on: bool = True
    clock: Callable[[], float] = time.monotonic
    _answers: OrderedDict[str, deque[str]] = field(default_factory=OrderedDict)
    _senders: OrderedDict[tuple[str, str], _Sender] = field(default_factory=OrderedDict)
    _bots: dict[tuple[str, str], float] = field(default_factory=dict)
    _logged: Notices = field(init=False)

    def __post_init__(self) -> None:
        self._logged = Notices(BOT_SECONDS, clock=self.clock)

    def answered(self, chat: str, sender: str, text: str) -> None:
        """marsho sent `text` to `sender` in `chat` (an answer, a command's reply)."""
        if not self.on:
            return
        answers = self._answers.get(chat)
        if answers is None:
            answers = self._answers[chat] = deque(maxlen=RECENT_ANSWERS)
            if len(self._answers) > MAX_CHATS:
                self._answers.popitem(last=False)
        else:
            self._answers.move_to_end(chat)
        answers.append(normalised(text)[:ANSWER_CHARS])
        if sender:
            self._sender(chat, sender).answered = self.clock()

    def _sender(self, chat: str, sender: str) -> _Sender:
        key = (chat, sender)
        state = self._senders.get(key)
        if state is None:
            state = self._senders[key] = _Sender()
            if len(self._senders) > MAX_SENDERS:
                self._senders.popitem(last=False)
        else:
            self._senders.move_to_end(key)
        return state

    def verdict(self, chat: str, sender: str, text: str, *, marked: bool, quotes: bool = False) -> Verdict:
        """Why the message for marsho from `sender` in `chat` is taken for a bot's ("": it is
        not). `text`: what it says (the marker taken out); `marked`: it carried the marker;
        `quotes`: it quotes one of marsho's messages. Counts the message's suspicion. (What the
        platform marks is refused before: chat/matchers.py.)"""
        if not self.on:
            return ""
        if marked:
            return "marker"
        key, now = (chat, sender), self.clock()
        until = self._bots.get(key)
        if until is not None:
            if now < until:
                return "behaviour"
            del self._bots[key]
        state = self._sender(chat, sender)
        suspicion = self._suspicion(chat, state, text, now, quotes=quotes)
        state.suspicion = state.suspicion + suspicion if suspicion else 0
        if state.suspicion < SUSPICION_LIMIT:
            return ""
        state.suspicion = 0
        if len(self._bots) >= MAX_SENDERS:  # forget those whose time is over
            self._bots = {k: v for k, v in self._bots.items() if v > now}
        self._bots[key] = now + BOT_SECONDS
        return "behaviour"

    def _suspicion(self, chat: str, state: _Sender, text: str, now: float, *, quotes: bool) -> int:
        """1 for a quick reply quoting marsho, 2 for a repeat of its last answers, 3 for both."""
        quick = quotes and state.answered is not None and (
            now - state.answered < REACTION_SECONDS + len(text) / TYPING_CHARS_PER_SECOND)
        # the start of a long message is enough: a repeat follows its prefix ("Marsho said: ")
        said = normalised(text[:4 * ANSWER_CHARS])[:2 * ANSWER_CHARS]
        answers = self._answers.get(chat, ())
        echo = bool(said) and any(_repeats(said, answer) for answer in answers)
        return int(quick) + 2 * int(echo)

    def first_log(self, chat: str, sender: str) -> bool:
        """Whether this sender's verdict in this chat is to be logged (once per BOT_SECONDS)."""
        return self._logged.first(f"{chat}\n{sender}")

    def forget(self, chat: str) -> None:
        """No sender of `chat` is taken for a bot any more (`marsho.resume`)."""
        for key in [k for k in self._bots if k[0] == chat]:
            del self._bots[key]
        for key in [k for k in self._senders if k[0] == chat]:
            self._senders[key].suspicion = 0


Check = Literal["go", "trip", "paused"]


@dataclass
class _Pause:
    since: float
    last: float
    """When the last message for marsho came during the pause."""


@dataclass
class Breaker:
    """The per-chat circuit breaker (see the module's docstring); `limit` 0: off."""

    limit: int = 30
    pause: float = 120.0
    clock: Callable[[], float] = time.monotonic
    _taken: dict[str, deque[float]] = field(default_factory=dict)
    _paused: dict[str, _Pause] = field(default_factory=dict)

    def check(self, chat: str) -> Check:
        """A request for marsho in `chat`: "go", "trip" (the chat had `limit` answers in the last
        minute: this one pauses it; say so, once), "paused" (dropped unseen; it keeps the chat
        paused)."""
        if self.limit <= 0:
            return "go"
        now = self.clock()
        paused = self._paused.get(chat)
        if paused is not None:
            if self._holds(paused, now):
                paused.last = now
                return "paused"
            del self._paused[chat]
            self._taken.pop(chat, None)
            logger.info(f"marsho: answering in {chat} again after a quiet spell")
        if len(self._recent(chat, now)) >= self.limit:
            if len(self._paused) >= MAX_CHATS:  # forget the pauses that are over
                self._paused = {k: v for k, v in self._paused.items() if self._holds(v, now)}
            self._paused[chat] = _Pause(now, now)
            return "trip"
        return "go"

    def answered(self, chat: str) -> None:
        """marsho sent an answer (or a command's reply) in `chat`."""
        if self.limit > 0:
            now = self.clock()
            self._recent(chat, now).append(now)

    def _holds(self, paused: _Pause, now: float) -> bool:
        return now - paused.last < self.pause and now - paused.since < self.pause * MAX_PAUSE_FACTOR

    def _recent(self, chat: str, now: float) -> deque[float]:
        """The chat's answers of the last minute (idle chats forgotten, so memory stays bounded)."""
        taken = self._taken.get(chat)
        if taken is None:
            if len(self._taken) >= MAX_CHATS:
                self._taken = {k: v for k, v in self._taken.items() if v and v[-1] > now - WINDOW}
            taken = self._taken[chat] = deque()
        while taken and taken[0] <= now - WINDOW:
            taken.popleft()
        return taken

    def holds(self, chat: str) -> bool:
        """Whether a request in `chat` would not go now (paused, or at the limit), without
        pausing it (an unsolicited reply asks: it says nothing, so it trips nothing)."""
        if self.limit <= 0:
            return False
        return self.is_paused(chat) or len(self._recent(chat, self.clock())) >= self.limit

    def is_paused(self, chat: str) -> bool:
        """Whether `chat` is paused now."""
        paused = self._paused.get(chat)
        return paused is not None and self._holds(paused, self.clock())

    def resume(self, chat: str) -> bool:
        """Lift `chat`'s pause and forget its count (`marsho.resume`); whether it was paused."""
        was = self.is_paused(chat)
        self._paused.pop(chat, None)
        self._taken.pop(chat, None)
        return was


@dataclass
class LoopGuard:
    """The detector and the breaker of one running bot, from its settings."""

    detector: BotDetector
    breaker: Breaker

    def answered(self, chat: str, sender: str, text: str) -> None:
        """marsho sends `text` to `sender` in `chat`: an answer, or a command's reply."""
        self.detector.answered(chat, sender, text)
        self.breaker.answered(chat)

    @classmethod
    def from_settings(cls, *, detection: bool, answers_per_minute: int, pause_seconds: float,
                      clock: Callable[[], float] = time.monotonic) -> LoopGuard:
        return cls(BotDetector(on=detection, clock=clock),
                   Breaker(limit=answers_per_minute, pause=pause_seconds, clock=clock))


_guards: dict[int, LoopGuard] = {}


def guard_of(app: Marsho) -> LoopGuard:
    """The running bot's guard, made from its settings on first use (MARSHO_BOT_DETECTION,
    MARSHO_CHAT_ANSWERS_PER_MINUTE, MARSHO_CHAT_PAUSE_SECONDS). It lives as long as the bot's
    other guards of whom not to answer, `app.active` (the ignored accounts, cooldowns): a new
    one when the bot is ready, and with every `with_config`."""
    holder = app.active
    guard = _guards.get(id(holder))
    if guard is None:
        config = app.config
        guard = _guards[id(holder)] = LoopGuard.from_settings(
            detection=config.marsho_bot_detection, answers_per_minute=config.marsho_chat_answers_per_minute,
            pause_seconds=config.marsho_chat_pause_seconds)
        weakref.finalize(holder, _guards.pop, id(holder), None)
    return guard


def chat_of(where: Where) -> str:
    """The chat a message came from (the group, the channel, else the private chat), whatever
    MARSHO_SESSION_SCOPE: what the breaker and the answers remembered are kept by."""
    return session_key(where.platform, group_id=where.group_id, user_id=where.user_id,
                       channel=where.kind == "channel")


def use_guard(app: Marsho, guard: LoopGuard) -> None:
    """Make `guard` the running bot's (a test's, on a fake clock)."""
    holder = app.active
    if id(holder) not in _guards:
        weakref.finalize(holder, _guards.pop, id(holder), None)
    _guards[id(holder)] = guard
