"""Speakers as the model reads them in tests: a name and the short id of their account
(agent/framing.py's `short_id`), `Alice#8148`."""

from __future__ import annotations

from nonebot_plugin_marsho.agent.framing import short_id

ONEBOT = "OneBot V11"


def tag(user_id: object, platform: str = ONEBOT) -> str:
    """`#8148`: the short id of `user_id` on `platform`."""
    return "#" + short_id(platform, str(user_id))


def label(name: str, user_id: object, platform: str = ONEBOT) -> str:
    """`Alice#8148`: a speaker's label, as a shared conversation starts their message with."""
    return name + tag(user_id, platform)
