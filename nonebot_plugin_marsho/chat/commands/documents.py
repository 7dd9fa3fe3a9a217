"""`marsho.kb` (issue 29): the chat's knowledge base, listed, added to and removed from (chat/kb.py)."""

from __future__ import annotations

from ..kb import kb_command as kb_reply
from .registry import Command, CommandContext, Form


async def kb_command(context: CommandContext) -> str:
    """`marsho.kb [add|remove <number>]` (chat/kb.py): who may add or remove is decided there, by
    the chat (a group's admins; anyone in a private chat, for their own)."""
    return await kb_reply(context)


KB = Command("kb", kb_command, forms=(
    Form("list"),
    Form("add", "add", who="admin", where="groups", refusal="kb.admins"),
    Form("add_own", "add", where="private"),
    Form("remove", "remove <number>", who="admin", where="groups", refusal="kb.remove_admins"),
    Form("remove_own", "remove <number>", where="private"),
))
