"""Marsho is typing: the platform's own indicator shown while the model thinks
(MARSHO_TYPING_INDICATOR), where the platform has one: Telegram's chat action, Discord's typing
indicator, and NapCat's `set_input_status` in private chats (OneBot v11 has no such action of
its own: an implementation without it answers with an error, after which that bot is not asked
again). It shows once the turn has taken SHOW_AFTER seconds (a quick answer needs none, and
costs no call), and, since each lapses after a few seconds, is repeated until the turn ends.
Best effort: a failure is logged (once per bot where the action is missing) and never fails
the turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from nonebot.adapters import Bot, Event
from nonebot.exception import ActionFailed

from ..redaction import logger

SHOW_AFTER = 2.0
"""Seconds a turn takes before the indicator shows: most answers come sooner."""
REPEAT_SECONDS = {"Telegram": 4.0, "Discord": 8.0, "OneBot V11": 8.0}
"""Seconds between two indicators, per adapter: Telegram's chat action lapses at 5 s, Discord's
typing at 10 s; NapCat's input status shows for a few seconds too."""

_without_input_status: set[str] = set()
"""The OneBot bots (by self id) whose implementation has no `set_input_status`."""

Show = Callable[[], Awaitable[object]]


def _indicator(bot: Bot, event: Event, *, private: bool) -> Show | None:
    """How to show that the bot is typing in the chat of `event`, None where it cannot be."""
    platform = bot.adapter.get_name()
    chat = getattr(event, "chat", None)
    if platform == "Telegram" and chat is not None:
        # in a forum topic the action shows in the topic only with its thread
        thread = getattr(event, "message_thread_id", None)
        where = {"message_thread_id": thread} if thread is not None else {}
        return lambda: bot.call_api("send_chat_action", chat_id=chat.id, action="typing", **where)
    channel = getattr(event, "channel_id", None)
    if platform == "Discord" and channel is not None:
        return lambda: bot.call_api("trigger_typing_indicator", channel_id=channel)
    if platform == "OneBot V11" and private and str(bot.self_id) not in _without_input_status:
        user = event.get_user_id()
        return lambda: _input_status(bot, user)
    return None


async def _input_status(bot: Bot, user: str) -> None:
    try:
        await bot.call_api("set_input_status", user_id=int(user), event_type=1)
    except ActionFailed:
        _without_input_status.add(str(bot.self_id))
        logger.info(f"marsho: bot {bot.self_id}'s OneBot implementation has no set_input_status: "
                    "no typing indicator in its private chats")
        raise


async def _repeat(show: Show, every: float) -> None:
    await asyncio.sleep(SHOW_AFTER)
    while True:
        try:
            await show()
        except Exception as error:  # a courtesy: the answer comes all the same
            logger.debug(f"marsho: the typing indicator failed: {error!r}")
            return
        await asyncio.sleep(every)


@asynccontextmanager
async def typing_shown(bot: Bot, event: Event, *, private: bool, on: bool = True) -> AsyncIterator[None]:
    """Show that the bot is typing in the chat of `event` for the block (not at all unless
    `on`, nor where the platform has no indicator)."""
    show = _indicator(bot, event, private=private) if on else None
    if show is None:
        yield
        return
    task = asyncio.ensure_future(_repeat(show, REPEAT_SECONDS[bot.adapter.get_name()]))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
