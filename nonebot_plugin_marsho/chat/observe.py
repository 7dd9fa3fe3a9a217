"""Watching a group's chat: the messages nobody addressed to marsho, kept (agent/chatlog.py) in
the groups whose admins chose it, and what a group's key is.

`observe` runs for every message that is not for marsho, so it returns before reading anything
of the message before the bot is ready or when no group shares its chat, and before converting
it (alconna) or touching the database when this group does not. It says whether it kept the
message, so something that answers on its own later (issue 17's "active replies") can decide on
the same message, and read the group's recent chat through the same ChatLog.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from nonebot.adapters import Bot, Event
from nonebot.typing import T_State
from nonebot_plugin_alconna.uniseg import UniMessage

from ..agent.chatlog import Observed
from ..agent.persona import tagged_speaker
from ..i18n import Texts
from ..redaction import logger
from ..store.session import session_key
from .app import Marsho
from .native import own_content
from .where import Where, where_of

SPEAKER_COLUMN = 64
"""The length of marsho_observed.speaker."""


def group_key(where: Where) -> str:
    """The key of the group (or guild channel) a message was said in: its settings and recent
    chat are the group's, whatever MARSHO_SESSION_SCOPE."""
    return session_key(where.platform, group_id=where.group_id, user_id=where.user_id,
                       channel=where.kind == "channel")


def _is_picture(segment: object) -> bool:
    return getattr(segment, "type", None) == "image"


def message_text(bot: Bot, event: Event, t: Texts) -> str:
    """The message as the recent chat keeps it: its text, then a `[picture]` per picture."""
    placeholder = t("image.placeholder")
    if bot.adapter.get_name() == "OneBot V11":  # its plain text already leaves out @s and pictures
        text = event.get_plaintext()
        pictures = sum(1 for segment in event.get_message() if _is_picture(segment))
    else:
        try:
            content = own_content(bot, event, UniMessage.of(event.get_message(), bot=bot))
        except Exception as error:  # an adapter alconna cannot read: its plain text
            logger.debug(f"marsho: could not read an observed message: {error}")
            return event.get_plaintext().strip()
        text, pictures = content.text, len(content.images)
    return " ".join([text.strip(), *[placeholder] * pictures]).strip()


async def observe(
    app: Marsho, bot: Bot, event: Event, state: T_State, reserved: Iterable[str]
) -> bool:
    """Keep a group message that is not for marsho, if its group shares its recent chat; whether
    it was kept. Never the bot's own messages, those addressed to it (an @ of the bot,
    a reply to it) or private chats. `reserved`: the names nobody may speak as."""
    if not app.ready:  # nothing kept before the bot is ready (nor read of the message)
        return False
    log = app.chat_log
    if not log.on_anywhere() or event.get_type() != "message":
        return False
    try:
        if event.is_tome():
            return False
    except Exception:
        return False
    where = await where_of(bot, event, state)
    if not where.shared or where.user_id == str(bot.self_id):
        return False
    key = group_key(where)
    if not log.is_on(key) or not app.fair_use.admits(where.names or None, where.user_id, superuser=False):
        return False
    text = message_text(bot, event, app.texts)
    if not text:
        return False
    at, nicknames, names = time.time(), app.nicknames, list(reserved)

    async def made() -> Observed:
        # labelled as their questions are: the nickname they chose, else their name here (read
        # when written, so that nothing is awaited before the message has its place)
        nickname = await nicknames.get(f"{where.platform}:{where.user_id}")
        name = nickname or where.name or where.user_id
        # (cut to the column, the name and not the short id: a reserved name with a long id,
        # Feishu's open_id, runs past it)
        label = tagged_speaker(name, where.platform, where.user_id, names, limit=SPEAKER_COLUMN)
        return Observed(label, text, at)

    log.observe(key, made)
    return True
