"""The owner's commands: the model, the endpoints' status."""

from __future__ import annotations

import re

from ...agent.engine import Engine
from ..app import Marsho


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
