"""One turn with the model, however it is asked (a chat message, the CLI's `ask`, a
Conversation; later a reminder): the facts the asking side gathers (`TurnFacts`), the request
built from them (`build_request`), and the turn run on the engine (`ask`). NoneBot-free: the
chat layer reads the event, the pipeline decides what the model gets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..i18n import Texts
from ..store.session import Message
from ..tools.model import ToolContext
from .chatlog import Observed, recent_chat_text, with_recent_chat
from .engine import Announce, Engine, Progress, Reply
from .framing import framed
from .knowledge import KnowledgeBase
from .memory import MemoryBook
from .model.base import TextHook
from .persona import Prompt, with_turn_note

Content = str | list[dict[str, Any]]
"""A user message's content: text, or OpenAI content parts (text and `image_url` pictures)."""


@dataclass(frozen=True)
class TurnFacts:
    """What the asking side knows of one turn; everything the model gets is built from it."""

    content: Content
    """The question as the model reads it; in a shared conversation it starts with the
    speaker's label (`asking` puts it there; chat/incoming does for a message, before its
    quote)."""
    words: str = ""
    """What the asker wrote, without labels or quotes: what memories are recalled by."""
    shared: bool = False
    """A conversation of several people (a group's): the system prompt says how speakers are
    named, and the nickname is their label, not a line of the note."""
    nickname: str | None = None
    """What the asker asked to be called (`marsho.nickname`)."""
    group_persona: str | None = None
    """The asker's group's own persona (`marsho.persona`)."""
    recent: Sequence[Observed] = ()
    """The group's chat this conversation has not carried yet: it goes with the question, and
    is stored with it, so later turns read the same history."""
    files: str = ""
    """The text of the files read for this question, as the model reads them (labelled,
    framed, cut to the budget: agent/asked_files.py): it goes after the note in this turn's
    requests only, never stored; `content` names each file in one line, which is."""

    @classmethod
    def asking(cls, text: str, *, speaker: str = "", **facts: Any) -> TurnFacts:
        """The facts of a question of words alone (no message to read): named `speaker: ...`
        when a speaker is given, which makes the conversation shared unless said otherwise
        (the words framed then: no line of theirs starts like another speaker's)."""
        facts.setdefault("shared", bool(speaker))
        return cls(content=f"{speaker}: {framed(text)}" if speaker else text, words=text, **facts)


@dataclass(frozen=True)
class TurnRequest:
    """What one turn sends: the system prompt (the same every turn of a conversation, so
    providers cache the request's start), the question, and the note that goes beside the
    question in this turn's requests only (the time, the nickname, memories: never stored)."""

    system_prompt: str | None
    """None: the asker's own (a Conversation's `system_prompt`, the engine's)."""
    content: Content
    note: str = ""

    def question(self) -> Message:
        """The question as history keeps it: without the note."""
        return {"role": "user", "content": self.content}

    def asked(self) -> Message:
        """The question as this turn's requests send it: with the note."""
        return {"role": "user", "content": with_turn_note(self.content, self.note)}


async def build_request(facts: TurnFacts, prompt: Prompt | None, *, context: ToolContext | None = None,
                        memories: MemoryBook | None = None, knowledge: KnowledgeBase | None = None
                        ) -> TurnRequest:
    """The request of a turn: the system prompt of the conversation (`prompt`'s; None without
    one), the question with the recent chat before it, and the note: the time and the
    nickname (`prompt`'s), then what `memories` recalls for the asker's words, then the
    passages of the chat's documents (`knowledge`) they find, then the files read for it."""
    content = facts.content
    if facts.recent:
        t, zone = (Texts(prompt.language), prompt.now().tzinfo) if prompt is not None else (Texts(), None)
        content = with_recent_chat(content, recent_chat_text(facts.recent, t, zone))
    note, system = "", None
    if prompt is not None:
        system = prompt.system(shared=facts.shared, group_persona=facts.group_persona)
        # in a shared conversation the nickname is the speaker's label already
        note = prompt.note(nickname=None if facts.shared else facts.nickname)
    if memories is not None and context is not None:
        note = "\n".join(part for part in (note, await memories.note(context, facts.words)) if part)
    if knowledge is not None and context is not None:
        note = "\n".join(part for part in (note, await knowledge.note(context, facts.words)) if part)
    if facts.files:
        note = "\n\n".join(part for part in (note, facts.files) if part)
    return TurnRequest(system, content, note)


async def ask(
    engine: Engine, key: str, facts: TurnFacts, prompt: Prompt | None, *,
    context: ToolContext | None = None, memories: MemoryBook | None = None,
    knowledge: KnowledgeBase | None = None, progress: Progress | None = None,
    announce: Announce | None = None,
    keep: Callable[[Reply], bool] | None = None,
    on_text: TextHook | None = None,
) -> Reply:
    """Run the turn of `facts` in session `key` (see Engine.chat: stored only if it completes,
    and `keep` says so; the note never). `on_text` is told the answer's text as it streams in
    (None: not streamed for it, as before)."""
    request = await build_request(facts, prompt, context=context, memories=memories, knowledge=knowledge)
    return await engine.chat(key, request.content, context, system_prompt=request.system_prompt,
                             note=request.note, progress=progress, announce=announce, keep=keep,
                             on_text=on_text)
