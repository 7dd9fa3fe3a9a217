"""`marsho.memory`: what marsho remembers, shown to the people it is about, who delete it at once.

- `marsho.memory [forget <n>|all]`: the asker's own memories; group admins and owners
  `marsho.memory group [forget <n>|all]` for the group's (anyone in the group may look);
  superusers `marsho.memory of <user id> ...` and `marsho.memory group <group id> ...` for anyone's.
- A listing in a group never shows what was told in a private chat (the others in the group read
  the reply): those are listed, and deleted, from a private chat with marsho. It says how many
  there are, never what they say.
"""

from __future__ import annotations

from datetime import datetime

from ..i18n import Texts
from ..store.memory import About, Memory, MemoryStore
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


def _private_filter(where: Where, about: About) -> bool | None:
    """Which of an owner's memories a listing here shows: in a group, a person's told outside
    private chats only (False); else all (None)."""
    return False if about == "user" and where.shared else None


async def memory_command(app: Marsho, where: Where, role: Role, text: str) -> str:
    """The reply to `marsho.memory ...`."""
    t, memories, name = app.texts, app.memories, app.config.marsho_name
    if memories is None:
        return t("memory.unavailable")
    words = text.split()
    about: About = "user"
    owner = where.person
    whose = "own"
    shown_id = where.user_id
    if words and words[0].casefold() in OF_WORDS:
        if role != "superuser":
            return t("memory.superusers_only", name=name)
        if len(words) < 2:
            return t("memory.bad", name=name)
        owner, whose, shown_id, words = f"{where.platform}:{words[1]}", "user", words[1], words[2:]
    elif words and words[0].casefold() in GROUP_WORDS:
        about, words = "group", words[1:]
        if words and words[0].casefold() not in FORGET_WORDS:  # a group named by its id
            if role != "superuser":
                return t("memory.superusers_only", name=name)
            shown_id, words = words[0], words[1:]
            owner = session_key(where.platform, group_id=shown_id, user_id="", channel="/" in shown_id)
        elif where.shared:
            owner, shown_id = group_key(where), where.chat_id
        else:
            return t("memory.group_only", name=name)
        whose = "group"
    private_filter = _private_filter(where, about)
    if not words:
        return await _listing(t, memories, about, owner, private_filter, whose, shown_id, name)
    if words[0].casefold() not in FORGET_WORDS or len(words) != 2:
        return t("memory.bad", name=name)
    if about == "group" and whose == "group" and role == "member":
        return t("memory.admins", name=name)
    target = words[1].casefold()
    if target in ALL_WORDS:
        gone = await memories.delete_owner(about, owner, private=private_filter)
        return _after_forget(t, gone, await _hidden(memories, about, owner, private_filter), name)
    if not (target.isascii() and target.isdigit()):
        return t("memory.bad", name=name)
    listed = await memories.of_owner(about, owner, private=private_filter)
    number = int(target)
    if not 1 <= number <= len(listed):
        return t("memory.no_number", number=number, count=len(listed), name=name)
    chosen = listed[number - 1]
    await memories.delete([chosen.id])
    return t("memory.forgot_one", number=number, text=_short(chosen.text))


async def _listing(t: Texts, memories: MemoryStore, about: About, owner: str, private_filter: bool | None,
                   whose: str, shown_id: str, name: str) -> str:
    listed = await memories.of_owner(about, owner, private=private_filter)
    hidden = await _hidden(memories, about, owner, private_filter)
    if not listed:
        empty = {"own": t("memory.head_own_empty", name=name),
                 "user": t("memory.head_user_empty", id=shown_id),
                 "group": t("memory.head_group_empty", id=shown_id)}
        lines = [empty[whose]]
    else:
        head = {"own": t("memory.head_own", count=len(listed)),
                "user": t("memory.head_user", id=shown_id, count=len(listed)),
                "group": t("memory.head_group", id=shown_id, count=len(listed))}
        lines = [head[whose]]
        lines += [f"{number}. {_short(memory.text)}  ({_where_text(t, memory)})"
                  for number, memory in enumerate(listed[:MAX_SHOWN], start=1)]
        if len(listed) > MAX_SHOWN:
            lines.append(t("memory.more", count=len(listed) - MAX_SHOWN))
        lines.append(t("memory.how_to_forget", name=name, group=" group" if about == "group" else "",
                       of=f" of {shown_id}" if whose == "user" else ""))
    if hidden:
        lines.append(t("memory.private_elsewhere", count=hidden, name=name))
    return "\n".join(lines)


async def _hidden(memories: MemoryStore, about: About, owner: str, private_filter: bool | None) -> int:
    """How many memories the listing here leaves out (told in private chats, listed in one)."""
    if private_filter is None:
        return 0
    return await memories.count(about, owner, private=not private_filter)


def _after_forget(t: Texts, gone: int, hidden: int, name: str) -> str:
    lines = [t("memory.forgot_all", count=gone) if gone else t("memory.nothing")]
    if hidden:
        lines.append(t("memory.private_elsewhere", count=hidden, name=name))
    return "\n".join(lines)


def _where_text(t: Texts, memory: Memory) -> str:
    """Where and when a memory was told: "private chat, 2026-12-01" or "group 123, ..."."""
    day = datetime.fromtimestamp(memory.created_at).strftime("%Y-%m-%d")
    if memory.learned_in == "import":
        return t("memory.imported", day=day)
    if memory.private:
        return t("memory.in_private", day=day)
    chat = memory.learned_in.split(":", 2)[-1]
    return t("memory.in_group", group=chat, day=day)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"
