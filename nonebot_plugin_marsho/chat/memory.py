"""`marsho.memory`: what marsho remembers, shown to the people it is about, who delete it at once.

- `marsho.memory [forget <n>|all]`: the asker's own memories; group admins and owners
  `marsho.memory group [forget <n>|all]` for the group's (anyone in the group may look);
  superusers `marsho.memory of <user id> ...` and `marsho.memory group <group id> ...` for anyone's.
- A listing in a group never shows what was told in a private chat (the others in the group read
  the reply): those are listed, and deleted, from a private chat with marsho. It says how many
  there are, never what they say.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ..i18n import Texts
from ..store.memory import IMPORTED, About, Memory, MemoryStore
from ..store.session import session_key
from ..tools.model import Role
from .app import Marsho
from .observe import group_key
from .where import Where

FORGET_WORDS = ("forget", "delete", "del", "rm", "remove", "忘记", "忘掉", "删除")
ALL_WORDS = ("all", "*", "全部", "所有")
OF_WORDS = ("of", "user")
GROUP_WORDS = ("group", "群")
SHOWN_CHARS = 200
"""Characters of each memory a listing shows (the whole text is kept)."""
MAX_SHOWN = 50
"""Memories one listing shows (the rest are counted, and deleted by number just the same)."""


def _shown_here(where: Where, about: About, per_chat: bool) -> Callable[[Memory], bool]:
    """Which of an owner's memories a listing here shows (and `forget all` here deletes): in a
    group, a person's told outside private chats, and under MARSHO_MEMORY_SCOPE=chat only those
    told in this group (the group reads the reply); elsewhere all."""
    if about == "group" or not where.shared:
        return lambda memory: True
    here = group_key(where)
    return lambda memory: not memory.private and (not per_chat or memory.learned_in == here)


@dataclass(frozen=True)
class _Whose:
    """Whose memories a `marsho.memory ...` is about, and the words after that."""

    about: About
    owner: str
    """The memories' owner key (a person's "<platform>:<id>", a group's session key)."""
    whose: str
    """How the reply names them: "own", "user", "group" (this one), "other_group"."""
    shown_id: str
    """The person's or group's id as the reply shows it."""
    words: list[str]


async def memory_command(app: Marsho, where: Where, role: Role, text: str) -> str:
    """The reply to `marsho.memory ...`."""
    t, memories, name = app.texts, app.memories, app.config.marsho_name
    if app.config.marsho_memory_days:  # what has not been used for that long is gone
        await memories.expire(app.config.marsho_memory_days)
    words = unicodedata.normalize("NFKC", text).split()  # full-width digits: "forget ２"
    asked = _whose(t, name, where, role, words)
    if isinstance(asked, str):
        return asked
    shown = _shown_here(where, asked.about, app.config.marsho_memory_scope == "chat")
    kept = await memories.of_owner(asked.about, asked.owner)
    listed = [memory for memory in kept if shown(memory)]
    hidden = len(kept) - len(listed)
    command = f"{name}.memory" + {"own": "", "user": f" of {asked.shown_id}", "group": " group",
                                  "other_group": f" group {asked.shown_id}"}[asked.whose]
    words = asked.words
    if not words:
        return _listing(t, listed, hidden, asked.whose, asked.shown_id, command, name, _read_in(where, asked))
    if words[0].casefold() not in FORGET_WORDS or len(words) != 2:
        return t("memory.bad", name=name)
    if asked.about == "group" and role == "member":
        return t("memory.admins", name=name)
    return await _forget(t, memories, listed, hidden, command, name, words[1].casefold())


def _whose(t: Texts, name: str, where: Where, role: Role, words: list[str]) -> _Whose | str:
    """Whose memories the words ask about (the asker's own, `of <user id>`, `group [<group id>]`),
    or why the asker may not ask that here."""
    own = _Whose("user", where.person, "own", where.user_id, words)
    if not words:
        return own
    first = words[0].casefold()
    if first in OF_WORDS:
        if role != "superuser":
            return t("memory.superusers_only", name=name)
        if len(words) < 2:
            return t("memory.bad", name=name)
        return _Whose("user", f"{where.platform}:{words[1]}", "user", words[1], words[2:])
    if first in GROUP_WORDS:
        return _group_whose(t, name, where, role, words[1:])
    return own


def _group_whose(t: Texts, name: str, where: Where, role: Role, words: list[str]) -> _Whose | str:
    """`group [forget ...]`: the group it is sent in; `group <group id> ...`: any group's
    (superusers)."""
    if words and words[0].casefold() not in FORGET_WORDS:  # a group named by its id
        if role != "superuser":
            return t("memory.superusers_only", name=name)
        shown_id = words[0]
        owner = session_key(where.platform, group_id=shown_id, user_id="", channel="/" in shown_id)
        whose = "group" if where.shared and owner == group_key(where) else "other_group"
        return _Whose("group", owner, whose, shown_id, words[1:])
    if where.shared:
        return _Whose("group", group_key(where), "group", where.chat_id, words)
    return t("memory.group_only", name=name)


def _read_in(where: Where, asked: _Whose) -> str | None:
    """The group a listing is read in, named "this group" in it (None: every group by its id)."""
    if asked.whose == "other_group":
        return None
    if asked.about == "group":
        return asked.owner
    return group_key(where) if where.shared else None


async def _forget(t: Texts, memories: MemoryStore, listed: list[Memory], hidden: int, command: str,
                  name: str, target: str) -> str:
    """`forget all` (what the listing here shows) or `forget <number>`."""
    if target in ALL_WORDS:
        gone = await memories.delete([memory.id for memory in listed])
        lines = [t("memory.forgot_all", count_text=t.plural("count.memories", gone)) if gone
                 else t("memory.nothing")]
        if hidden:
            lines.append(t("memory.private_elsewhere", count=hidden, command=command))
        return "\n".join(lines)
    target = target.removeprefix("#")
    if not (target.isascii() and target.isdigit() and len(target) <= 18):
        return t("memory.bad", name=name)
    # the number the listing shows is the memory's own: it stays the same when others come
    # and go, so the one deleted is the one read
    chosen = next((memory for memory in listed if memory.id == int(target)), None)
    if chosen is None:
        return t("memory.no_number", number=int(target), name=name)
    await memories.delete([chosen.id])
    return t("memory.forgot_one", number=chosen.id, text=_short(chosen.text))


def _listing(t: Texts, listed: list[Memory], hidden: int, whose: str, shown_id: str, command: str,
             name: str, here: str | None) -> str:
    if not listed:
        empty = {"own": t("memory.head_own_empty", name=name),
                 "user": t("memory.head_user_empty", id=shown_id),
                 "group": t("memory.head_group_empty", id=shown_id),
                 "other_group": t("memory.head_other_group_empty", id=shown_id)}
        lines = [empty[whose]]
    else:
        head = {"own": t("memory.head_own", count=len(listed)),
                "user": t("memory.head_user", id=shown_id, count=len(listed)),
                "group": t("memory.head_group", id=shown_id, count=len(listed)),
                "other_group": t("memory.head_other_group", id=shown_id, count=len(listed))}
        lines = [head[whose]]
        lines += [t("memory.line", id=memory.id, text=_short(memory.text), where=_where_text(t, memory, here))
                  for memory in listed[:MAX_SHOWN]]
        if len(listed) > MAX_SHOWN:
            lines.append(t("memory.more", count=len(listed) - MAX_SHOWN))
        lines.append(t("memory.how_to_forget", command=command))
    if hidden:
        lines.append(t("memory.private_elsewhere", count=hidden, command=command))
    return "\n".join(lines)


def _where_text(t: Texts, memory: Memory, here: str | None) -> str:
    """Where and when a memory was told: "told in a private chat, 2026-12-01", "told in 123, ...";
    listed in a group (`here`), another group is not named: the group reads the reply."""
    day = datetime.fromtimestamp(memory.created_at).strftime("%Y-%m-%d")
    if memory.author == IMPORTED or memory.learned_in == "import":
        return t("memory.imported", day=day)
    if memory.private:
        return t("memory.in_private", day=day)
    if memory.about == "group" and memory.author:  # told in the group listed; by whom, for its admins
        # "<platform>:<user id>"; a platform's name has no colon, a user id may (Matrix's @a:b.org)
        return t("memory.told_by", user=memory.author.split(":", 1)[-1], day=day)
    if here is not None:
        return t("memory.in_this_group", day=day) if memory.learned_in == here else t(
            "memory.in_another_group", day=day)
    chat = memory.learned_in.split(":", 2)[-1]
    return t("memory.in_group", group=chat, day=day)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"
