"""A question to the model from a chat message: the turn's facts gathered from the event, then
asked, and the recent chat it carried marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nonebot.adapters import Bot, Event

from ..agent.chatlog import Unread, recent_chat_text, with_recent_chat
from ..agent.engine import Engine, Reply
from ..store.session import session_key
from ..tools.model import Role, ToolContext
from .app import Marsho
from .debounce import Joined, merged
from .incoming import Limits, Question, read_question, sees_pictures
from .matchers import Request, _announcer, _speaker, user_key
from .observe import group_key
from .render import usage_text
from .where import Where


async def _chat(
    app: Marsho, bot: Bot, event: Event, where: Where, engine: Engine, request: Request, key: str, *,
    shared: bool, role: Role, before: Sequence[Joined] = (), after: Sequence[Joined] = (),
    keep: Callable[[Reply], bool] | None = None, observed: str | None = None,
) -> tuple[Reply | None, list[str]]:
    """Ask the model: the question with its quote and pictures (and the messages that joined
    it: `before`, `after`), this turn's system prompt; the reply (None when there is nothing to
    ask) and tips for the asker. `keep`: whether to store the turn, given the reply (see
    Engine.chat); `observed`: the question as the group's recent chat kept it (an unsolicited
    reply's message), left out of the recent chat that goes with it."""
    config, t = app.config, app.texts
    user_id = where.user_id
    nickname = await app.nicknames.get(user_key(bot, user_id)) if app.nicknames else None
    model = engine.llm.model
    vision = sees_pictures(model, config.marsho_vision_models)
    limits = Limits(config.marsho_max_images, config.marsho_image_max_bytes, config.marsho_image_timeout,
                    config.marsho_image_allow_private)

    async def read(message: Event, text: str, speaker: str = "") -> Question:
        return await read_question(bot, message, text, speaker=speaker, vision=vision, model=model,
                                   limits=limits, marsho_name=config.marsho_name, t=t)

    # in a shared conversation the model must know who is speaking, even for a picture alone
    question = await read(event, request.text, _speaker(app, bot, where, nickname) if shared else "")
    if before or after:  # the messages that joined it (MARSHO_DEBOUNCE_SECONDS), in their order
        question = merged([*[await read(j.event, j.text) for j in before], question,
                           *[await read(j.event, j.text) for j in after]])
    asked = request.text or any(joined.text for joined in (*before, *after))
    if not asked and not question.has_pictures and not question.quoted_text:
        # nothing to ask: a picture the model cannot have (it cannot see, or the download
        # failed, or pictures are off: the tips say which), or a sticker
        if not question.images_seen:
            return None, [usage_text(t, config.trigger_names, config.marsho_at)]
        if vision and question.tips:
            return None, question.tips
        return None, [t("tip.image_only", model=model)]
    context = ToolContext(session_key=key, user_id=user_id, group_id=where.group_id, role=role,
                          bot=bot, event=event, platform=where.platform,
                          chat_key=session_key(where.platform, group_id=where.group_id, user_id=user_id,
                                               channel=where.kind == "channel"),
                          # an unsolicited reply: the speaker asked nothing of marsho
                          personal=observed is None and not where.anonymous)
    group_persona, unread = await _group_side(app, where, key)
    content = question.content()
    if unread is not None:
        # what the group said since this conversation's last turn goes with the question (and is
        # stored with it, so later turns read the same history)
        said = unread.messages
        if observed is not None and said and _same_message(said[-1].text, observed):  # the question
            said = said[:-1]
        if said:
            content = with_recent_chat(content, recent_chat_text(said, t, app.prompt.now().tzinfo))
    note = app.prompt.note(nickname=None if shared else nickname)
    if app.memory_book is not None:  # what it remembers of the asker (and the group) that the words touch
        words = " ".join(part for part in (*(j.text for j in before), request.text, *(j.text for j in after))
                         if part)
        note = "\n".join(part for part in (note, await app.memory_book.note(context, words)) if part)
    try:
        reply = await engine.chat(
            key, content, context,
            system_prompt=app.prompt.system(shared=shared, group_persona=group_persona),
            # the time, the nickname and the memories change from turn to turn: after the
            # history, beside the question, so the start of the request stays the same
            # (providers cache it), and never into history
            note=note,
            announce=_announcer(app, app.delivery()),
            keep=keep,
        )
    except BaseException:
        _carried(app, where, key, unread, stored=False)
        raise
    _carried(app, where, key, unread, stored=reply.stored)
    return reply, question.tips


def _same_message(kept: str, said: str) -> bool:
    """Whether the recent chat's copy of a message is `said` (kept whole, or cut with "…")."""
    return kept == said or (kept.endswith("…") and said.startswith(kept[:-1]))


async def _group_side(app: Marsho, where: Where, key: str) -> tuple[str | None, Unread | None]:
    """What the asker's group adds to a question: its persona, and the recent chat the session
    has not carried yet (None and None in private chats, or where the group has neither)."""
    if not where.shared:
        return None, None
    group = group_key(where)
    persona = await app.personas.get(group) if app.config.marsho_group_persona and app.personas else None
    # a conversation that follows a person across groups (MARSHO_SESSION_SCOPE=user) stores
    # what it carries: one group's chat would reach their other groups
    carries = app.chat_log is not None and app.config.marsho_session_scope != "user"
    unread = await app.chat_log.unread(key, group) if carries and app.chat_log is not None else None
    return persona, unread


def _carried(app: Marsho, where: Where, key: str, unread: Unread | None, *, stored: bool) -> None:
    """The turn that carried `unread` ended: stored, its next question starts after them; else
    the next one carries them again (marked in the background: the answer does not wait)."""
    if unread is not None and app.chat_log is not None:
        app.chat_log.finish_soon(key, group_key(where), unread, stored=stored)
