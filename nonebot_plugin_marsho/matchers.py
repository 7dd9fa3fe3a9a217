"""The NoneBot face: which messages are for marsho, and turning them into engine calls and replies."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nonebot_plugin_localstore as localstore
from nonebot import get_driver, on_message
from nonebot.adapters import Bot, Event
from nonebot.log import logger
from nonebot.permission import SuperUser
from nonebot.rule import Rule
from nonebot.typing import T_State
from nonebot_plugin_alconna.uniseg import Image, Text, UniMessage

from .config import config_error, plugin_config
from .engine import Engine, Reply
from .exceptions import EndpointError, MarshoError, NotReadyError, StoreError
from .fairuse import RateLimiter, admitted, seconds_text
from .render import calls_text, history_text, reply_text, tools_text, usage_text
from .session import session_key
from .tokens import load_counter
from .tools.model import Role, ToolContext

COMMANDS = ("help", "reset", "tools", "calls", "history", "export", "model")
MODEL_SETTING = "model"
"""The model chosen with `marsho.model`, kept in the database across restarts."""
MAX_EXPORT_CHARS = 3000
_is_superuser = SuperUser()
STATE_KEY = "marsho_request"


@dataclass(frozen=True)
class Request:
    """What a message asks of marsho: a command (or "chat") and the text after the trigger."""

    command: str
    text: str


@dataclass
class Runtime:
    """The engine built at startup, or why there is none."""

    engine: Engine | None = None
    problem: str = "marsho is still starting; try again in a moment."
    mcp: Any = None
    """The McpManager when MCP servers are configured."""

    def require_engine(self) -> Engine:
        """The engine, or NotReadyError saying what to fix."""
        if self.engine is None:
            raise NotReadyError(self.problem)
        return self.engine


runtime = Runtime()


def parse_request(text: str, names: list[str], command_starts: set[str]) -> Request | None:
    """Read `marsho ...`, `/marsho ...`, `Marsho.reset` or `小棉你好`; None if not for us."""
    text = text.strip()
    # whatever the bot's COMMAND_START, "/marsho" and "marsho" both work
    for start in sorted((s for s in command_starts if s), key=len, reverse=True):
        if text.startswith(start):
            text = text[len(start):].lstrip()
            break
    folded = text.casefold()
    for name in sorted(names, key=len, reverse=True):
        if not folded.startswith(name.casefold()):
            continue
        rest = text[len(name):]
        match = re.match(r"\.([A-Za-z]+)(?=\s|$)", rest)
        if match and match.group(1).lower() in COMMANDS:
            return Request(match.group(1).lower(), rest[match.end():].strip())
        # "marshomallow" is not for us; "marsho你好" and "小棉你好" need no space
        if rest and name[-1].isascii() and rest[0].isascii() and (rest[0].isalnum() or rest[0] in "_-."):
            continue
        return Request("chat", rest.lstrip(" \t\r\n,，:：!！?？~").strip())
    return None


def _ids(event: Event) -> tuple[str | None, str]:
    group_id = getattr(event, "group_id", None)
    try:
        user_id = event.get_user_id()
    except Exception:
        user_id = ""
    return (str(group_id) if group_id is not None else None), user_id


async def asker_role(bot: Bot, event: Event, group_id: str | None) -> Role:
    """Superuser (SUPERUSERS), else the sender's role in the group, else a plain member."""
    # nonebot's own check, called bare: the SUPERUSER Permission wrapper runs it in an anyio
    # task group, about a tenth of the bot's CPU per message under load
    if await _is_superuser(bot, event):
        return "superuser"
    role = getattr(getattr(event, "sender", None), "role", None) if group_id else None
    return role if role in ("owner", "admin") else "member"


async def _admitted(bot: Bot, event: Event) -> bool:
    """Allow- and deny-lists of groups and users (superusers are always admitted)."""
    group_id, user_id = _ids(event)
    config = plugin_config
    if not admitted(group_id, config.marsho_allowed_groups, config.marsho_denied_groups):
        return False
    if admitted(user_id, config.marsho_allowed_users, config.marsho_denied_users):
        return True
    return await _is_superuser(bot, event)


async def _is_for_marsho(bot: Bot, event: Event, state: T_State) -> bool:
    if event.get_type() != "message" or not await _admitted(bot, event):
        return False
    request = parse_request(
        event.get_plaintext(), plugin_config.trigger_names, set(get_driver().config.command_start)
    )
    if request is None and plugin_config.marsho_at and _ids(event)[0] and event.is_tome():
        request = Request("chat", event.get_plaintext().strip())
    if request is None:
        return False
    state[STATE_KEY] = request
    return True


marsho = on_message(rule=Rule(_is_for_marsho), priority=10, block=True)


async def _send(text: str, images: Sequence[bytes] = ()) -> None:
    # charts and other pictures the tools made go after the text
    message: UniMessage[Text | Image] = UniMessage([Text(text), *(Image(raw=i) for i in images)])
    try:
        await message.send(reply_to=True)
    except Exception as error:  # a failed send is logged; the turn is already stored
        logger.opt(exception=error).error(f"marsho: could not send the reply: {error}")


user_limits = RateLimiter(plugin_config.marsho_user_rate_limit, plugin_config.marsho_rate_window)
group_limits = RateLimiter(plugin_config.marsho_group_rate_limit, plugin_config.marsho_rate_window)


def _rate_limited(user_id: str, group_id: str | None, role: Role) -> float:
    """Seconds to wait before this question is allowed (0: go on, and it is counted)."""
    if role == "superuser":
        return 0.0
    wait = user_limits.wait(user_id)
    if group_id:
        wait = max(wait, group_limits.wait(group_id))
    if wait:
        return wait
    user_limits.take(user_id)
    if group_id:
        group_limits.take(group_id)
    return 0.0


def _speaker(event: Event, user_id: str) -> str:
    sender = getattr(event, "sender", None)
    return str(getattr(sender, "card", None) or getattr(sender, "nickname", None) or user_id)


async def _command(engine: Engine, request: Request, key: str, role: Role, shared: bool) -> str:
    """The reply to a `marsho.<command>`."""
    if request.command == "reset":
        if shared and role == "member":
            return ("This conversation is shared by the whole group: only group admins and "
                    "superusers can reset it.")
        dropped = await engine.reset(key)
        return (f"Done: I forgot this conversation ({dropped} turns)." if dropped
                else "This conversation was already empty.")
    if request.command == "tools":
        return tools_text(engine.toolset, runtime.mcp.status() if runtime.mcp else None)
    if request.command == "calls":
        return calls_text(await engine.last_calls(key))
    if request.command == "history":
        turns, messages, tokens = await engine.history.stats(key)
        return history_text(turns, messages, tokens, engine.max_tokens, engine.counter.name)
    if role != "superuser":
        return f"Only the bot's superusers may use {plugin_config.marsho_name}.{request.command}."
    if request.command == "export":
        return await export_session(engine, key)
    return await switch_model(engine, request.text)


async def export_session(engine: Engine, key: str) -> str:
    """Save the session as JSON in the data folder; the reply says where (and shows it if short)."""
    data = {"session": key, "messages": await engine.history.export(key)}
    text = json.dumps(data, ensure_ascii=False, indent=1)
    folder = localstore.get_plugin_data_dir() / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 10**9:09d}"
    path = folder / f"{re.sub(r'[^A-Za-z0-9_-]+', '_', key)}-{stamp}.json"
    path.write_text(text, encoding="utf-8")
    shown = text if len(text) <= MAX_EXPORT_CHARS else f"({len(text)} characters: too long to show here)"
    return f"{len(data['messages'])} messages exported to {path}\n{shown}"


async def switch_model(engine: Engine, name: str) -> str:
    """Show the model, or switch to another and keep the choice across restarts."""
    if not name:
        return f"The model is {engine.llm.model} (at {engine.llm.base_url})."
    if not re.fullmatch(r"[\w.:/@+-]{1,128}", name):
        return f"{name!r} does not look like a model name."
    await engine.history.set_setting(MODEL_SETTING, name)
    previous, engine.llm.model = engine.llm.model, name
    engine.counter = await load_counter(name)
    return f"Switched from {previous} to {name}; kept across restarts."


@marsho.handle()
async def handle_request(bot: Bot, event: Event, state: T_State) -> None:
    """Answer one request: a command or a question for the model."""
    request: Request = state[STATE_KEY]
    if config_error:
        await _send(f"marsho is not configured correctly: {config_error}. Fix .env and restart the bot.")
        return
    names = plugin_config.trigger_names
    if request.command == "help" or (request.command == "chat" and not request.text):
        await _send(usage_text(names, plugin_config.marsho_at))
        return
    try:
        engine = runtime.require_engine()
    except NotReadyError as error:
        await _send(str(error))
        return
    group_id, user_id = _ids(event)
    scope = plugin_config.marsho_session_scope
    key = session_key(bot.adapter.get_name(), group_id=group_id, user_id=user_id, scope=scope)
    shared = bool(group_id) and scope == "group"
    role = await asker_role(bot, event, group_id)
    try:
        if request.command != "chat":
            await _send(await _command(engine, request, key, role, shared))
            return
        wait = _rate_limited(user_id, group_id, role)
        if wait:
            await _send(f"You are asking a bit fast: try again in {seconds_text(wait)}.")
            return
        context = ToolContext(session_key=key, user_id=user_id, group_id=group_id, role=role,
                              bot=bot, event=event)
        # in a shared conversation the model must know who is speaking
        text = f"{_speaker(event, user_id)}: {request.text}" if shared else request.text
        reply = await engine.chat(key, text, context)
    except EndpointError as error:
        logger.warning(f"marsho: session {key}: {error}")
        await _send(f"Sorry, I could not get an answer: {error}")
        return
    except StoreError as error:
        logger.error(f"marsho: session {key}: {error}")
        if isinstance(error.reply, Reply):  # answered, but not saved: still worth sending
            await _send(f"{reply_text(error.reply, engine.max_tool_rounds)}\n"
                        f"(This exchange could not be saved: {error})")
        else:
            await _send(f"Sorry, my conversation database failed: {error}")
        return
    except MarshoError as error:  # a problem we can name (the token budget...)
        logger.warning(f"marsho: session {key}: {error}")
        await _send(f"Sorry: {error}")
        return
    except Exception as error:
        logger.opt(exception=error).error(f"marsho: session {key}: {request.command} failed")
        await _send(
            f"Sorry, something went wrong inside marsho ({type(error).__name__}: {error}). "
            "Our conversation so far is kept; please try again."
        )
        return
    await _send(reply_text(reply, engine.max_tool_rounds), reply.images)
