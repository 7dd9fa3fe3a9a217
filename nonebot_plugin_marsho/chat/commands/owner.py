"""The owner's commands (superusers): the model, the endpoints' status."""

from __future__ import annotations

import re

from ...agent.engine import Engine
from ..app import Marsho
from ..render import error_text, status_text
from .registry import Command, CommandContext


async def switch_model(app: Marsho, engine: Engine, name: str) -> str:
    """Show the model, or switch to another and keep the choice across restarts."""
    t = app.texts
    if not name:
        return t("model.show", model=engine.llm.model, url=engine.llm.base_url)
    if not re.fullmatch(r"[\w.:/@+-]{1,128}", name):
        return t("model.bad_name", name=name)
    previous = await engine.switch_model(name)
    engine.llm.model_setting = f"{app.config.marsho_name}.model"  # what the owner changes it with now
    return t("model.switched", previous=previous, model=name)


async def model_command(context: CommandContext) -> str:
    """`marsho.model [name]`."""
    return await switch_model(context.app, context.engine, context.text)


async def status_command(context: CommandContext) -> str:
    """`marsho.status`: each endpoint and key, why an endpoint is failing when only the owner
    can end it (a key refused, no key set), and the summaries' model."""
    engine, t = context.engine, context.t
    summaries = engine.summarizer.status() if engine.summarizer else None
    endpoints = engine.llm.status()
    lines = status_text(t, endpoints).splitlines()
    for number, endpoint in enumerate(endpoints):
        if endpoint.problem is not None:
            name = t("status.primary") if number == 0 else t("status.fallback", number=number)
            lines.append(t("status.failing", name=name, reason=error_text(t, endpoint.problem)))
    if summaries is not None:  # its lines, after the title status_text starts with
        lines += status_text(t, [], summaries).splitlines()[1:]
    return "\n".join(lines)


MODEL = Command("model", model_command, who="superuser")
STATUS = Command("status", status_command, who="superuser")
