"""`marsho.resume`: a superuser lifts a chat's pause for too many answers (chat/loops.py)."""

from __future__ import annotations

from ..loops import chat_of, guard_of
from .registry import Command, CommandContext, Form


async def resume_command(context: CommandContext) -> str:
    """Answer again in this chat at once, and take nobody here for a bot any more."""
    guard, chat = guard_of(context.app), chat_of(context.where)
    paused = guard.breaker.resume(chat)
    guard.detector.forget(chat)
    return context.t("loops.resumed") if paused else context.t("loops.not_paused")


RESUME = Command("resume", resume_command, who="superuser", needs_model=False, forms=(
    Form("resume", who="superuser"),))
