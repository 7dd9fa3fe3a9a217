"""Commands about the asker's conversation: reset, calls, history, export."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ...agent.engine import Engine
from ...redaction import redact
from ..app import Marsho

MAX_EXPORT_CHARS = 3000


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
