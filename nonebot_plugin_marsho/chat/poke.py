"""Poking the bot (OneBot v11's poke notice) gets a short in-character line, at most once per
MARSHO_POKE_COOLDOWN seconds per person and chat; pokes in between are ignored quietly."""

from __future__ import annotations

import time

from nonebot import on_notice
from nonebot.adapters import Bot, Event
from nonebot.adapters.onebot.v11 import PokeNotifyEvent
from nonebot.log import logger
from nonebot.rule import Rule
from nonebot_plugin_alconna.uniseg import At, Segment, Text, UniMessage

from ..config import config_error, plugin_config
from ..exceptions import MarshoError
from ..i18n import t
from . import matchers
from .matchers import admitted_here, runtime, user_key

MAX_POKE_CHARS = 200
"""A poke answer longer than this is cut (the model was asked for one short line)."""


class Cooldown:
    """When each (chat, person) may be answered again."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next: dict[tuple[str, str], float] = {}

    def clear(self) -> None:
        """Forget every cooldown."""
        self._next.clear()

    def ready(self, chat: str, user: str) -> bool:
        """True (and the cooldown starts) if this person's poke in this chat may be answered."""
        now = time.monotonic()
        if len(self._next) > 10_000:  # forget the ones long over
            self._next = {k: v for k, v in self._next.items() if v > now}
        if self._next.get((chat, user), 0.0) > now:
            return False
        self._next[(chat, user)] = now + self.seconds
        return True


cooldown = Cooldown(plugin_config.marsho_poke_cooldown)


async def _poked_me(bot: Bot, event: Event) -> bool:
    return (
        isinstance(event, PokeNotifyEvent)
        and plugin_config.marsho_poke != "off"
        and not config_error
        and str(event.target_id) == str(bot.self_id)
        and str(event.user_id) != str(bot.self_id)
        and await admitted_here(bot, event)
    )


poke = on_notice(rule=Rule(_poked_me), priority=10, block=True)


async def poke_line(who: str, *, thrifty: bool = False) -> str:
    """One in-character line from the model (no tools, no history, nothing stored), or the
    fixed line when the model is not asked, not ready, or fails; `thrifty`: the poker or the
    group is over its question rate limit, so the model is not asked."""
    fallback = t("poke.fallback", name=plugin_config.marsho_name)
    engine = runtime.engine
    if plugin_config.marsho_poke != "model" or engine is None or thrifty:
        return fallback
    messages = [
        {"role": "system", "content": runtime.system_prompt(nickname=None, shared=False)},
        {"role": "user", "content": t("poke.prompt", who=who)},
    ]
    try:
        completion = await engine.llm.complete(messages, None)
    except MarshoError as error:
        logger.warning(f"marsho: poke answered with the fixed line: {error}")
        return fallback
    line = completion.content.strip()
    if len(line) > MAX_POKE_CHARS:
        line = line[:MAX_POKE_CHARS].rstrip() + "…"
    return line or fallback


@poke.handle()
async def handle_poke(bot: Bot, event: PokeNotifyEvent) -> None:
    user = str(event.user_id)
    # keyed by bot too: two bot accounts in one group each answer their own pokes
    chat = f"{bot.self_id}:group:{event.group_id}" if event.group_id else f"{bot.self_id}:private:{user}"
    if not cooldown.ready(chat, user):
        return
    # a poke the model answers costs like a question: it counts against the rate limits, and
    # one over them gets the fixed line, so poking is no way around the limits' cost
    group = str(event.group_id) if event.group_id else None
    over = matchers.user_limits.wait(user) > 0 or bool(group and matchers.group_limits.wait(group))
    if not over and plugin_config.marsho_poke == "model":
        matchers.user_limits.take(user)
        if group:
            matchers.group_limits.take(group)
    try:
        nickname = await runtime.nicknames.get(user_key(bot, user)) if runtime.nicknames else None
    except MarshoError as error:  # the database is down: poke back all the same
        logger.warning(f"marsho: poke: {error}")
        nickname = None
    line = await poke_line(nickname or t("poke.someone"), thrifty=over)
    segments: list[Segment] = [At("user", user), Text(" " + line)] if event.group_id else [Text(line)]
    try:
        await UniMessage(segments).send()
    except Exception as error:
        logger.opt(exception=error).error(f"marsho: could not answer a poke: {error}")
