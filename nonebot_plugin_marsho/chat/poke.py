"""Poking the bot (OneBot v11's poke notice) gets a short in-character line, at most once per
MARSHO_POKE_COOLDOWN seconds per person and chat; pokes in between are ignored quietly."""

from __future__ import annotations

from typing import Any, cast

from nonebot.adapters import Bot, Event
from nonebot.adapters.onebot.v11 import PokeNotifyEvent
from nonebot.typing import T_State
from nonebot_plugin_alconna.uniseg import At, Segment, Text, UniMessage

from ..agent.metering import Asker, charged_to
from ..agent.persona import with_turn_note
from ..exceptions import MarshoError
from ..redaction import logger, redact
from .app import Marsho, current_app
from .bill import limits_of
from .direct import Handler
from .matchers import APP_KEY, admitted_here, is_superuser, marsho, on_notice_event, user_key
from .where import where_of

MAX_POKE_CHARS = 200
"""A poke answer longer than this is cut (the model was asked for one short line)."""


async def _poked_me(bot: Bot, event: Event, state: T_State) -> bool:
    app = state[APP_KEY] = current_app()  # handed to the handler (cheaper than Depends)
    return (
        isinstance(event, PokeNotifyEvent)
        and app.config.marsho_poke != "off"
        and not app.config_error
        and str(event.target_id) == str(bot.self_id)
        and str(event.user_id) != str(bot.self_id)
        and await admitted_here(app, bot, event, await where_of(bot, event, state))
    )


poke = marsho
"""The matcher pokes come to: marsho's one matcher (chat/matchers.py), whose rule asks `_poked_me`
of each notice, and whose handler hands a poke to `handle_poke`."""


async def poke_line(app: Marsho, who: str, *, thrifty: bool = False) -> str:
    """One in-character line from the model (no tools, no history, nothing stored), or the
    fixed line when the model is not asked, not ready, or fails; `thrifty`: the poker or the
    group is over its question rate limit, so the model is not asked."""
    t = app.texts
    fallback = t("poke.fallback", name=app.config.marsho_name)
    if app.config.marsho_poke != "model" or not app.ready or thrifty:
        return fallback
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": app.prompt.system()},
        {"role": "user", "content": with_turn_note(t("poke.prompt", who=who), app.prompt.note())},
    ]
    try:
        completion = await app.require_engine().llm.complete(messages, None)
    except MarshoError as error:
        logger.warning(f"marsho: poke answered with the fixed line: {error}")
        return fallback
    line = completion.content.strip()
    if len(line) > MAX_POKE_CHARS:
        line = line[:MAX_POKE_CHARS].rstrip() + "…"
    return line or fallback


async def handle_poke(bot: Bot, event: PokeNotifyEvent, state: T_State) -> None:
    app: Marsho = state[APP_KEY]
    user = str(event.user_id)
    # keyed by bot too: two bot accounts in one group each answer their own pokes
    chat = f"{bot.self_id}:group:{event.group_id}" if event.group_id else f"{bot.self_id}:private:{user}"
    if not app.poke_cooldown.ready(chat, user):
        return
    # a poke the model answers costs like a question: it counts against the rate limits (the
    # same check, superusers exempt), and one over them gets the fixed line, so poking is no way
    # around the limits' cost
    where = await where_of(bot, event, state)  # the same rate-limit keys as a question's
    over = False
    if app.config.marsho_poke == "model":
        superuser = await is_superuser(bot, event)
        over = app.fair_use.charge(where.person, where.chat, superuser=superuser) > 0
        if not over and not superuser and app.ready:  # a used-up quota: the fixed line
            try:
                quota = await app.meter.over_quota(where.person, where.chat or "", limits_of(app.config))
                over = quota is not None
            except MarshoError as error:
                logger.warning(f"marsho: poke: {error}")
    try:
        nickname = await app.nicknames.get(user_key(bot, user)) if app.ready else None
    except MarshoError as error:  # the database is down: poke back all the same
        logger.warning(f"marsho: poke: {error}")
        nickname = None
    with charged_to(Asker("", where.person, where.chat or "", question=False)):
        line = await poke_line(app, nickname or app.texts("poke.someone"), thrifty=over)
    line = redact(line)
    segments: list[Segment] = [At("user", user), Text(" " + line)] if event.group_id else [Text(line)]
    try:
        await UniMessage(segments).send()
    except Exception as error:
        logger.opt(exception=error).error(f"marsho: could not answer a poke: {error}")


# the rule takes PokeNotifyEvents only: the handler is handed nothing else
on_notice_event(_poked_me, cast("Handler", handle_poke))
