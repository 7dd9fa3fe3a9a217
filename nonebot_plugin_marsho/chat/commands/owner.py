"""The owner's commands (superusers): the model, the endpoints' status."""

from __future__ import annotations

import re

from ...agent.engine import Engine
from ..app import Marsho
from ..render import status_text
from .registry import Command, CommandContext, Form


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
    """`marsho.status`: each endpoint and key, why and until when one rests or is skipped, why
    one is failing when only the owner can end it (a key refused, no key set), and the
    summaries' model."""
    engine = context.engine
    summaries = engine.summarizer.status() if engine.summarizer else None
    return status_text(context.t, engine.llm.status(), summaries)


MODEL = Command("model", model_command, who="superuser", forms=(
    Form("show", who="superuser"), Form("switch", "<model>", who="superuser")))
STATUS = Command("status", status_command, who="superuser", forms=(Form("show", who="superuser"),))
