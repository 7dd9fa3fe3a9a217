"""The files shared with a question (issue 29): the quoted message's and the question's own,
downloaded (chat/shared_files.py) and read (agent/documents, off the event loop, within
MARSHO_FILE_MAX_BYTES, MARSHO_FILE_MAX_PAGES and MARSHO_FILE_TIMEOUT), for the turn to send
beside the question (agent/asked_files.py says what is sent and what is kept).

Every file that cannot be read becomes a tip naming it and what was wrong (too big, with the
limit; corrupt; a scanned PDF without text; a format not read; the download failed); the
question is answered all the same when it holds words.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nonebot.adapters import Bot

from ..agent.asked_files import CHARS_PER_TOKEN, FILE_SHARE, MAX_FILES, file_name, files_note, stored_line
from ..agent.documents import DocumentError, Extracted, Limits, extract
from ..agent.engine import Engine
from ..agent.turn import Content
from ..i18n import Texts
from ..redaction import logger
from .app import Marsho
from .shared_files import SharedFile, download, refusal_text
from .where import Where


async def read_files(app: Marsho, bot: Bot, where: Where, files: Sequence[SharedFile], t: Texts, *,
                     room: int) -> tuple[list[Extracted], list[str], list[str]]:
    """(the files that were read, in order; the names of those that were not; a tip for each of
    them, and one for the files past MAX_FILES). Each is read no further than `room` tokens can
    hold (a 500-page PDF whose first pages fill the room is not read to its end)."""
    tips: list[str] = []
    if len(files) > MAX_FILES:
        tips.append(t("file.too_many", files_text=t.plural("count.files", MAX_FILES)))
    kept = files[:MAX_FILES]
    max_chars = max(1, room) * CHARS_PER_TOKEN
    results = await asyncio.gather(*(_read(app, bot, where, shared, t, max_chars) for shared in kept))
    read = [result for result in results if isinstance(result, Extracted)]
    unread = [shared.name for shared, result in zip(kept, results, strict=True) if isinstance(result, str)]
    return read, unread, [result for result in results if isinstance(result, str)] + tips


async def _read(app: Marsho, bot: Bot, where: Where, shared: SharedFile, t: Texts,
                max_chars: int) -> Extracted | str:
    """The file's text (its first `max_chars` characters), or why it could not be read."""
    config = app.config
    data = await download(app, bot, where, shared, t, purpose="file")
    if isinstance(data, str):
        return data
    limits = Limits(max_bytes=config.marsho_file_max_bytes, max_pages=config.marsho_file_max_pages,
                    max_chars=max_chars)
    try:
        return await extract(data, shared.name, limits=limits, timeout=config.marsho_file_timeout)
    except DocumentError as error:
        logger.info(f"marsho: a file shared with a question was not read: {error}")
        return refusal_text(t, shared.name, error, purpose="file")


def files_room(engine: Engine) -> int:
    """Tokens the files of one question may take: FILE_SHARE of the budget."""
    return int(engine.max_tokens * FILE_SHARE)


def for_turn(engine: Engine, content: Content, read: Sequence[Extracted], t: Texts, *, asked: bool,
             unread: Sequence[str] = ()) -> tuple[Content, str]:
    """(the question as stored: its content, then a line naming each file read for it, and each
    shared but not read (so the model knows of it too), and for a question of no words (`asked`
    False) a line asking what they are; the files' text for this turn's requests,
    TurnFacts.files)."""
    if not read and not unread:
        return content, ""
    lines = [stored_line(t, extracted) for extracted in read]
    lines += [t("file.not_read", file=file_name(name)) for name in unread]
    if not asked and read:
        lines.append(t("file.what_is_this"))
    added = "\n".join(lines)
    if isinstance(content, str):
        content = f"{content}\n{added}" if content else added
    else:
        content = [*content, {"type": "text", "text": added}]
    return content, files_note(read, t, engine.counter, files_room(engine))
