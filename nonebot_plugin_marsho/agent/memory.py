"""Long-term memory as the model uses it (issue 18): the built-in tools `memory__remember`,
`memory__recall` and `memory__forget`, and the memories found for each question, which go beside
it in the turn's note.

Who may see what is store/memory.py's `Sight`; this module only decides who is asking and where
(from the ToolContext), and who may write or delete: a person's memories are always the asker's
own, and a group's may be forgotten by its admins or by whoever told it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from ..exceptions import StoreError
from ..i18n import Language, Texts
from ..redaction import logger
from ..store.memory import Added, Memory, MemoryStore, Sight, query_terms
from ..tools.model import ToolContext, Toolkit, ToolResponse
from ..tools.runner import clean_text
from ..tools.schema import function_tool
from .framing import framed

TOOLKIT = "memory"
MEMORY_TOOLS = (f"{TOOLKIT}__remember", f"{TOOLKIT}__recall", f"{TOOLKIT}__forget")
RECALL_LIMIT = 20
"""Memories one memory__recall lists at most."""

OUTSIDE_CHAT = ("Memory is kept only in chats: this call has no asker and no chat (the command line, "
                "or a library call without them), so there is nothing to remember, recall or forget here.")
STORE_FAILED = "The memory store is unavailable right now (the database failed); say so and try again later."
ADMIN_ROLES = ("admin", "owner", "superuser")
OWNERS_TTL = 60.0
"""Seconds the list of people and groups with memories is trusted before it is read again (in
the background): a memory another bot process keeps (or `import-memory`) comes up beside
questions within this long; this process's own at once."""


class MemoryBook:
    """The memory tools and the recall beside each question, on one MemoryStore, with the
    MARSHO_MEMORY_* settings."""

    def __init__(self, store: MemoryStore, *, per_chat: bool = False, per_user: int = 50,
                 per_group: int = 100, per_member: int = 20, chars: int = 300, recall: int = 5,
                 days: int = 0, language: Language = "zh-CN") -> None:
        self.store = store
        self.per_chat = per_chat
        self.per_user = per_user
        self.per_group = per_group
        self.per_member = per_member
        """How many of a group's memories one member may have told (0: any number); a group's
        admins, its owner and superusers are not limited."""
        self.chars = chars
        self.recall = recall
        self.days = days
        self.texts = Texts(language)
        self._touching: set[asyncio.Task[None]] = set()
        self._owners: set[tuple[str, str]] | None = None
        """Who has memories: a question from someone without any (in a group without any)
        costs no search. Read at the first question, again every OWNERS_TTL seconds."""
        self._owners_read = 0.0
        self._reading: asyncio.Task[None] | None = None
        self._kept_meanwhile: set[tuple[str, str]] | None = None
        """Owners given a memory while the list is being read (the read may predate them)."""

    def sight(self, context: ToolContext | None) -> Sight | None:
        """Which memories a turn asked with `context` may use; None outside a chat."""
        if context is None or not context.platform or not context.chat_key or not context.user_id:
            return None
        # not the asker's own turn (an unsolicited reply, an anonymous sender): no person's
        fresh_after = time.time() - self.days * 86400 if self.days else 0.0
        return Sight(person=f"{context.platform}:{context.user_id}" if context.personal else "",
                     chat=context.chat_key, group=context.chat_key if context.group_id else None,
                     per_chat=self.per_chat, fresh_after=fresh_after)

    # the tools

    def toolkit(self) -> Toolkit:
        """`memory__remember`, `memory__recall` and `memory__forget`, for everyone."""
        chars = self.chars

        async def remember(text: str, context: ToolContext,
                           about: Literal["me", "group"] = "me") -> ToolResponse:
            return await self.remember(context, text, about)

        remember.__doc__ = f"""Keep a lasting fact for later conversations.

        Use it when the person asking tells something lasting about themselves (their name,
        preferences, birthday, what they work on...) or asks you to remember something, or, with
        about="group", a lasting fact about the group (its rules, plans, running jokes). Write
        one short, self-contained fact in the third person, in the conversation's language, at
        most {chars} characters (e.g. "Likes green tea, not coffee"). Never keep secrets such as
        passwords, keys or codes. A fact about a person is always about the person asking now:
        nobody can write a memory about someone else.

        Args:
            text: The fact, short and self-contained, third person, at most {chars} characters.
            about: "me": about the person asking (the default); "group": about this group (in a
                group only).
        """

        async def recall(context: ToolContext, query: str = "") -> ToolResponse:
            return await self.recall_text(context, query)

        recall.__doc__ = """Look up what you remember about the person asking (and the group).

        In a group, the group's own memories are searched too. The most relevant memories
        already come with each message; use this to look further, with a few words of what you
        need (e.g. "birthday", "favourite food"). An empty query lists the memories used most
        recently. Each comes with its id (#12), for memory__forget.

        Args:
            query: Words to search for; empty lists the most recently used memories.
        """

        async def forget(memory_id: int, context: ToolContext) -> ToolResponse:
            return await self.forget(context, memory_id)

        forget.__doc__ = """Forget one memory, by the id memory__recall or memory__remember showed.

        Use it when the person asking says a memory is wrong or asks you to forget it. A memory
        about a person may be forgotten only by that person; a group's memory only by the group's
        admins or by whoever told it.

        Args:
            memory_id: The memory's id (the number after #).
        """
        tools = [
            function_tool(remember, name=f"{TOOLKIT}__remember", toolkit=TOOLKIT),
            function_tool(recall, name=f"{TOOLKIT}__recall", toolkit=TOOLKIT),
            function_tool(forget, name=f"{TOOLKIT}__forget", toolkit=TOOLKIT),
        ]
        for tool in tools[1:]:
            # what they print is for this asker's turn: a shared conversation's history is read
            # by the next asker, whose turn may not see these memories
            tool.keeps_result = False
        return Toolkit(name=TOOLKIT, source="built-in", tools=tools)

    async def remember(self, context: ToolContext, text: str, about: str = "me") -> ToolResponse:
        """Keep `text` about the asker (`about="me"`) or the group asked in (`"group"`)."""
        sight = self.sight(context)
        if sight is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        # no NUL (PostgreSQL refuses it), no lone surrogate (nothing can store it)
        fact = " ".join(clean_text(text).replace("\x00", " ").split())
        refused = self._not_to_remember(sight, fact, about)
        if refused:
            return ToolResponse.error(refused)
        try:
            added = await self._add(context, sight, fact, about)
        except StoreError as error:
            logger.warning(f"marsho: memory__remember in {sight.chat} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        self._kept("group" if about == "group" else "user", added.memory.owner)
        return ToolResponse.success(self._remembered(added, about))

    def _not_to_remember(self, sight: Sight, fact: str, about: str) -> str | None:
        """Why `fact` cannot be kept `about` the asker or the group here, for the model; None
        when it can."""
        if about == "me" and not sight.person:
            return ("Nothing is remembered about this person here: the message was not addressed "
                    "to you (you chose to answer it), or its sender is anonymous. Remember nothing "
                    "about them.")
        if not fact:
            return "Nothing to remember: `text` is empty. Write the fact to keep."
        if len(fact) > self.chars:
            return (f"Too long: {len(fact)} characters, and a memory holds at most {self.chars} "
                    f"(MARSHO_MEMORY_CHARS). Say it in at most {self.chars} characters and call "
                    "memory__remember again (split it into several facts if they are separate).")
        if about not in ("me", "group"):
            return f'`about` must be "me" or "group", not {about!r}.'
        if about == "group" and sight.group is None:
            return ('about="group" works only in a group: this is a private chat. Remember it with '
                    'about="me" if it is about the person asking.')
        return None

    async def _add(self, context: ToolContext, sight: Sight, fact: str, about: str) -> Added:
        """Store `fact` about the group or the asker, within their limits."""
        if about == "group":
            assert sight.group is not None
            # a member telling more than their share pushes out their own, not others'
            per_author = 0 if context.role != "member" else self.per_member
            return await self.store.add("group", sight.group, fact, learned_in=sight.chat, private=False,
                                        author=sight.person, limit=self.per_group, per_author=per_author,
                                        days=self.days)
        return await self.store.add("user", sight.person, fact, learned_in=sight.chat,
                                    private=sight.private, author=sight.person, limit=self.per_user,
                                    per_chat=self.per_chat, days=self.days)

    def _remembered(self, added: Added, about: str) -> str:
        """What the model reads after a memory is kept: its id, and which were forgotten for it."""
        whom = "the group" if about == "group" else "the person asking"
        if added.again:
            answer = f"Already remembered as #{added.memory.id} (about {whom}); kept it fresh."
        else:
            answer = f"Remembered as #{added.memory.id} (about {whom})."
        if added.author_evicted:
            ids = ", ".join(f"#{memory.id}" for memory in added.author_evicted)
            answer += (f" One member may have told at most {self.per_member} of the group's memories "
                       "(MARSHO_MEMORY_PER_MEMBER): this person's own unused for longest were "
                       f"forgotten: {ids}.")
        if others := [memory for memory in added.evicted if memory not in added.author_evicted]:
            limit = self.per_group if about == "group" else self.per_user
            ids = ", ".join(f"#{memory.id}" for memory in others)
            answer += (f" To stay within {limit} memories about {whom}, the one(s) unused for "
                       f"longest were forgotten: {ids}.")
        return answer

    async def recall_text(self, context: ToolContext, query: str = "") -> ToolResponse:
        """The memories the turn may see that match `query` (all, most recently used first, when
        it has no words to search by), each with its id."""
        sight = self.sight(context)
        if sight is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        searched = bool(query_terms(query))
        try:
            found = (await self.store.search(sight, query, limit=RECALL_LIMIT) if searched
                     else await self.store.visible(sight, limit=RECALL_LIMIT))
        except StoreError as error:
            logger.warning(f"marsho: memory__recall in {sight.chat} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        if not found:
            nothing = "Nothing is remembered about the person asking or this chat yet."
            return ToolResponse.success(f"No memory matches {query.strip()!r}." if searched else nothing)
        heading = (f"Memories matching {query.strip()!r}, best first:" if searched
                   else "Memories, most recently used first:")
        lines = [f"#{memory.id} ({_about(memory)}): {framed(memory.text)}" for memory in found]
        return ToolResponse.success("\n".join([heading, *lines]))

    async def forget(self, context: ToolContext, memory_id: int) -> ToolResponse:
        """Forget memory `memory_id` if the turn may see it and the asker may delete it."""
        sight = self.sight(context)
        if sight is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        if not 1 <= memory_id < 2**63:  # no database holds it: as absent as any other
            return ToolResponse.error(
                f"There is no memory #{memory_id} here (memory__recall lists the ones this chat "
                "can use, with their ids).")
        try:
            memory = await self.store.get(memory_id, sight=sight)
            if memory is None:  # absent and not to be seen here read the same: ids tell nothing
                return ToolResponse.error(
                    f"There is no memory #{memory_id} here (memory__recall lists the ones this chat "
                    "can use, with their ids).")
            if memory.about == "user" and memory.owner != sight.person:
                return ToolResponse.error(
                    f"Memory #{memory_id} is about someone else: only they can forget it.")
            # the teller may take back what they told; an anonymous sender (no person) is nobody's teller
            told_it = bool(sight.person) and memory.author == sight.person
            if memory.about == "group" and context.role not in ADMIN_ROLES and not told_it:
                return ToolResponse.error(
                    f"Memory #{memory_id} belongs to the group: only the group's admins, or the member "
                    "who told it, can forget it. Ask an admin.")
            await self.store.delete([memory.id])
        except StoreError as error:
            logger.warning(f"marsho: memory__forget in {sight.chat} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        return ToolResponse.success(f"Forgot #{memory.id} ({_about(memory)}): {framed(memory.text)}")

    # beside each question

    async def note(self, context: ToolContext, question: str) -> str:
        """The memories full-text search finds for `question` (at most MARSHO_MEMORY_RECALL),
        as a labelled block for the turn's note; "" for none. One query; found memories are
        marked used in the background. Never raises: a failure is logged and gives ""."""
        sight = self.sight(context)
        if sight is None or self.recall <= 0 or self._surely_none(sight) or not query_terms(question):
            return ""
        try:
            if not await self._may_have(sight):
                return ""
            found = await self.store.search(sight, question, limit=self.recall, touch=False)
        except Exception as error:  # the question goes on without its memories
            logger.warning(f"marsho: memories for a question in {sight.chat} not read: {error}")
            return ""
        if not found:
            return ""
        self._touch_soon([memory.id for memory in found])
        t = self.texts
        lines = [t("memory.note_line", id=memory.id,
                   about=t("memory.note_group") if memory.about == "group" else t("memory.note_asker"),
                   text=framed(memory.text)) for memory in found]
        return t("memory.note", memories="\n".join(lines))

    def _surely_none(self, sight: Sight) -> bool:
        """Whether the owners read lately (within OWNERS_TTL) say neither the asker nor the group
        has memories: `_may_have` would say so too, without the question's words looked at."""
        owners = self._owners
        if owners is None or time.monotonic() - self._owners_read > OWNERS_TTL:
            return False
        group = sight.group is not None and ("group", sight.group) in owners
        return ("user", sight.person) not in owners and not group

    async def _may_have(self, sight: Sight) -> bool:
        """Whether the asker, or the group asked in, may have memories (False: surely none)."""
        if self._owners is None:
            await self._read_owners()
        elif time.monotonic() - self._owners_read > OWNERS_TTL and self._reading is None:
            self._reading = asyncio.get_running_loop().create_task(self._read_owners())
        owners = self._owners or set()
        group = sight.group is not None and ("group", sight.group) in owners
        return ("user", sight.person) in owners or group

    async def _read_owners(self) -> None:
        background = self._owners is not None
        self._kept_meanwhile = set()
        try:
            if self.days:  # the unused for MARSHO_MEMORY_DAYS go (searches already skip them)
                await self.store.expire(self.days)
            owners = await self.store.owners()
            self._owners, self._owners_read = owners | self._kept_meanwhile, time.monotonic()
        except Exception as error:
            if not background:
                raise
            logger.warning(f"marsho: who has memories not read again: {error}")  # kept as it was
            self._owners_read = time.monotonic()
        finally:
            self._reading = None
            self._kept_meanwhile = None

    def _kept(self, about: str, owner: str) -> None:
        """`owner` has a memory now: it is searched from the next question on."""
        if self._owners is not None:
            self._owners.add((about, owner))
        if self._kept_meanwhile is not None:
            self._kept_meanwhile.add((about, owner))

    def _touch_soon(self, ids: list[int]) -> None:
        task = asyncio.get_running_loop().create_task(self._touch(ids))
        self._touching.add(task)
        task.add_done_callback(self._touching.discard)

    async def _touch(self, ids: list[int]) -> None:
        try:
            await self.store.touch(ids)
        except Exception as error:  # only the eviction order suffers
            logger.warning(f"marsho: memories {ids} not marked as used: {error}")

    async def settled(self) -> None:
        """Wait for the background marks of use and reads (before closing the database, and in
        tests)."""
        while self._touching or self._reading is not None:
            reading = [self._reading] if self._reading is not None else []
            await asyncio.gather(*self._touching, *reading, return_exceptions=True)


def _about(memory: Memory) -> str:
    return "about the group" if memory.about == "group" else "about the person asking"

