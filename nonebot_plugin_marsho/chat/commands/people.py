"""Commands about the asker: what marsho calls them (nickname), what it remembers (memory)."""

from __future__ import annotations

from ...agent.persona import NicknameError, check_nickname
from ..memory import memory_command as memory_reply
from ..render import error_text
from .registry import Command, CommandContext, Form
from .words import RESET_WORDS


async def nickname_command(context: CommandContext) -> str:
    """`marsho.nickname`: show, set, or (`reset`) forget the asker's nickname (one per person per
    platform, in every group and private chat)."""
    nicknames, t, config, text = context.app.nicknames, context.t, context.app.config, context.text
    name, key = config.marsho_name, context.where.person
    if not text:
        current = await nicknames.get(key)
        return t("nickname.show", nickname=current, name=name) if current else t("nickname.unset", name=name)
    if text.casefold() in RESET_WORDS:
        await nicknames.set(key, None)
        return t("nickname.cleared")
    try:
        nickname = check_nickname(text, config.marsho_nickname_limit, context.reserved)
    except NicknameError as error:
        return error_text(t, error)
    await nicknames.set(key, nickname)
    return t("nickname.set", nickname=nickname)


async def memory_command(context: CommandContext) -> str:
    """`marsho.memory ...` (chat/memory.py)."""
    return await memory_reply(context.app, context.where, context.role, context.text)


NICKNAME = Command("nickname", nickname_command, forms=(
    Form("show"), Form("set", "<nickname>"), Form("reset", "reset")))
# who may is checked in chat/memory.py; tests/test_command_registry.py holds it to these forms
MEMORY = Command("memory", memory_command, forms=(
    Form("mine"), Form("forget", "forget <number>|all"),
    Form("group", "group", where="groups"),
    Form("group_forget", "group forget <number>|all", who="admin", where="groups", refusal="memory.admins"),
    Form("of", "of <user id> [forget <number>|all]", who="superuser", refusal="memory.superusers_only"),
    Form("other_group", "group <group id> [forget <number>|all]", who="superuser",
         refusal="memory.superusers_only")))
