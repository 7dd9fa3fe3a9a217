"""The NoneBot face: which messages are for marsho, and turning them into engine calls and replies."""

from __future__ import annotations

import asyncio
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nonebot import get_driver, on
from nonebot.adapters import Bot, Event
from nonebot.permission import SuperUser
from nonebot.typing import T_State
from nonebot_plugin_alconna.uniseg import Image, Text, UniMessage

from ..agent.engine import Engine, Reply
from ..agent.gate import lane
from ..agent.judge import judge
from ..agent.metering import Asker, OverQuota, charged_to, model_for_turn
from ..exceptions import EndpointError, MarshoError, NotReadyError, StoreError
from ..i18n import Texts
from ..redaction import logger, redact
from ..store.session import session_key
from ..tools.model import Role, ToolCall
from . import telegram_names
from .app import Marsho, current_app
from .bill import limits_of, quota_text
from .commands import REGISTRY, Command, CommandContext, Registry
from .debounce import person_in_chat, picture_only
from .direct import Checker, DirectRule, Handler, direct_handler
from .fairuse import Admission, seconds_text
from .incoming import text_only
from .loops import chat_of, guard_of, platform_marks_bot, quotes_the_bot, strip_marker
from .native import own_content
from .observe import group_key, message_text, observe
from .outgoing import Delivery, picture_segment, send_answer, send_progress, send_reasoning
from .render import brief_reason, brief_text, error_text, reply_text, unknown_command_text, usage_text
from .segments import SegmentedReply, current_segments, segmented
from .targets import speak_in
from .typing_indicator import typing_shown
from .where import Where, looks_private, platform_name, where_of

COMMANDS = REGISTRY.names()
"""The commands' names (chat/commands/: their declarations)."""
_is_superuser = SuperUser()
STATE_KEY = "marsho_request"
APP_KEY = "marsho_app"
"""The running bot the rule saw, for the handler of the same message."""


@dataclass(frozen=True)
class Request:
    """What a message asks of marsho: a command (or "chat") and the text after the trigger."""

    command: str
    text: str


COMMAND_WORD = re.compile(r"([.．])([A-Za-zＡ-Ｚａ-ｚ][A-Za-z0-9_\-Ａ-Ｚａ-ｚ０-９＿－]{0,31})(?=\s|$)")
"""A command right after a trigger word: a dot, then one word, then the end or a space (an
ideographic one too); the dot and the word may be typed full-width (a Chinese or Japanese input
method's `ｍａｒｓｈｏ．ｒｅｓｅｔ`), and are read as ASCII."""
IDEOGRAPHIC_COMMAND = re.compile(r"。([a-zａ-ｚ]{1,32})\s*$")
"""`marsho。reset`: a Chinese input method's full stop before a command's name, in lower case and
alone; anything else after it is a question ("小棉。hello", "小棉。Help me with this", "小棉。help me
with this": `。` ends a Chinese sentence)."""
BOT_MENTION = re.compile(r"@[A-Za-z0-9_]{1,64}(?=\s|$)", re.ASCII)
"""A bot's @username glued to the trigger word ("/marsho@MarshoBot ...")."""


def parse_request(text: str, names: list[str], command_starts: Iterable[str],
                  commands: Registry | None = None) -> Request | None:
    """Read `marsho ...`, `/marsho ...`, `!marsho ...`, `Marsho.reset` or `小棉你好`; None if not
    for us. `marsho.<word>` with a word that names no command of `commands` (the registry) is
    Request("unknown", word); `marsho. <question>` (a space after the dot) is a question."""
    commands = REGISTRY if commands is None else commands
    text = text.strip()
    # whatever the bot's COMMAND_START (["!"], [""], several), "marsho", "/marsho" and
    # "<any start>marsho" all work
    candidates = [text]
    for start in _longest_first(frozenset({"/", *command_starts} - {""})):
        if text.startswith(start):
            candidates.append(text[len(start):].lstrip())
            break
    for candidate in candidates:
        request = _read_trigger(candidate, names, commands)
        if request is not None:
            return request
    return None


@functools.lru_cache(maxsize=64)
def _folded(name: str) -> str:
    """A trigger word as a message's start is compared with it: NFKC, case-folded (once per name,
    not once per message)."""
    return unicodedata.normalize("NFKC", name).casefold()


@functools.lru_cache(maxsize=64)
def _longest_first(words: frozenset[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Command starts or trigger words, the longest first (sorted once per set, not per
    message; words of one length keep their order)."""
    return tuple(sorted(words, key=len, reverse=True))


def _read_trigger(text: str, names: list[str], commands: Registry) -> Request | None:
    for name in _longest_first(tuple(names)):
        # any case, and typed full-width (ｍａｒｓｈｏ) as an input method may
        if unicodedata.normalize("NFKC", text[:len(name)]).casefold() != _folded(name):
            continue
        rest = text[len(name):]
        mention = BOT_MENTION.match(rest)
        if mention:  # Telegram's "/marsho@MarshoBot hi": the command names the bot it is for
            rest = rest[mention.end():]
        request = _read_command(rest, commands)
        if request is not None:
            return request
        # "marsho." and "marsho. what is this" ask; "marshomallow" and "marsho.ai/x" are not for
        # us; "marsho你好" and "小棉你好" need no space (each read as typed full-width too)
        first, second = unicodedata.normalize("NFKC", rest[:1]), unicodedata.normalize("NFKC", rest[1:2])
        asks = first == "." and (not second or second.isspace())
        if not asks and first and name[-1].isascii() and first.isascii() and (
                first.isalnum() or first in "_-."):
            continue
        return Request("chat", rest.lstrip(" \t\r\n,，:：!！?？~.。．").strip())
    return None


def _read_command(rest: str, commands: Registry) -> Request | None:
    """The command right after a trigger word (`.reset`, `。reset`), by its name even when an
    alias called it; None if `rest` names none."""
    match = COMMAND_WORD.match(rest)
    if match:
        word = unicodedata.normalize("NFKC", match.group(2)).lower()
        command = commands.get(word)
        if command is not None:  # its arguments as ASCII too: "ｍａｒｓｈｏ．ｎｉｃｋｎａｍｅ　ｒｅｓｅｔ"
            return Request(command.name, unicodedata.normalize("NFKC", rest[match.end():]).strip())
        return Request("unknown", word)
    match = IDEOGRAPHIC_COMMAND.match(rest)
    command = commands.get(unicodedata.normalize("NFKC", match.group(1))) if match else None
    return Request(command.name, "") if command is not None else None


def _message_text(event: Event) -> str:
    """The text as it was sent: OneBot's adapter takes a NICKNAME at the start of a message (and
    an @ of the bot) out of `message` before any rule sees it (with NICKNAME=["marsho"],
    "marsho.reset" arrives as ".reset") and keeps what was sent in `original_message`."""
    original = getattr(event, "original_message", None)
    try:
        return original.extract_plain_text() if original is not None else event.get_plaintext()
    except Exception:
        return event.get_plaintext()


def _plain_segments_only(event: Event) -> bool:
    try:
        return all(segment.type == "text" for segment in event.get_message())
    except Exception:  # not a message event
        return True


async def _text_without_mentions(bot: Bot, event: Event) -> str | None:
    """The message's text with its leading mentions, pictures and other non-text segments left
    out, read through alconna (a Feishu rich-text post is one segment whose text only alconna
    reads; "@Marsho marsho hi" on platforms that leave the @ in the message). None when the
    message has nothing but plain text segments (the cheap reading already saw it all)."""
    if _plain_segments_only(event):
        return None
    try:
        message = UniMessage.of(event.get_message(), bot=bot)
    except Exception:
        return None
    return own_content(bot, event, message).text


async def is_superuser(bot: Bot, event: Event) -> bool:
    """Whether the sender is in SUPERUSERS."""
    # nonebot's own check, called bare: the SUPERUSER Permission wrapper runs it in an anyio
    # task group, about a tenth of the bot's CPU per message under load
    return await _is_superuser(bot, event)


async def asker_role(bot: Bot, event: Event, where: Where) -> Role:
    """Superuser (SUPERUSERS), else the sender's role in the group or guild as the platform
    reports it (owner, admin), else a plain member."""
    if await is_superuser(bot, event):
        return "superuser"
    return where.role if where.shared else "member"


async def admitted_here(app: Marsho, bot: Bot, event: Event, where: Where) -> bool:
    """Allow- and deny-lists of groups and users (superusers are always admitted). A shared chat
    whose ids were guessed (the platform's API failed) is refused where group lists are set:
    its id may not be the one the owner listed."""
    place = where.names or None
    fair_use = app.fair_use
    if where.guessed and where.shared and (fair_use.allowed_groups or fair_use.denied_groups):
        logger.warning(f"marsho: {where.platform} could not say which chat {where.chat_id} is; not answered "
                       "there while MARSHO_ALLOWED_GROUPS or MARSHO_DENIED_GROUPS is set")
        return await is_superuser(bot, event)
    if app.fair_use.admits(place, where.user_id, superuser=False):
        return True
    return app.fair_use.admits(place, where.user_id, superuser=True) and await is_superuser(bot, event)


RICH_TEXT_PLATFORMS = frozenset({"Feishu"})
"""Adapters whose rich-text messages are read through alconna and chat/native.py first."""
def _from_a_bot(app: Marsho, bot: Bot, event: Event) -> bool:
    """Whether a message for marsho comes from the bot itself, an account in
    MARSHO_IGNORED_USERS, or one the platform marks as a bot: two bots that quote each other
    (or answer "marsho ...") would otherwise talk forever."""
    if platform_marks_bot(event):
        return True
    try:
        user_id = event.get_user_id()
    except Exception:
        return False
    return user_id == str(bot.self_id) or user_id in app.active.ignored


AT_ONLY_PLATFORMS = frozenset({"QQ"})
"""Platforms that deliver a bot only the group messages that @ it (with the @ taken out): there
every message a group sends the bot is for marsho, MARSHO_AT or not."""


async def _is_for_marsho(bot: Bot, event: Event, state: T_State) -> bool:
    # the running bot is fetched here, once per message, and handed to the handler in the state:
    # NoneBot's Depends would cost about 0.2 ms per use, and this rule sees every message
    app = current_app()
    if event.get_type() != "message":
        return False
    # another marsho's invisible marker, taken out before anything reads the text (chat/loops.py)
    marked = strip_marker(event)
    if bot.adapter.get_name() == "Telegram" and app.group_actions is not None:
        telegram_names.remember(event)  # "@bob" reads as bob's id for the group tools
    request = await _read_request(app, bot, event)
    if request is None:
        request = await _called_by_mention(app, bot, event, state)
    if request is not None and _from_a_bot(app, bot, event):
        return False  # never answer itself, another bot, or an account the owner ignores
    if request is None:
        await _not_for_marsho(app, bot, event, state, marked=marked)
        return False
    where = await where_of(bot, event, state)
    if not await admitted_here(app, bot, event, where):
        return False
    if request.command == "chat" and app.fair_use.queue.silenced(where.person):
        return False  # a flood: dropped here, before the handler costs anything
    request = await _unless_a_loop(app, bot, event, where, request, marked=marked)
    if request is None:
        return False
    state[STATE_KEY] = request
    state[APP_KEY] = app
    return True


LOOP_REASONS = {"marker": "its message carries the marker of another marsho",
                "behaviour": "it answers faster than a person types, or repeats marsho's answers"}


async def _unless_a_loop(app: Marsho, bot: Bot, event: Event, where: Where, request: Request, *,
                         marked: bool) -> Request | None:
    """The request, unless its sender is taken for a bot (chat/loops.py) or its chat is paused
    for too many answers (None; or the "paused" request whose handler says so, once).
    Superusers are never held: they are asked about only when something would hold them."""
    guard, chat = guard_of(app), chat_of(where)
    verdict = guard.detector.verdict(chat, where.user_id, request.text, marked=marked,
                                     quotes=quotes_the_bot(bot, event))
    check = "go" if verdict else guard.breaker.check(chat)
    if (verdict or check != "go") and await is_superuser(bot, event):
        return request
    if verdict:
        if guard.detector.first_log(chat, where.user_id):
            logger.info(f"marsho: {where.user_id} in {chat} taken for a bot ({LOOP_REASONS[verdict]}); "
                        "not answered")
        return None
    if check == "trip":
        logger.warning(f"marsho: {guard.breaker.limit} answers within a minute in {chat}: paused there "
                       "(MARSHO_CHAT_ANSWERS_PER_MINUTE)")
        return Request("paused", "")
    return request if check == "go" else None


async def _read_request(app: Marsho, bot: Bot, event: Event) -> Request | None:
    """The trigger word (and command) in the message's text, read the cheapest way that works."""
    starts, names = get_driver().config.command_start, app.config.trigger_names

    def read(text: str | None) -> Request | None:
        return parse_request(text, names, starts, REGISTRY) if text else None

    adapter = bot.adapter.get_name()
    request = None
    if adapter in RICH_TEXT_PLATFORMS:  # a post's plain text holds its pictures' keys
        request = read(await _text_without_mentions(bot, event))
    if request is None:
        request = read(_message_text(event))
    if request is None:  # what the adapter left of the message (an @ of the bot taken out...)
        request = read(event.get_plaintext())
    if request is None and adapter not in ("OneBot V11", *RICH_TEXT_PLATFORMS):
        # a leading @ segment... (v11's plain text already leaves out what is not text)
        request = read(await _text_without_mentions(bot, event))
    return request


async def _called_by_mention(app: Marsho, bot: Bot, event: Event, state: T_State) -> Request | None:
    """An @ of the bot in a group, where that calls marsho (MARSHO_AT, or a platform that sends a
    bot only those); private chats need the trigger word."""
    at_counts = app.config.marsho_at or bot.adapter.get_name() in AT_ONLY_PLATFORMS
    if not at_counts or looks_private(event) or not event.is_tome():
        return None
    where = await where_of(bot, event, state)
    return Request("chat", event.get_plaintext().strip()) if where.shared else None


async def _not_for_marsho(app: Marsho, bot: Bot, event: Event, state: T_State, *,
                          marked: bool = False) -> None:
    """A message not for marsho: a line that joins a question being answered, a picture kept for
    the next question, the group's recent chat, maybe an unsolicited reply (never to another
    marsho's message: `marked`)."""
    debounce = app.debounce
    if debounce.on:  # a second line of a question being answered joins it; a picture is kept
        line = event.get_plaintext().strip() if debounce.busy else ""
        if debounce.busy and debounce.join(person_in_chat(bot, event), event, line):
            return
        if picture_only(event) and (person := person_in_chat(bot, event)):
            debounce.keep_picture(person, event)
    # the group's recent chat, where its admins chose to share it: kept here, in the order
    # messages arrive, at no cost where nobody did
    await observe(app, bot, event, state, reserved_names(app, bot))
    if app.active.on_anywhere() and not marked:  # maybe answered anyway, in the background
        await consider_active(app, bot, event, state)


NOTICE_KEY = "marsho_notice"
"""The handler of the notice the rule took (a poke), for the handler of the same event."""
_notices: list[tuple[Checker, Handler]] = []


def on_notice_event(rule: Checker, handler: Handler) -> None:
    """Have marsho's one matcher take the notices `rule` says are for marsho, and `handler` answer
    them (chat/poke.py's pokes), instead of a matcher of their own: NoneBot checks every matcher
    for every event (a task, a log line each), so the plugin has one."""
    _notices.append((rule, handler))


async def _for_marsho(bot: Bot, event: Event, state: T_State) -> bool:
    """The one rule of every event: a message for marsho (`_is_for_marsho`), or a notice that one
    of `on_notice_event`'s rules takes."""
    kind = event.get_type()
    if kind == "message":
        return await _is_for_marsho(bot, event, state)
    if kind == "notice":
        for rule, handler in _notices:
            if await rule(bot, event, state):
                state[NOTICE_KEY] = handler
                return True
    return False


marsho = on(priority=10, block=True)  # every event type: messages, and the notices it takes
# the rule and the handler get the bot, the event and the state as they are (chat/direct.py): the
# rule sees every event, and NoneBot's dependency injection cost most of what a message not for
# marsho costs
marsho.rule = DirectRule(_for_marsho)


async def _send(text: str, images: Sequence[bytes] = (), *, quote: bool = True) -> None:
    # charts and other pictures the tools made go after the text; no secret of the bot's goes out
    message: UniMessage[Text | Image] = UniMessage([Text(redact(text)), *map(picture_segment, images)])
    try:
        await message.send(reply_to=quote)
    except Exception as error:  # a failed send is logged; the turn is already stored
        logger.opt(exception=error).error(f"marsho: could not send the reply: {error}")


def reserved_names(app: Marsho, bot: Bot) -> list[str]:
    """Names nobody may take or speak as: marsho's trigger words, the bot's NICKNAME and its
    account id."""
    return [*app.config.trigger_names, *get_driver().config.nickname, str(bot.self_id)]


def user_key(bot: Bot, user_id: str) -> str:
    """Whose nickname: one per person per platform, in every group and private chat."""
    return f"{platform_name(bot)}:{user_id}"


def _announcer(app: Marsho, how: Delivery) -> Callable[[list[ToolCall]], Any] | None:
    if not app.config.marsho_tool_progress:
        return None

    async def announce(calls: list[ToolCall]) -> None:
        await send_progress([call.name for call in calls], how)
    return announce


def _failure(t: Texts, owner: bool, detail: str, error: BaseException) -> str:
    """The reply to a failed question: the detail for superusers, one sentence for members."""
    return detail if owner else brief_text(t, brief_reason(error))


@direct_handler(marsho)
async def handle_event(bot: Bot, event: Event, state: T_State) -> None:
    """The one matcher's handler: the notice's own handler, else the request's."""
    notice: Handler | None = state.get(NOTICE_KEY)
    if notice is not None:
        await notice(bot, event, state)
        return
    await handle_request(bot, event, state)


async def handle_request(bot: Bot, event: Event, state: T_State) -> None:
    """Answer one request: a command (chat/commands/) or a question for the model."""
    request: Request = state[STATE_KEY]
    app: Marsho = state[APP_KEY]
    config, t = app.config, app.texts
    commands = REGISTRY
    if request.command == "unknown":  # marsho.<word> that names no command: the closest, then all
        await _told(app, bot, event, state, unknown_command_text(t, config.trigger_names[0], request.text,
                                                                  commands.names()))
        return
    if request.command == "paused":  # too many answers here: said once, not quoting (chat/loops.py)
        await _send(_paused_text(app), quote=False)
        return
    command = commands.get(request.command)
    person = person_in_chat(bot, event) if app.debounce.on else ""
    if command is None and not app.config_error and not _asks_something(app, bot, event, request, person):
        usage = usage_text(t, config.trigger_names, config.marsho_at, commands.names())
        await _told(app, bot, event, state, usage)
        return
    where = await where_of(bot, event, state)
    role = await asker_role(bot, event, where)
    if command is None or command.needs_model:
        refusal = _not_ready(app, role)
        if refusal is not None:  # ("marsho is not configured correctly": a second broken bot reads it)
            await _told(app, bot, event, state, refusal)
            return
    context = _context(app, bot, event, where, role, request.text, commands)
    if command is not None:
        await _run(command, context)
    else:
        await _ask(context, request, person)


async def _told(app: Marsho, bot: Bot, event: Event, state: T_State, text: str) -> None:
    """A reply that may start with the trigger word ("marsho.xyz is not one of my commands",
    "marsho is not configured correctly"), which another marsho reads as a request of its own:
    remembered like an answer (chat/loops.py), so two bots that tell each other so stop, then
    sent."""
    where = await where_of(bot, event, state)
    guard_of(app).answered(chat_of(where), where.user_id, text)
    await _send(text)


def _paused_text(app: Marsho) -> str:
    breaker, t = guard_of(app).breaker, app.texts
    return t("loops.paused", count=breaker.limit, wait=seconds_text(t, breaker.pause),
             name=app.config.marsho_name)


def _asks_something(app: Marsho, bot: Bot, event: Event, request: Request, person: str) -> bool:
    """Whether a question has more than the trigger word: text, a picture or a quote, or a picture
    sent just before (a bare trigger then asks about it); else the help answers."""
    return bool(request.text) or not text_only(bot, event) or (
        bool(person) and app.debounce.picture(person) is not None)


def _not_ready(app: Marsho, role: Role) -> str | None:
    """What the asker is told while the settings are broken or the model is not ready (None: it
    is): superusers (and the log) the detail, everyone else one sentence without addresses,
    paths or upstream text."""
    t, owner = app.texts, role == "superuser"
    if app.config_error:
        return t("config.broken", error=app.config_error) if owner else brief_text(t, "brief.config")
    try:
        app.require_engine()
    except NotReadyError as error:
        return str(error) if owner or not app.problem_brief else brief_text(t, app.problem_brief)
    return None


def _context(app: Marsho, bot: Bot, event: Event, where: Where, role: Role, text: str,
             commands: Registry) -> CommandContext:
    """The asker, where, and the session key of their conversation here (MARSHO_SESSION_SCOPE)."""
    scope = app.config.marsho_session_scope
    key = session_key(where.platform, group_id=where.group_id, user_id=where.user_id, scope=scope,
                      channel=where.kind == "channel")
    return CommandContext(app=app, bot=bot, event=event, where=where, role=role, key=key,
                          shared=where.shared and scope == "group", text=text, commands=commands,
                          reserved=reserved_names(app, bot), services=app.services)


async def _run(command: Command, context: CommandContext) -> None:
    """A command: who may use it and where (its declaration), its handler, its reply sent."""
    try:
        answer = await command.answer(context)
    except Exception as error:
        await _send(_failure_text(context, command.name, error))
        return
    guard_of(context.app).answered(chat_of(context.where), context.where.user_id, answer.text)
    await _send(answer.text, answer.pictures)


def _failure_text(context: CommandContext, what: str, error: Exception) -> str:
    """A failed request, logged, and the reply: the detail for superusers, one sentence for
    members."""
    t, key, owner = context.t, context.key, context.role == "superuser"
    if isinstance(error, EndpointError):
        logger.warning(f"marsho: session {key}: {error}")
        detail = t("error.endpoint", error=error_text(t, error))
    elif isinstance(error, StoreError):
        logger.error(f"marsho: session {key}: {error}")
        detail = t("error.database", error=error_text(t, error))
    elif isinstance(error, MarshoError):  # a problem we can name (the token budget...)
        logger.warning(f"marsho: session {key}: {error}")
        detail = t("error.named", error=error_text(t, error))
    else:
        logger.opt(exception=error).error(f"marsho: session {key}: {what} failed")
        detail = t("error.internal", error=f"{type(error).__name__}: {error}")
    return _failure(t, owner, detail, error)


async def _ask(context: CommandContext, request: Request, person: str) -> None:
    """A question: asked (or refused, or joined to one being answered), then its answer sent
    (as it is written, with MARSHO_SEGMENTED_REPLY: chat/segments.py)."""
    app, config, where = context.app, context.app.config, context.where
    shown = SegmentedReply(  # each segment known to the loop guard as it goes
        context.bot, app.delivery(), limit=config.marsho_segments,
        on_sent=functools.partial(guard_of(app).detector.answered, chat_of(where), where.user_id),
    ) if config.marsho_segmented_reply else None
    segmented(shown)
    try:
        async with typing_shown(context.bot, context.event, private=where.kind == "private",
                                on=config.marsho_typing_indicator):
            asked = await _asked(context, request, person)
    except Exception as error:
        if shown is not None:  # what streamed and was not shown yet goes before the failure
            await shown.fail()
        await _send(_failure_text(context, request.command, error))
        return
    if asked is None:  # refused (and told, where it is told), or joined to another question
        return
    reply, tips = asked
    if reply is None:  # nothing to ask (a picture for a model that cannot see): the tip says so
        await _send("\n".join(tips))
        return
    await _deliver(context, reply, tips)


async def _asked(context: CommandContext, request: Request,
                 person: str) -> tuple[Reply | None, list[str]] | None:
    """The question's reply and tips, through the quota, the debounce and fair use; None when one
    of them takes it (a refusal is told once, then silence)."""
    app, where, t = context.app, context.where, context.t
    over = await _over_quota(context)
    # over a daily quota: refused before the rate limits count it (or a cheaper model answers)
    cheaper = app.config.marsho_quota_fallback_model if over is not None else ""
    if over is not None and not cheaper:
        if app.fair_use.notices.first(f"quota:{where.person}"):  # told once a window, then silence
            await _send(quota_text(t, over))
        return None
    # a flood costs nothing: a full queue or a rate limit refuses the question, and only the
    # first refusal is told (once per burst, once per window); then silence
    if person and app.debounce.join(person, context.event, request.text):
        return None  # a second line of a question being answered: it restarts with both, one answer
    turn = app.fair_use.admit(where.person, where.chat, superuser=context.role == "superuser")
    if not turn.go:
        await _refused(t, turn)
        return None
    try:
        reply, tips = await _in_lane(context, request, person, cheaper)
        if over is not None and reply is not None:
            tips = [*tips, t("quota.cheaper", model=cheaper, reason=quota_text(t, over))]
    except BaseException:
        turn.refund()  # a failed answer does not use up the asker's (or the group's) rate limit
        raise
    finally:
        turn.done()
    if reply is None:  # nothing was asked (the tips say why): it costs nothing either
        turn.refund()
    return reply, tips


async def _over_quota(context: CommandContext) -> OverQuota | None:
    """The daily quota the asker (or their group, or everyone) used up; superusers have none."""
    app, where = context.app, context.where
    if context.role == "superuser":
        return None
    return await app.meter.over_quota(where.person, where.chat or "", limits_of(app.config))


async def _refused(t: Texts, turn: Admission) -> None:
    """Fair use's refusal, where it is to be told: the queue is full, or the asker waits."""
    if turn.notice == "queue":
        await _send(t("queue.full"))
    elif turn.notice == "rate":
        await _send(t("rate.limited", wait=seconds_text(t, turn.wait)))


async def _in_lane(context: CommandContext, request: Request, person: str,
                   cheaper: str) -> tuple[Reply | None, list[str]]:
    """Ask in the lane of the chat the question came from, on the asker's bill."""
    app, where, key = context.app, context.where, context.key
    # this turn's requests wait their turn in the lane of the chat it came from (the group,
    # whatever MARSHO_SESSION_SCOPE; else the private chat): a flood in one group, by one
    # member or many, waits behind itself and never ahead of the other chats
    chat = chat_key(where)
    # every request of the turn (tool rounds included) goes on the asker's bill
    with lane(chat), charged_to(Asker(key, where.person, where.chat or "")), model_for_turn(cheaper):
        return await _answered(app, context.bot, context.event, where, context.engine, request, key,
                               shared=context.shared, role=context.role, person=person)


def chat_key(where: Where) -> str:
    """The chat a message came from (the group, the channel, else the private chat), whatever
    MARSHO_SESSION_SCOPE: its lane, and the key its saved target is found by."""
    return chat_of(where)


async def _deliver(context: CommandContext, reply: Reply, tips: list[str]) -> None:
    """Send the answer: its reasoning first where the owner wants it (after it, when its start was
    shown as it streamed), then the text and pictures, with the tips (or the note that it was not
    saved)."""
    app, t, config, key = context.app, context.t, context.app.config, context.key
    how = app.delivery()
    shown = current_segments()
    streamed = shown is not None and shown.told
    thinking = config.marsho_send_reasoning and bool(reply.reasoning)
    if thinking and not streamed:
        await send_reasoning(context.bot, reply.reasoning, how)
    answer = reply_text(t, reply, context.engine.max_tool_rounds, config.marsho_max_answer_chars)
    if reply.save_error is not None:  # answered, but not saved: still worth sending
        logger.error(f"marsho: session {key}: {reply.save_error}")
        saved = reply.save_error
        owner = context.role == "superuser"
        unsaved = t("error.unsaved", error=error_text(t, saved)) if owner else t("error.unsaved_brief")
        text = f"{answer}\n{unsaved}"
    else:
        text = "\n\n".join([answer, *tips])
    where = context.where
    # remembered before it goes: a bot's reply to it may come before the send returns
    guard_of(app).answered(chat_of(where), where.user_id, text)
    # an answer that streamed is delivered as it was shown
    if shown is None or not streamed or not await shown.finish(text, reply.images):
        await send_answer(context.bot, text, reply.images, how)
    if thinking and streamed:
        await send_reasoning(context.bot, reply.reasoning, how)
    # where this chat is, kept for whatever speaks in it later (a write only when it changed)
    if context.services is not None:
        await context.services.targets.remember(context.bot, context.event, chat_key(where))
    if where.shared and app.active.on_anywhere():  # an unsolicited reply never repeats it
        app.active.sent(group_key(where), answer)


async def _answered(
    app: Marsho, bot: Bot, event: Event, where: Where, engine: Engine, request: Request, key: str, *,
    shared: bool, role: Role, person: str,
) -> tuple[Reply | None, list[str]]:
    """`_chat`, joined by the person's messages in this chat within MARSHO_DEBOUNCE_SECONDS (a
    picture just before, lines that come while it is answered: chat/debounce.py). It asks at
    once; a line that comes meanwhile abandons the request (its answer is dropped, and the
    engine stores nothing of an unfinished turn) and asks again with every line."""
    if not person:
        return await _chat(app, bot, event, where, engine, request, key, shared=shared, role=role)
    debounce = app.debounce
    pending = debounce.begin(person)
    shown = current_segments()
    if shown is not None:  # once its answer shows in the chat, a later line is a question of its own
        shown.on_shown = functools.partial(pending.commit, None)
    try:
        while True:
            pending.restart = False
            task = asyncio.ensure_future(_chat(app, bot, event, where, engine, request, key, shared=shared,
                                               role=role, before=list(pending.before),
                                               after=list(pending.after), keep=pending.commit))
            pending.task = task
            try:
                await asyncio.wait({task})
            except BaseException:
                task.cancel()
                raise
            if task.cancelled() and pending.restart:
                logger.debug(f"marsho: session {key}: a follow-up came; asking again with it")
                continue
            return task.result()
    finally:
        debounce.end(person, pending)


async def consider_active(app: Marsho, bot: Bot, event: Event, state: T_State) -> None:
    """A group message not for marsho, in a group with active replies on: if the guards let it
    (never the bot itself, nor another bot, nor a private chat; quiet hours, the group's cooldown
    and hourly ceiling), decide and answer in the background, so the rule never waits on it."""
    if not _unaddressed(event):
        return
    where = await where_of(bot, event, state)
    active = app.active
    if not where.shared or where.user_id == str(bot.self_id) or where.user_id in active.ignored:
        return
    group = group_key(where)
    if not active.is_on(group) or not active.guards_pass(group) or not app.ready or app.config_error:
        return
    if not app.fair_use.admits(where.names or None, where.user_id, superuser=False):
        return
    said = message_text(bot, event, app.texts)
    if said:
        active.spawn(_active_reply(app, bot, event, where, group, said))


def _unaddressed(event: Event) -> bool:
    """A message in a shared chat, from a person, that does not @ the bot (where MARSHO_AT is off,
    an @ not answered is the owner's choice)."""
    if event.get_type() != "message" or looks_private(event) or platform_marks_bot(event):
        return False
    try:
        return not event.is_tome()
    except Exception:
        return False


async def _active_reply(app: Marsho, bot: Bot, event: Event, where: Where, group: str, said: str) -> None:
    """Answer a message nobody addressed to marsho, if its group's keywords, chance or judge
    model say so: in the group's conversation with its recent chat, like a question, counted
    against the rate limits, not quoting it; silent on every failure."""
    active, config = app.active, app.config
    if await _quota_used_up(app, where, group):
        return
    called = await _called_unasked(app, where, group, said)
    engine = app.engine
    if called is None or engine is None:
        return
    if not active.claim(group):
        return
    if guard_of(app).breaker.holds(group):  # a paused chat, or one at the limit
        return
    turn = app.fair_use.admit(where.person, where.chat, superuser=False)
    if not turn.go:
        return
    target = speak_in(bot, event)  # no handler here: what this task says goes to the group
    reply = await _unsolicited(app, bot, event, where, engine, group, said, turn)
    if reply is None:
        return
    answer = reply_text(app.texts, reply, engine.max_tool_rounds, config.marsho_max_answer_chars)
    active.sent(group, answer)
    guard_of(app).answered(group, where.user_id, answer)
    logger.info(f"marsho: answered unsolicited in {group} ({called})")
    await send_answer(bot, answer, reply.images, app.delivery(), quote=False, to=target)


async def _quota_used_up(app: Marsho, where: Where, group: str) -> bool:
    """The group's (or everyone's) used-up daily quota: no unsolicited answer, and not even the
    judge is asked (nor when the quota cannot be read). An unsolicited reply is the group's bill,
    so the member it would answer being over their own quota does not stop it."""
    try:
        return await app.meter.over_group_quota(where.chat or "", limits_of(app.config)) is not None
    except MarshoError as error:
        logger.warning(f"marsho: no unsolicited reply in {group}: {error}")
        return True


async def _called_unasked(app: Marsho, where: Where, group: str, said: str) -> str | None:
    """Why the message gets an answer: "keyword", "chance", or "judge" (the judge model said so);
    None if nothing calls it."""
    active = app.active
    called = active.called_by(group, said)
    if called is not None or app.judge is None:
        return called
    # one judge request at a time per group, and only while the guards would let an answer
    # through: a burst in a busy group is not a burst of paid requests
    if group in active.judging or not active.guards_pass(group):
        return None
    active.judging.add(group)
    try:
        # on the bill of the member it judged (not as a question)
        with charged_to(Asker("", where.person, where.chat or "", question=False)):
            return "judge" if await judge(app.judge, app.config.marsho_name, said) else None
    finally:
        active.judging.discard(group)


async def _unsolicited(app: Marsho, bot: Bot, event: Event, where: Where, engine: Engine, group: str,
                       said: str, turn: Admission) -> Reply | None:
    """The unsolicited reply to send, None if there is none (it failed, was not saved, or repeats
    a recent one: then it is neither stored nor sent)."""
    active, config = app.active, app.config
    scope, channel = config.marsho_session_scope, where.kind == "channel"
    key = session_key(where.platform, group_id=where.group_id, user_id=where.user_id, scope=scope,
                      channel=channel)
    chat = session_key(where.platform, group_id=where.group_id, user_id=where.user_id, channel=channel)
    request = Request("chat", event.get_plaintext().strip())
    try:
        try:
            def fresh(reply: Reply) -> bool:  # a repeat is neither sent nor remembered
                answer = reply_text(app.texts, reply, engine.max_tool_rounds, config.marsho_max_answer_chars)
                return not active.repeats(group, answer)

            # on the bill of the member it answers, like a question (it counts as one)
            with lane(chat), charged_to(Asker(key, where.person, where.chat or "")):
                reply, _ = await _chat(app, bot, event, where, engine, request, key, shared=scope == "group",
                                       role="member", keep=fresh, observed=said)
        except BaseException:
            turn.refund()
            raise
        finally:
            turn.done()
    except Exception as error:
        logger.warning(f"marsho: an unsolicited reply in {group} failed: {error}")
        return None
    if reply is None or reply.save_error is not None:
        turn.refund()
        return None
    if reply.declined:  # `fresh` said it repeats a recent reply: neither stored nor sent
        logger.info(f"marsho: an unsolicited reply in {group} repeated a recent one; not sent")
        return None
    return reply

from .ask import _chat  # noqa: E402  (ask.py uses the helpers above)
