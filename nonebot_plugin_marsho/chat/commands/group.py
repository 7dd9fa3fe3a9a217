"""Commands about the group they are sent in: its recent chat (context, forget), its persona,
its active replies."""

from __future__ import annotations

from ...agent.persona import GROUP_PERSONA_CHARS, PersonaError, check_persona
from ..active import parse_keywords
from ..app import Marsho
from ..fairuse import seconds_text
from ..render import error_text
from .words import KEYWORD_WORDS, OFF_WORDS, ON_WORDS, RESET_WORDS


async def persona_command(app: Marsho, group: str, admin: bool, text: str) -> str:
    """`marsho.persona`: show the group's persona; admins set it, or (`reset`) remove it."""
    t, personas, name = app.texts, app.personas, app.config.marsho_name
    assert personas is not None
    if not app.config.marsho_group_persona:
        return t("persona.disabled")
    if not text:
        persona = await personas.get(group)
        return t("persona.show", persona=persona) if persona else t("persona.unset", name=name)
    if not admin:
        return t("persona.admins")
    if text.casefold() in RESET_WORDS:
        await personas.set(group, None)
        return t("persona.cleared")
    try:
        persona = check_persona(text, GROUP_PERSONA_CHARS)
    except PersonaError as error:
        return error_text(t, error)
    await personas.set(group, persona)
    return t("persona.set", persona=persona)



async def context_command(app: Marsho, command: str, group: str, admin: bool, text: str) -> str:
    """`marsho.context`: whether the group's recent chat goes to the model (admins: `on`, `off`,
    which also forgets it); `marsho.forget`: admins empty it."""
    t, log, name = app.texts, app.chat_log, app.config.marsho_name
    assert log is not None
    if command == "forget":
        if not admin:
            return t("forget.admins")
        return t("forget.done", messages_text=t.plural("count.messages", await log.forget(group)))
    count, ttl = log.size, seconds_text(t, log.ttl)
    if count == 0:
        return t("context.disabled")
    if not text:
        source = t("context.source_default") if log.choice(group) is None else t("context.source_group")
        if log.is_on(group):
            kept = t.plural("count.messages", await log.kept(group))
            return t("context.show_on", source=source, count=count, ttl=ttl, kept_text=kept)
        return t("context.show_off", source=source)
    word = text.casefold()
    if word not in ON_WORDS + OFF_WORDS:
        return t("context.bad_value", name=name)
    if not admin:
        return t("context.admins")
    if word in ON_WORDS:
        await log.set_on(group, True)
        return t("context.on", count=count, ttl=ttl, name=name)
    await log.set_on(group, False)
    return t("context.off")


async def active_command(app: Marsho, group: str, admin: bool, text: str) -> str:
    """`marsho.active`: the group's active replies; admins set the chance (0..1), `off`, or
    `keywords word ...` (`keywords off`)."""
    t, active, name = app.texts, app.active, app.config.marsho_name
    if active.ceiling <= 0 or active.per_hour <= 0:
        return t("active.disabled")
    if not text:
        settings = active.settings(group)
        source = t("context.source_default") if active.choice(group) is None else t("context.source_group")
        if settings.chance is None and not settings.keywords:
            return t("active.show_off", source=source, name=name)
        keywords = ", ".join(settings.keywords) or t("active.no_keywords")
        judged = t("active.judged") if app.judge is not None else ""
        return t("active.show_on", source=source, chance=f"{settings.chance or 0:g}", keywords=keywords,
                 judged=judged, cooldown=seconds_text(t, active.cooldown), per_hour=active.per_hour)
    first, _, words = text.partition(" ")
    if first.casefold() in KEYWORD_WORDS:
        rest = words.strip()
        if not rest:
            return t("active.bad_value", name=name)
        if not admin:
            return t("active.admins")
        if rest.casefold() in OFF_WORDS + RESET_WORDS:
            await active.choose(group, keywords=())
            return t("active.keywords_off")
        chosen = parse_keywords(rest)
        await active.choose(group, keywords=chosen)
        return t("active.keywords_set", keywords=", ".join(chosen))
    word = text.casefold()
    if word in OFF_WORDS and word != "0":
        if not admin:
            return t("active.admins")
        await active.choose(group, off=True)
        return t("active.off")
    try:
        chance = float(word)
    except ValueError:
        return t("active.bad_value", name=name)
    if not 0 <= chance <= 1:  # also NaN
        return t("active.bad_value", name=name)
    if not admin:
        return t("active.admins")
    if chance > active.ceiling:
        return t("active.over_max", max=f"{active.ceiling:g}")
    await active.choose(group, chance=chance)
    return t("active.on", chance=f"{chance:g}", name=name)
