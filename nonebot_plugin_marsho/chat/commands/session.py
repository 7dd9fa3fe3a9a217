"""Commands about the asker's conversation: reset, calls, history, export."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from nonebot_plugin_alconna.uniseg import Target, UniMessage

from ...agent.engine import Engine
from ...exceptions import MarshoError
from ...redaction import logger, redact
from ...store.session import session_key
from ...tools.model import ToolContext
from ..app import Marsho
from ..render import calls_text, history_text
from .registry import Command, CommandContext, Form

MAX_EXPORT_CHARS = 3000


async def reset_command(context: CommandContext) -> str:
    """`marsho.reset`: forget the conversation (a group's shared one: its admins only)."""
    t = context.t
    refused = RESET.refused(context, "shared" if context.shared else "own")
    if refused is not None:
        return refused
    dropped = await context.engine.reset(context.key)
    return t("reset.done", turns_text=t.plural("count.turns", dropped)) if dropped else t("reset.empty")


async def calls_command(context: CommandContext) -> str:
    """`marsho.calls`: the tool calls of the last answer, those the asker may see in full."""
    engine, key = context.engine, context.key
    asker = ToolContext(session_key=key, role=context.role)
    return calls_text(context.t, await engine.last_calls(key, asker), context.app.config.marsho_calls_chars)


async def history_command(context: CommandContext) -> str:
    """`marsho.history`: how much of the conversation is kept, and its summary."""
    engine, key = context.engine, context.key
    turns, messages, tokens = await engine.history.stats(key)
    return history_text(context.t, turns, messages, tokens, engine.max_tokens, engine.counter.name,
                        await engine.summary(key))


async def export_command(context: CommandContext) -> str:
    """`marsho.export` (superusers): in a private chat, where the file is and what it holds; in
    a group or channel only that it was saved, since the conversation (superuser-only tool
    results included) and the server's path are no business of its members: the path goes to
    the superuser privately where the platform allows, else to the log."""
    app, t = context.app, context.t
    count, path, text = await save_export(app, context.engine, context.key)
    if not context.where.shared:
        shown = text if len(text) <= MAX_EXPORT_CHARS else t("export.too_long", chars=len(text))
        return t("export.done", count=count, path=path, shown=shown)
    told = await _tell_privately(context, t("export.saved_path", count=count, path=path,
                                            key=context.key))
    if not told:
        logger.info(f"marsho: {count} messages of {context.key} exported to {path}")
    return t("export.saved_group", count=count,
             where=t("export.told_privately") if told else t("export.in_log"))


async def save_export(app: Marsho, engine: Engine, key: str) -> tuple[int, Path, str]:
    """Save the session as JSON (redacted) in the data folder: its messages, where, the text."""
    data: dict[str, Any] = {"session": key, "messages": await engine.history.export(key)}
    summary = await engine.summary(key)
    if summary is not None:
        data["summary"] = {"text": summary.text, "turns": summary.turns, "through_turn": summary.through_turn,
                           "time": summary.updated_at}
    text = redact(json.dumps(data, ensure_ascii=False, indent=1))
    folder = app.data_dir / "exports"
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 10**9:09d}"
    path = folder / f"{re.sub(r'[^A-Za-z0-9_-]+', '_', key)}-{stamp}.json"
    path.write_text(text, encoding="utf-8")
    return len(data["messages"]), path, text


async def _tell_privately(context: CommandContext, text: str) -> bool:
    """Say `text` to the asker in private: through their private chat's saved target when marsho
    has answered them there (what platforms that only answer need), else to their user id
    through this bot; False when the platform refused or nothing could reach them."""
    where, bot = context.where, context.bot
    private = session_key(where.platform, group_id=None, user_id=where.user_id)
    targets = context.services.targets if context.services is not None else None
    try:
        if targets is not None and await targets.target(private) is not None:
            await targets.send_to(private, text)
            return True
    except MarshoError as error:  # SendError, StoreError: try the user id
        logger.debug(f"marsho: the saved target of {private} did not take the export's path: {error}")
    to = Target(where.user_id, private=True, self_id=str(bot.self_id), adapter=bot.adapter.get_name())
    try:
        await UniMessage(text).send(target=to, bot=bot)
    except Exception as error:  # the platform cannot, or will not, start a private chat
        logger.debug(f"marsho: cannot tell {where.user_id} privately where the export is: "
                     f"{type(error).__name__}: {error}")
        return False
    return True


RESET = Command("reset", reset_command, forms=(
    Form("own"), Form("shared", who="admin", where="groups", refusal="reset.shared")))
CALLS = Command("calls", calls_command, forms=(Form("last"),))
HISTORY = Command("history", history_command, forms=(Form("show"),))
EXPORT = Command("export", export_command, who="superuser", forms=(Form("save", who="superuser"),))
