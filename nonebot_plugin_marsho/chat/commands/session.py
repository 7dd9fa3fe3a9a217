"""Commands about the asker's conversation: reset, calls, history, export."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ...agent.engine import Engine
from ...redaction import redact
from ...tools.model import ToolContext
from ..app import Marsho
from ..render import calls_text, history_text
from .registry import Command, CommandContext

MAX_EXPORT_CHARS = 3000


async def reset_command(context: CommandContext) -> str:
    """`marsho.reset`: forget the conversation (a group's shared one: its admins only)."""
    t = context.t
    if context.shared and context.role == "member":
        return t("reset.shared")
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
    """`marsho.export` (superusers)."""
    return await export_session(context.app, context.engine, context.key)


async def export_session(app: Marsho, engine: Engine, key: str) -> str:
    """Save the session as JSON in the data folder; the reply says where (and shows it if short)."""
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
    t = app.texts
    shown = text if len(text) <= MAX_EXPORT_CHARS else t("export.too_long", chars=len(text))
    return t("export.done", count=len(data["messages"]), path=path, shown=shown)


RESET = Command("reset", reset_command)
CALLS = Command("calls", calls_command)
HISTORY = Command("history", history_command)
EXPORT = Command("export", export_command, who="superuser")
