"""A question to the model from a chat message: the turn's facts gathered from the event, then
asked, and the recent chat it carried marked."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

from nonebot.adapters import Bot, Event

from ..agent.chatlog import Observed, Unread
from ..agent.engine import Engine, Reply
from ..agent.metering import QuotaReached, billed_to_group, held_to_quota, split_with_group, turn_model
from ..agent.persona import tagged_speaker
from ..agent.turn import TurnFacts, ask
from ..store.session import session_key
from ..tools.model import Role, ToolContext
from .app import Marsho
from .bill import limits_of, quota_text
from .debounce import Joined, merged
from .group_actions import shows_ids
from .incoming import Limits, Question, read_question, sees_pictures
from .matchers import Request, _announcer, reserved_names, user_key
from .observe import group_key
from .question_files import files_room, for_turn, read_files
from .render import usage_text
from .segments import segments_hook
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
    nickname = await app.nicknames.get(user_key(bot, where.user_id))
    # in a shared conversation the model must know who is speaking, even for a picture alone
    speaker = _speaker(app, bot, where, nickname) if shared else ""
    # (an unsolicited reply reads no files: nobody asked about them)
    question = await _question(app, bot, engine, event, where, request.text, before, after, speaker=speaker,
                               files=observed is None)
    asked = request.text or any(joined.text for joined in (*before, *after))
    if not asked and not question.has_pictures and not question.quoted_text and not question.read:
        return None, question.tips if question.files else _nothing_asked(app, engine, question)
    # an unsolicited reply: the speaker asked nothing of marsho
    context = _tool_context(bot, event, where, key, role, personal=observed is None and not where.anonymous)
    group_persona, unread = await _group_side(app, where, key)
    words = " ".join(part for part in (*(j.text for j in before), request.text, *(j.text for j in after))
                     if part)
    content, files = for_turn(engine, question.content(), question.read, app.texts, asked=bool(asked),
                              unread=question.unread)
    facts = TurnFacts(content, words=words, shared=shared, nickname=nickname, files=files,
                      group_persona=group_persona, recent=_not_carried(unread, observed))
    unsolicited = observed is not None
    try:
        with _billing(app, engine, where, role, shared=shared, unsolicited=unsolicited, recent=facts.recent):
            reply = await ask(engine, key, facts, app.prompt, context=context, memories=app.memory_book,
                              knowledge=app.knowledge,
                              announce=_announcer(app, app.delivery()),
                              keep=_whole(keep) if unsolicited else keep,
                              on_text=segments_hook())
    except QuotaReached as reached:  # refused before its first request: nothing was stored
        _carried(app, where, key, unread, stored=False)
        return None, [] if unsolicited else [quota_text(app.texts, reached.over)]
    except BaseException:
        _carried(app, where, key, unread, stored=False)
        raise
    _carried(app, where, key, unread, stored=reply.stored)
    return _with_quota(app, reply, question.tips)


def _with_quota(app: Marsho, reply: Reply, tips: list[str]) -> tuple[Reply, list[str]]:
    """A turn a quota ended (Reply.over_quota): what was said so far, and the quota's message
    (as the answer, when nothing was said)."""
    if reply.over_quota is None:
        return reply, tips
    told = quota_text(app.texts, reply.over_quota)
    if not reply.text.strip():
        return dataclasses.replace(reply, text=told), tips
    return reply, [*tips, told]


@contextmanager
def _billing(app: Marsho, engine: Engine, where: Where, role: Role, *, shared: bool, unsolicited: bool,
             recent: Sequence[Observed]) -> Iterator[None]:
    """Who pays for the turn's requests and what holds them (agent/metering.py states the rule):
    every request is checked against the quotas (not a superuser's, nor a turn the cheaper model
    answers); in a group, what others wrote is the group's (the earlier conversation of a shared
    one, the recent chat going with the question), and all of an unsolicited reply."""
    with ExitStack() as stack:
        if role != "superuser" and not turn_model():
            stack.enter_context(held_to_quota(limits_of(app.config)))
        if where.chat is not None:
            counter = engine.counter
            said = sum(counter.count_text(line.text) for line in recent)
            stack.enter_context(split_with_group(shared, said))
        if unsolicited:
            stack.enter_context(billed_to_group(turn=True))
        yield


def _whole(keep: Callable[[Reply], bool] | None) -> Callable[[Reply], bool]:
    """`keep` for an unsolicited reply: one a quota cut short is neither sent nor stored."""
    return lambda reply: reply.over_quota is None and (keep is None or keep(reply))


async def _question(app: Marsho, bot: Bot, engine: Engine, event: Event, where: Where, text: str,
                    before: Sequence[Joined], after: Sequence[Joined], *, speaker: str,
                    files: bool = True) -> Question:
    """The question as the model reads it: the message `text` came in (its quote and pictures),
    named with `speaker`'s label, and the messages that joined it (MARSHO_DEBOUNCE_SECONDS), in
    their order; with `files`, the files of them all read (Question.read; tips for those that
    were not)."""
    config, model = app.config, engine.llm.model
    vision = sees_pictures(model, config.marsho_vision_models)
    limits = Limits(config.marsho_max_images, config.marsho_image_max_bytes, config.marsho_image_timeout,
                    config.marsho_image_allow_private)

    async def read(message: Event, said: str, speaker: str = "", continued: bool = False) -> Question:
        return await read_question(bot, message, said, speaker=speaker, vision=vision, model=model,
                                   limits=limits, marsho_name=config.marsho_name, t=app.texts,
                                   ids=shows_ids(app.group_actions, bot, message), continued=continued)

    question = await read(event, text, speaker)
    if before or after:
        # (pictures before it hold no words; the lines after it continue the labelled question)
        questions = [*[await read(j.event, j.text) for j in before], question,
                     *[await read(j.event, j.text, continued=bool(speaker)) for j in after]]
        question = merged(questions)
        question.files = [shared for each in questions for shared in each.files]
    if question.files and files:
        question.read, question.unread, tips = await read_files(app, bot, where, question.files, app.texts,
                                                                room=files_room(engine))
        question.tips += tips
    return question


def _speaker(app: Marsho, bot: Bot, where: Where, nickname: str | None = None) -> str:
    """How the asker is named to the model: the nickname they chose, else their name in the
    group (card, member nickname) or account name, else their id; normalised so that no name
    forges a line or speaks as the bot, with their short id (`Alice#3f2a`): nobody takes
    another's label by copying their card."""
    name = nickname or where.name or where.user_id
    return tagged_speaker(name, where.platform, where.user_id, reserved_names(app, bot))


def _nothing_asked(app: Marsho, engine: Engine, question: Question) -> list[str]:
    """What to tell the asker of a message with nothing to ask: a picture the model cannot have
    (it cannot see, or the download failed, or pictures are off: the tips say which), or a
    sticker."""
    config, t, model = app.config, app.texts, engine.llm.model
    if not question.images_seen:
        return [usage_text(t, config.trigger_names, config.marsho_at)]
    if sees_pictures(model, config.marsho_vision_models) and question.tips:
        return question.tips
    return [t("tip.image_only", model=model)]


def _tool_context(bot: Bot, event: Event, where: Where, key: str, role: Role, *,
                  personal: bool) -> ToolContext:
    """Who asks, and where, for the tools and the memories."""
    return ToolContext(session_key=key, user_id=where.user_id, group_id=where.group_id, role=role,
                       bot=bot, event=event, platform=where.platform,
                       chat_key=session_key(where.platform, group_id=where.group_id, user_id=where.user_id,
                                            channel=where.kind == "channel"),
                       personal=personal)


def _not_carried(unread: Unread | None, observed: str | None) -> list[Observed]:
    """What the group said since this conversation's last turn, which goes with the question:
    the unread messages but the question itself (`observed`, an unsolicited reply's)."""
    if unread is None:
        return []
    said = unread.messages
    if observed is not None and said and _same_message(said[-1].text, observed):
        said = said[:-1]
    return said


def _same_message(kept: str, said: str) -> bool:
    """Whether the recent chat's copy of a message is `said` (kept whole, or cut with "…")."""
    return kept == said or (kept.endswith("…") and said.startswith(kept[:-1]))


async def _group_side(app: Marsho, where: Where, key: str) -> tuple[str | None, Unread | None]:
    """What the asker's group adds to a question: its persona, and the recent chat the session
    has not carried yet (None and None in private chats, or where the group has neither)."""
    if not where.shared:
        return None, None
    group = group_key(where)
    persona = await app.personas.get(group) if app.config.marsho_group_persona else None
    # a conversation that follows a person across groups (MARSHO_SESSION_SCOPE=user) stores
    # what it carries: one group's chat would reach their other groups
    carries = app.config.marsho_session_scope != "user"
    unread = await app.chat_log.unread(key, group) if carries else None
    return persona, unread


def _carried(app: Marsho, where: Where, key: str, unread: Unread | None, *, stored: bool) -> None:
    """The turn that carried `unread` ended: stored, its next question starts after them; else
    the next one carries them again (marked in the background: the answer does not wait; not
    at all once the bot has stopped meanwhile: its recent chat is closed)."""
    if unread is not None and app.ready:
        app.chat_log.finish_soon(key, group_key(where), unread, stored=stored)
