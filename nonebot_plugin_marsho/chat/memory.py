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
from datetime import datetime

from ..i18n import Texts
from ..store.memory import IMPORTED, About, Memory
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


async def memory_command(app: Marsho, where: Where, role: Role, text: str) -> str:
    """The reply to `marsho.memory ...`."""
    t, memories, name = app.texts, app.memories, app.config.marsho_name
    if memories is None:
        return t("memory.unavailable")
    if app.config.marsho_memory_days:  # what has not been used for that long is gone
        await memories.expire(app.config.marsho_memory_days)
    words = unicodedata.normalize("NFKC", text).split()  # full-width digits: "forget ２"
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
            whose = "group" if where.shared and owner == group_key(where) else "other_group"
        elif where.shared:
            owner, shown_id, whose = group_key(where), where.chat_id, "group"
        else:
            return t("memory.group_only", name=name)
    shown = _shown_here(where, about, app.config.marsho_memory_scope == "chat")
    kept = await memories.of_owner(about, owner)
    listed = [memory for memory in kept if shown(memory)]
    hidden = len(kept) - len(listed)
    # the group a listing is read in, named "this group" (None: every group by its id)
    here = (None if whose == "other_group" else owner if about == "group"
            else group_key(where) if where.shared else None)
    command = f"{name}.memory" + {"own": "", "user": f" of {shown_id}", "group": " group",
                                  "other_group": f" group {shown_id}"}[whose]
    if not words:
        return _listing(t, listed, hidden, whose, shown_id, command, name, here)
    if words[0].casefold() not in FORGET_WORDS or len(words) != 2:
        return t("memory.bad", name=name)
    if about == "group" and role == "member":
        return t("memory.admins", name=name)
    target = words[1].casefold()
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
