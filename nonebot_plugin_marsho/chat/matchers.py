"""The NoneBot face: which messages are for marsho, and turning them into engine calls and replies."""

from __future__ import annotations

import asyncio
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from nonebot import get_driver, on_message
from nonebot.adapters import Bot, Event
from nonebot.permission import SuperUser
from nonebot.rule import Rule
from nonebot.typing import T_State
from nonebot_plugin_alconna.uniseg import Image, Text, UniMessage

from ..agent.engine import Engine, Reply
from ..agent.gate import lane
from ..agent.judge import judge
from ..agent.metering import Asker, charged_to, model_for_turn
from ..agent.persona import (
    NicknameError,
    check_nickname,
    speaker_label,
)
from ..exceptions import EndpointError, MarshoError, NotReadyError, StoreError
from ..i18n import Texts
from ..redaction import logger, redact
from ..store.session import session_key
from ..tools.model import Role, ToolCall, ToolContext
from .active import flagged_bot
from .app import Marsho, current_app
from .bill import limits_of, quota_command, quota_text, usage_report
from .commands.group import active_command, context_command, persona_command
from .commands.owner import switch_model
from .commands.session import export_session
from .commands.words import RESET_WORDS
from .debounce import person_in_chat, picture_only
from .fairuse import seconds_text
from .incoming import text_only
from .memory import memory_command
from .native import own_content
from .observe import group_key, message_text, observe
from .outgoing import Delivery, picture_segment, send_answer, send_progress, send_reasoning
from .render import (
    brief_reason,
    brief_text,
    calls_text,
    error_text,
    history_text,
    reply_text,
    status_text,
    tools_text,
    unknown_command_text,
    usage_text,
)
from .targets import speak_in
from .where import Where, looks_private, platform_name, where_of

COMMANDS = ("help", "reset", "tools", "calls", "history", "export", "model", "nickname", "context", "forget",
            "persona", "active", "status", "usage", "quota", "memory")
GROUP_COMMANDS = ("context", "forget", "persona", "active")
"""Commands about the group they are sent in (its recent chat, its persona, its active replies)."""
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


def parse_request(text: str, names: list[str], command_starts: Iterable[str]) -> Request | None:
    """Read `marsho ...`, `/marsho ...`, `!marsho ...`, `Marsho.reset` or `小棉你好`; None if not
    for us. `marsho.<word>` with a word that names no command is Request("unknown", word);
    `marsho. <question>` (a space after the dot) is a question."""
    text = text.strip()
    # whatever the bot's COMMAND_START (["!"], [""], several), "marsho", "/marsho" and
    # "<any start>marsho" all work
    candidates = [text]
    for start in sorted({"/", *command_starts} - {""}, key=len, reverse=True):
        if text.startswith(start):
            candidates.append(text[len(start):].lstrip())
            break
    for candidate in candidates:
        request = _read_trigger(candidate, names)
        if request is not None:
            return request
    return None


@functools.lru_cache(maxsize=64)
def _folded(name: str) -> str:
    """A trigger word as a message's start is compared with it: NFKC, case-folded (once per name,
    not once per message)."""
    return unicodedata.normalize("NFKC", name).casefold()


def _read_trigger(text: str, names: list[str]) -> Request | None:
    for name in sorted(names, key=len, reverse=True):
        # any case, and typed full-width (ｍａｒｓｈｏ) as an input method may
        if unicodedata.normalize("NFKC", text[:len(name)]).casefold() != _folded(name):
            continue
        rest = text[len(name):]
        mention = BOT_MENTION.match(rest)
        if mention:  # Telegram's "/marsho@MarshoBot hi": the command names the bot it is for
            rest = rest[mention.end():]
        match = COMMAND_WORD.match(rest)
        if match:
            word = unicodedata.normalize("NFKC", match.group(2)).lower()
            if word in COMMANDS:  # its arguments as ASCII too: "ｍａｒｓｈｏ．ｎｉｃｋｎａｍｅ　ｒｅｓｅｔ"
                return Request(word, unicodedata.normalize("NFKC", rest[match.end():]).strip())
            return Request("unknown", word)
        match = IDEOGRAPHIC_COMMAND.match(rest)
        if match and (word := unicodedata.normalize("NFKC", match.group(1))) in COMMANDS:
            return Request(word, "")
        # "marsho." and "marsho. what is this" ask; "marshomallow" and "marsho.ai/x" are not for
        # us; "marsho你好" and "小棉你好" need no space (each read as typed full-width too)
        first, second = unicodedata.normalize("NFKC", rest[:1]), unicodedata.normalize("NFKC", rest[1:2])
        asks = first == "." and (not second or second.isspace())
        if not asks and first and name[-1].isascii() and first.isascii() and (
                first.isalnum() or first in "_-."):
            continue
        return Request("chat", rest.lstrip(" \t\r\n,，:：!！?？~.。．").strip())
    return None


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
    if flagged_bot(event):
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
    config = app.config
    starts = get_driver().config.command_start
    names = config.trigger_names
    request = None
    native: str | None = None
    if bot.adapter.get_name() in RICH_TEXT_PLATFORMS:  # a post's plain text holds its pictures' keys
        native = await _text_without_mentions(bot, event)
        request = parse_request(native, names, starts) if native else None
    if request is None:
        request = parse_request(_message_text(event), names, starts)
    if request is None:  # what the adapter left of the message (an @ of the bot taken out...)
        request = parse_request(event.get_plaintext(), names, starts)
    if request is None and bot.adapter.get_name() not in ("OneBot V11", *RICH_TEXT_PLATFORMS):
        # a leading @ segment... (v11's plain text already leaves out what is not text)
        native = await _text_without_mentions(bot, event)
        request = parse_request(native, names, starts) if native else None
    where = None
    at_counts = config.marsho_at or bot.adapter.get_name() in AT_ONLY_PLATFORMS
    if request is None and at_counts and not looks_private(event) and event.is_tome():
        where = await where_of(bot, event, state)
        if where.shared:  # an @ of the bot in a group; private chats need the trigger word
            request = Request("chat", event.get_plaintext().strip())
    if request is not None and _from_a_bot(app, bot, event):
        return False  # never answer itself, another bot, or an account the owner ignores
    if request is None:
        debounce = app.debounce
        if debounce.on:  # a second line of a question being answered joins it; a picture is kept
            line = event.get_plaintext().strip() if debounce.busy else ""
            if debounce.busy and debounce.join(person_in_chat(bot, event), event, line):
                return False
            if picture_only(event) and (person := person_in_chat(bot, event)):
                debounce.keep_picture(person, event)
        # the group's recent chat, where its admins chose to share it: kept here, in the order
        # messages arrive, at no cost where nobody did
        await observe(app, bot, event, state, reserved_names(app, bot))
        if app.active.on_anywhere():  # maybe answered anyway, in the background
            await consider_active(app, bot, event, state)
        return False
    where = where or await where_of(bot, event, state)
    if not await admitted_here(app, bot, event, where):
        return False
    if request.command == "chat" and app.fair_use.queue.silenced(where.person):
        return False  # a flood: dropped here, before the handler costs anything
    state[STATE_KEY] = request
    state[APP_KEY] = app
    return True


marsho = on_message(rule=Rule(_is_for_marsho), priority=10, block=True)


async def _send(text: str, images: Sequence[bytes] = ()) -> None:
    # charts and other pictures the tools made go after the text; no secret of the bot's goes out
    message: UniMessage[Text | Image] = UniMessage([Text(redact(text)), *map(picture_segment, images)])
    try:
        await message.send(reply_to=True)
    except Exception as error:  # a failed send is logged; the turn is already stored
        logger.opt(exception=error).error(f"marsho: could not send the reply: {error}")


def reserved_names(app: Marsho, bot: Bot) -> list[str]:
    """Names nobody may take or speak as: marsho's trigger words, the bot's NICKNAME and its
    account id."""
    return [*app.config.trigger_names, *get_driver().config.nickname, str(bot.self_id)]


def _speaker(app: Marsho, bot: Bot, where: Where, nickname: str | None = None) -> str:
    """How the asker is named to the model: the nickname they chose, else their name in the
    group (card, member nickname) or account name, else their id; normalised so that no name
    forges a line or speaks as the bot."""
    name = nickname or where.name or where.user_id
    return speaker_label(name, where.user_id, reserved_names(app, bot))


def user_key(bot: Bot, user_id: str) -> str:
    """Whose nickname: one per person per platform, in every group and private chat."""
    return f"{platform_name(bot)}:{user_id}"


async def nickname_command(app: Marsho, bot: Bot, user_id: str, text: str) -> str:
    """`marsho.nickname`: show, set, or (`reset`) forget the asker's nickname."""
    nicknames, t, config = app.nicknames, app.texts, app.config
    assert nicknames is not None
    name, key = config.marsho_name, user_key(bot, user_id)
    if not text:
        current = await nicknames.get(key)
        return t("nickname.show", nickname=current, name=name) if current else t("nickname.unset", name=name)
    if text.casefold() in RESET_WORDS:
        await nicknames.set(key, None)
        return t("nickname.cleared")
    try:
        nickname = check_nickname(text, config.marsho_nickname_limit, reserved_names(app, bot))
    except NicknameError as error:
        return error_text(t, error)
    await nicknames.set(key, nickname)
    return t("nickname.set", nickname=nickname)


async def group_command(app: Marsho, request: Request, where: Where, role: Role) -> str:
    """`marsho.context [on|off]`, `marsho.forget` and `marsho.persona [text|reset]`: about the
    group they are sent in; anyone may look, group admins, owners and superusers may change."""
    if not where.shared:
        return app.texts("group.only", command=f"{app.config.marsho_name}.{request.command}")
    group, admin, text = group_key(where), role != "member", request.text.strip()
    if request.command == "persona":
        return await persona_command(app, group, admin, text)
    if request.command == "active":
        return await active_command(app, group, admin, text)
    return await context_command(app, request.command, group, admin, text)



async def _command(app: Marsho, engine: Engine, request: Request, key: str, role: Role, shared: bool) -> str:
    """The reply to a `marsho.<command>`."""
    t = app.texts
    if request.command == "reset":
        if shared and role == "member":
            return t("reset.shared")
        dropped = await engine.reset(key)
        return t("reset.done", turns_text=t.plural("count.turns", dropped)) if dropped else t("reset.empty")
    if request.command == "tools":
        return tools_text(t, engine.toolset, app.mcp.status() if app.mcp else None, owner=role == "superuser")
    if request.command == "calls":
        asker = ToolContext(session_key=key, role=role)
        return calls_text(t, await engine.last_calls(key, asker), app.config.marsho_calls_chars)
    if request.command == "history":
        turns, messages, tokens = await engine.history.stats(key)
        return history_text(t, turns, messages, tokens, engine.max_tokens, engine.counter.name,
                            await engine.summary(key))
    if role != "superuser":
        return t("command.superusers", command=f"{app.config.marsho_name}.{request.command}")
    if request.command == "export":
        return await export_session(app, engine, key)
    if request.command == "status":
        return status_text(t, engine.llm.status(), engine.summarizer.status() if engine.summarizer else None)
    return await switch_model(app, engine, request.text)


async def bill_command(app: Marsho, request: Request, where: Where, role: Role) -> tuple[str, list[bytes]]:
    """`marsho.usage` and `marsho.quota` (chat/bill.py)."""
    if app.meter is None:
        return app.texts("bill.unavailable"), []
    if request.command == "quota":
        return await quota_command(app.meter, app.texts, app.config, where, role, request.text), []
    return await usage_report(app.meter, app.texts, app.config, where, role, request.text)



def _announcer(app: Marsho, how: Delivery) -> Callable[[list[ToolCall]], Any] | None:
    if not app.config.marsho_tool_progress:
        return None

    async def announce(calls: list[ToolCall]) -> None:
        await send_progress([call.name for call in calls], how)
    return announce


def _failure(t: Texts, owner: bool, detail: str, error: BaseException) -> str:
    """The reply to a failed question: the detail for superusers, one sentence for members."""
    return detail if owner else brief_text(t, brief_reason(error))


@marsho.handle()
async def handle_request(bot: Bot, event: Event, state: T_State) -> None:
    """Answer one request: a command or a question for the model."""
    request: Request = state[STATE_KEY]
    app: Marsho = state[APP_KEY]
    config, t = app.config, app.texts
    if request.command == "unknown":  # marsho.<word> that names no command: the closest, then all
        await _send(unknown_command_text(t, config.trigger_names[0], request.text))
        return
    person = person_in_chat(bot, event) if app.debounce.on else ""
    # a bare trigger right after a picture asks about the picture
    picture_before = bool(person) and app.debounce.picture(person) is not None
    has_more = request.text or not text_only(bot, event) or picture_before
    if request.command == "help" or (request.command == "chat" and not has_more and not app.config_error):
        await _send(usage_text(t, config.trigger_names, config.marsho_at))
        return
    where = await where_of(bot, event, state)
    user_id = where.user_id
    role = await asker_role(bot, event, where)
    # superusers (and the log) get the detail; everyone else one sentence without addresses,
    # paths or upstream text
    owner = role == "superuser"
    if app.config_error:
        await _send(t("config.broken", error=app.config_error) if owner else brief_text(t, "brief.config"))
        return
    try:
        engine = app.require_engine()
    except NotReadyError as error:
        await _send(str(error) if owner or not app.problem_brief else brief_text(t, app.problem_brief))
        return
    scope = config.marsho_session_scope
    channel = where.kind == "channel"
    key = session_key(where.platform, group_id=where.group_id, user_id=user_id, scope=scope, channel=channel)
    shared = where.shared and scope == "group"
    try:
        if request.command == "nickname":
            await _send(await nickname_command(app, bot, user_id, request.text))
            return
        if request.command in GROUP_COMMANDS:
            await _send(await group_command(app, request, where, role))
            return
        if request.command == "memory":
            await _send(await memory_command(app, where, role, request.text))
            return
        if request.command in ("usage", "quota"):
            await _send(*await bill_command(app, request, where, role))
            return
        if request.command != "chat":
            await _send(await _command(app, engine, request, key, role, shared))
            return
        # over a daily quota: refused before the rate limits count it (or a cheaper model answers)
        over = None if owner or app.meter is None else await app.meter.over_quota(
            where.person, where.chat or "", limits_of(config))
        cheaper = config.marsho_quota_fallback_model if over is not None else ""
        if over is not None and not cheaper:
            if app.fair_use.notices.first(f"quota:{where.person}"):  # told once a window, then silence
                await _send(quota_text(t, over))
            return
        # a flood costs nothing: a full queue or a rate limit refuses the question, and only the
        # first refusal is told (once per burst, once per window); then silence
        if person and app.debounce.join(person, event, request.text):
            return  # a second line of a question being answered: it restarts with both, one answer
        turn = app.fair_use.admit(where.person, where.chat, superuser=owner)
        if not turn.go:
            if turn.notice == "queue":
                await _send(t("queue.full"))
            elif turn.notice == "rate":
                await _send(t("rate.limited", wait=seconds_text(t, turn.wait)))
            return
        try:
            # this turn's requests wait their turn in the lane of the chat it came from (the group,
            # whatever MARSHO_SESSION_SCOPE; else the private chat): a flood in one group, by one
            # member or many, waits behind itself and never ahead of the other chats
            chat = session_key(where.platform, group_id=where.group_id, user_id=user_id, channel=channel)
            # every request of the turn (tool rounds included) goes on the asker's bill
            with lane(chat), charged_to(Asker(key, where.person, where.chat or "")), model_for_turn(cheaper):
                reply, tips = await _answered(app, bot, event, where, engine, request, key, shared=shared,
                                              role=role, person=person)
            if over is not None and reply is not None:
                tips = [*tips, t("quota.cheaper", model=cheaper, reason=quota_text(t, over))]
        except BaseException:
            turn.refund()  # a failed answer does not use up the asker's (or the group's) rate limit
            raise
        finally:
            turn.done()
        if reply is None:  # nothing was asked (the tips say why): it costs nothing either
            turn.refund()
    except EndpointError as error:
        logger.warning(f"marsho: session {key}: {error}")
        await _send(_failure(t, owner, t("error.endpoint", error=error_text(t, error)), error))
        return
    except StoreError as error:
        logger.error(f"marsho: session {key}: {error}")
        await _send(_failure(t, owner, t("error.database", error=error_text(t, error)), error))
        return
    except MarshoError as error:  # a problem we can name (the token budget...)
        logger.warning(f"marsho: session {key}: {error}")
        await _send(_failure(t, owner, t("error.named", error=error_text(t, error)), error))
        return
    except Exception as error:
        logger.opt(exception=error).error(f"marsho: session {key}: {request.command} failed")
        await _send(_failure(t, owner, t("error.internal", error=f"{type(error).__name__}: {error}"), error))
        return
    if reply is None:  # nothing to ask (a picture for a model that cannot see): the tip says so
        await _send("\n".join(tips))
        return
    how = app.delivery()
    if config.marsho_send_reasoning and reply.reasoning:
        await send_reasoning(bot, reply.reasoning, how)
    answer = reply_text(t, reply, engine.max_tool_rounds, config.marsho_max_answer_chars)
    if reply.save_error is not None:  # answered, but not saved: still worth sending
        logger.error(f"marsho: session {key}: {reply.save_error}")
        saved = reply.save_error
        unsaved = t("error.unsaved", error=error_text(t, saved)) if owner else t("error.unsaved_brief")
        text = f"{answer}\n{unsaved}"
    else:
        text = "\n\n".join([answer, *tips])
    await send_answer(bot, text, reply.images, how)
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
    if event.get_type() != "message" or looks_private(event) or flagged_bot(event):
        return
    try:
        if event.is_tome():  # an @ of the bot, where MARSHO_AT is off: the owner's choice
            return
    except Exception:
        return
    where = await where_of(bot, event, state)
    active = app.active
    if not where.shared or where.user_id == str(bot.self_id) or where.user_id in active.ignored:
        return
    group = group_key(where)
    if not active.is_on(group) or not active.guards_pass(group) or app.engine is None or app.config_error:
        return
    if not app.fair_use.admits(where.names or None, where.user_id, superuser=False):
        return
    said = message_text(bot, event, app.texts)
    if said:
        active.spawn(_active_reply(app, bot, event, where, group, said))


async def _active_reply(app: Marsho, bot: Bot, event: Event, where: Where, group: str, said: str) -> None:
    """Answer a message nobody addressed to marsho, if its group's keywords, chance or judge
    model say so: in the group's conversation with its recent chat, like a question, counted
    against the rate limits, not quoting it; silent on every failure."""
    active, config = app.active, app.config
    try:
        # a used-up daily quota: no unsolicited answer, and not even the judge is asked
        if app.meter is not None and await app.meter.over_quota(where.person, where.chat or "",
                                                                limits_of(config)) is not None:
            return
    except MarshoError as error:
        logger.warning(f"marsho: no unsolicited reply in {group}: {error}")
        return
    called = active.called_by(group, said)
    if called is None and app.judge is not None:
        # one judge request at a time per group, and only while the guards would let an answer
        # through: a burst in a busy group is not a burst of paid requests
        if group in active.judging or not active.guards_pass(group):
            return
        active.judging.add(group)
        try:
            # on the bill of the member it judged (not as a question)
            with charged_to(Asker("", where.person, where.chat or "", question=False)):
                if await judge(app.judge, config.marsho_name, said):
                    called = "judge"
        finally:
            active.judging.discard(group)
    engine = app.engine
    if called is None or engine is None:
        return
    if not active.claim(group):
        return
    turn = app.fair_use.admit(where.person, where.chat, superuser=False)
    if not turn.go:
        return
    target = speak_in(bot, event)  # no handler here: what this task says goes to the group
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
        return
    if reply is None or reply.save_error is not None:
        turn.refund()
        return
    if reply.declined:  # `fresh` said it repeats a recent reply: neither stored nor sent
        logger.info(f"marsho: an unsolicited reply in {group} repeated a recent one; not sent")
        return
    answer = reply_text(app.texts, reply, engine.max_tool_rounds, config.marsho_max_answer_chars)
    active.sent(group, answer)
    logger.info(f"marsho: answered unsolicited in {group} ({called})")
    await send_answer(bot, answer, reply.images, app.delivery(), quote=False, to=target)


from .ask import _chat  # noqa: E402  (ask.py uses the helpers above)
