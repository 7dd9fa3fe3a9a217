"""Commands about the group they are sent in: its recent chat (context, forget), its persona,
its active replies. Anyone in the group may look; its admins, owners and superusers change."""

from __future__ import annotations

from ...agent.persona import GROUP_PERSONA_CHARS, PersonaError, check_persona
from ..active import ActiveReplies, parse_keywords
from ..fairuse import seconds_text
from ..observe import group_key
from ..render import error_text
from .registry import Command, CommandContext, Form
from .words import KEYWORD_WORDS, OFF_WORDS, ON_WORDS, RESET_WORDS


async def persona_command(context: CommandContext) -> str:
    """`marsho.persona`: show the group's persona; admins set it, or (`reset`) remove it."""
    app, t, text = context.app, context.t, context.text.strip()
    personas, group = app.personas, group_key(context.where)
    if not app.config.marsho_group_persona:
        return t("persona.disabled")
    if not text:
        persona = await personas.get(group)
        return t("persona.show", persona=persona) if persona else t("persona.unset", name=context.name)
    resets = text.casefold() in RESET_WORDS
    refused = PERSONA.refused(context, "reset" if resets else "set")
    if refused is not None:
        return refused
    if resets:
        await personas.set(group, None)
        return t("persona.cleared")
    try:
        persona = check_persona(text, GROUP_PERSONA_CHARS)
    except PersonaError as error:
        return error_text(t, error)
    await personas.set(group, persona)
    return t("persona.set", persona=persona)


async def forget_command(context: CommandContext) -> str:
    """`marsho.forget`: admins empty the group's recent chat."""
    t, log = context.t, context.app.chat_log
    refused = FORGET.refused(context, "forget")
    if refused is not None:
        return refused
    forgotten = await log.forget(group_key(context.where))
    return t("forget.done", messages_text=t.plural("count.messages", forgotten))


async def context_command(context: CommandContext) -> str:
    """`marsho.context`: whether the group's recent chat goes to the model (admins: `on`, `off`,
    which also forgets it)."""
    t, log, name, text = context.t, context.app.chat_log, context.name, context.text.strip()
    group = group_key(context.where)
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
    refused = CONTEXT.refused(context, "on" if word in ON_WORDS else "off")
    if refused is not None:
        return refused
    if word in ON_WORDS:
        await log.set_on(group, True)
        return t("context.on", count=count, ttl=ttl, name=name)
    await log.set_on(group, False)
    return t("context.off")


async def active_command(context: CommandContext) -> str:
    """`marsho.active`: the group's active replies; admins set the chance (0..1), `off`, or
    `keywords word ...` (`keywords off`)."""
    t, active, text = context.t, context.app.active, context.text.strip()
    group = group_key(context.where)
    if active.ceiling <= 0 or active.per_hour <= 0:
        return t("active.disabled")
    if not text:
        return _active_shown(context, active, group)
    first, _, words = text.partition(" ")
    if first.casefold() in KEYWORD_WORDS:
        return await _active_keywords(context, active, group, words.strip())
    word = text.casefold()
    if word in OFF_WORDS and word != "0":
        refused = ACTIVE.refused(context, "off")
        if refused is not None:
            return refused
        await active.choose(group, off=True)
        return t("active.off")
    return await _active_chance(context, active, group, word)


def _active_shown(context: CommandContext, active: ActiveReplies, group: str) -> str:
    """`marsho.active` alone: the group's chance and keywords, and whose choice they are."""
    t, name = context.t, context.name
    settings = active.settings(group)
    source = t("context.source_default") if active.choice(group) is None else t("context.source_group")
    if settings.chance is None and not settings.keywords:
        return t("active.show_off", source=source, name=name)
    keywords = ", ".join(settings.keywords) or t("active.no_keywords")
    judged = t("active.judged") if context.app.judge is not None else ""
    return t("active.show_on", source=source, chance=f"{settings.chance or 0:g}", keywords=keywords,
             judged=judged, cooldown=seconds_text(t, active.cooldown), per_hour=active.per_hour)


async def _active_keywords(context: CommandContext, active: ActiveReplies, group: str, words: str) -> str:
    """`marsho.active keywords word ...` (`keywords off`): admins set the group's keywords."""
    t = context.t
    if not words:
        return t("active.bad_value", name=context.name)
    off = words.casefold() in OFF_WORDS + RESET_WORDS
    refused = ACTIVE.refused(context, "keywords_off" if off else "keywords")
    if refused is not None:
        return refused
    if off:
        await active.choose(group, keywords=())
        return t("active.keywords_off")
    chosen = parse_keywords(words)
    await active.choose(group, keywords=chosen)
    return t("active.keywords_set", keywords=", ".join(chosen))


async def _active_chance(context: CommandContext, active: ActiveReplies, group: str, word: str) -> str:
    """`marsho.active 0.3`: admins set the group's chance, up to MARSHO_ACTIVE_MAX."""
    t = context.t
    chance = _chance(word)
    if chance is None:
        return t("active.bad_value", name=context.name)
    refused = ACTIVE.refused(context, "chance")
    if refused is not None:
        return refused
    if chance > active.ceiling:
        return t("active.over_max", max=f"{active.ceiling:g}")
    await active.choose(group, chance=chance)
    return t("active.on", chance=f"{chance:g}", name=context.name)


def _chance(word: str) -> float | None:
    """A chance as typed, 0..1; None for anything else (NaN too)."""
    try:
        chance = float(word)
    except ValueError:
        return None
    return chance if 0 <= chance <= 1 else None


CONTEXT = Command("context", context_command, where="groups", forms=(
    Form("show"), Form("on", "on", who="admin", refusal="context.admins"),
    Form("off", "off", who="admin", refusal="context.admins")))
FORGET = Command("forget", forget_command, where="groups", forms=(
    Form("forget", who="admin", refusal="forget.admins"),))
PERSONA = Command("persona", persona_command, where="groups", forms=(
    Form("show"), Form("set", "<text>", who="admin", refusal="persona.admins"),
    Form("reset", "reset", who="admin", refusal="persona.admins")))
ACTIVE = Command("active", active_command, where="groups", forms=(
    Form("show"), Form("chance", "<0..1>", who="admin", refusal="active.admins"),
    Form("off", "off", who="admin", refusal="active.admins"),
    Form("keywords", "keywords <word> ...", who="admin", refusal="active.admins"),
    Form("keywords_off", "keywords off", who="admin", refusal="active.admins")))
