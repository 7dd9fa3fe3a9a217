"""`marsho.memory`: people see what marsho remembers about them and delete it at once; group admins
do the same for their group's memories, superusers for anyone's; a listing in a group never shows
what was told in a private chat."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nonebug import App

from nonebot_plugin_marsho.store.memory import MemoryStore, Sight
from nonebot_plugin_marsho.store.sql import SqlStore
from tests.conftest import SUPERUSER_ID, configured
from tests.onebot import group_message, onebot_bot, private_message, reply_call

P = "OneBot V11"
_people = itertools.count(50001)
_groups = itertools.count(80001)


@pytest.fixture
async def memories(marsho: Any) -> AsyncIterator[MemoryStore]:
    """The running bot's memories, in a database of this test's own."""
    saved = marsho.memories
    store = SqlStore("sqlite://")
    marsho.memories = MemoryStore(store)
    yield marsho.memories
    marsho.memories = saved
    await store.close()


async def reply_to(app: App, event: Any) -> str:
    """What marsho answers to `event` (a command: no model is asked)."""
    sent: list[str] = []
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        name, data = reply_call(event, "")
        ctx.should_call_api(name, {**data, "message": ctx_any(sent)}, result={"message_id": 1})
    return sent[0]


class ctx_any:  # noqa: N801 - used like a value in the expected call
    """Equal to any message; keeps its text."""

    def __init__(self, sink: list[str]) -> None:
        self.sink = sink

    def __eq__(self, other: object) -> bool:
        self.sink.append(re.sub(r"^\[CQ:reply,id=\d+\]", "", str(other)))
        return True


async def remember(memories: MemoryStore, user: int, text: str, *, group: int | None = None,
                   limit: int = 50) -> int:
    chat = f"{P}:group:{group}" if group is not None else f"{P}:private:{user}"
    added = await memories.add("user", f"{P}:{user}", text, learned_in=chat, private=group is None,
                               author=f"{P}:{user}", limit=limit)
    return added.memory.id


async def remember_group(memories: MemoryStore, group: int, text: str, *, author: int = 1) -> int:
    added = await memories.add("group", f"{P}:group:{group}", text, learned_in=f"{P}:group:{group}",
                               private=False, author=f"{P}:{author}", limit=50)
    return added.memory.id


def texts(memories: list[Any]) -> list[str]:
    return [memory.text for memory in memories]


async def test_in_a_private_chat_a_person_sees_everything_kept_about_them_numbered(
        app: App, memories: MemoryStore) -> None:
    alice, group = next(_people), next(_groups)
    cat = await remember(memories, alice, "Alice's cat is called Mochi", group=group)
    berlin = await remember(memories, alice, "Alice is moving to Berlin in March")
    reply = await reply_to(app, private_message("marsho.memory", user_id=alice))
    assert reply.startswith("What I remember about you (2):")
    assert f"\n#{cat} Alice's cat is called Mochi  (told in group {group}," in reply
    assert f"\n#{berlin} Alice is moving to Berlin in March  (told in a private chat," in reply
    assert "marsho.memory forget <number>" in reply


async def test_in_a_group_a_listing_shows_only_what_was_told_in_groups_and_counts_the_rest(
        app: App, memories: MemoryStore) -> None:
    alice, group, other = next(_people), next(_groups), next(_groups)
    await remember(memories, alice, "Alice's cat is called Mochi", group=group)
    await remember(memories, alice, "Alice plays chess", group=other)
    await remember(memories, alice, "Alice is moving to Berlin in March")
    reply = await reply_to(app, group_message("marsho.memory", user_id=alice, group_id=group))
    assert "Alice's cat is called Mochi  (told in this group," in reply
    assert "Alice plays chess  (told in another group," in reply and str(other) not in reply
    assert "Berlin" not in reply  # the others in the group read this reply
    assert "1 more are not listed here (told in a private chat" in reply


async def test_forget_a_number_deletes_that_memory_at_once(app: App, memories: MemoryStore) -> None:
    alice = next(_people)
    ids = [await remember(memories, alice, fact) for fact in ("likes tea", "plays the cello", "lives in Hangzhou")]
    reply = await reply_to(app, private_message(f"marsho.memory forget {ids[1]}", user_id=alice))
    assert reply == f"Forgotten: #{ids[1]} plays the cello"
    assert texts(await memories.of_owner("user", f"{P}:{alice}")) == ["likes tea", "lives in Hangzhou"]
    sight = Sight(f"{P}:{alice}", f"{P}:private:{alice}")
    assert await memories.search(sight, "cello", limit=5) == []


async def test_forget_all_in_a_group_leaves_the_private_ones_to_a_private_chat(
        app: App, memories: MemoryStore) -> None:
    alice, group = next(_people), next(_groups)
    await remember(memories, alice, "Alice's cat is called Mochi", group=group)
    await remember(memories, alice, "Alice plays chess", group=next(_groups))
    await remember(memories, alice, "Alice is moving to Berlin in March")
    reply = await reply_to(app, group_message("marsho.memory forget all", user_id=alice, group_id=group))
    assert reply.startswith("Forgotten: 2 memories.")
    assert "1 more are not listed here (told in a private chat" in reply
    assert texts(await memories.of_owner("user", f"{P}:{alice}")) == ["Alice is moving to Berlin in March"]
    reply = await reply_to(app, private_message("marsho.memory forget all", user_id=alice))
    assert reply == "Forgotten: 1 memory."
    assert await memories.of_owner("user", f"{P}:{alice}") == []
    reply = await reply_to(app, private_message("marsho.memory", user_id=alice))
    assert reply.startswith("I remember nothing about you here.")


async def test_a_number_not_in_the_list_is_refused_and_nothing_is_deleted(app: App, memories: MemoryStore) -> None:
    alice, bob, group = next(_people), next(_people), next(_groups)
    private = await remember(memories, alice, "told in private")
    await remember(memories, alice, "told in the group", group=group)
    bobs = await remember(memories, bob, "Bob's fact", group=group)
    # in the group the list holds the one told there: the private one is not to be had here,
    # nor anyone else's
    for number in (private, bobs, 0, 99999999):
        reply = await reply_to(app, group_message(f"marsho.memory forget {number}", user_id=alice, group_id=group))
        assert reply == f"There is no memory #{number} in the list (marsho.memory shows it, each with its number)."
    assert len(await memories.of_owner("user", f"{P}:{alice}")) == 2
    assert len(await memories.of_owner("user", f"{P}:{bob}")) == 1
    for bad in ("marsho.memory forget two", "marsho.memory forget", "marsho.memory wipe 1",
                "marsho.memory forget -1", "marsho.memory forget " + "9" * 30):
        reply = await reply_to(app, private_message(bad, user_id=alice))
        assert reply.startswith("Write marsho.memory, marsho.memory forget <number>"), bad
    assert len(await memories.of_owner("user", f"{P}:{alice}")) == 2


async def test_nobody_sees_or_deletes_another_persons_memories_without_being_a_superuser(
        app: App, memories: MemoryStore) -> None:
    alice, bob, group = next(_people), next(_people), next(_groups)
    await remember(memories, alice, "Alice's cat is called Mochi", group=group)
    reply = await reply_to(app, group_message("marsho.memory", user_id=bob, group_id=group))
    assert "Mochi" not in reply and reply.startswith("I remember nothing about you here.")
    for attempt in (f"marsho.memory of {alice}", f"marsho.memory of {alice} forget all"):
        reply = await reply_to(app, group_message(attempt, user_id=bob, group_id=group, role="admin"))
        assert reply.startswith("Only superusers may look at or delete someone else's memories")
    assert len(await memories.of_owner("user", f"{P}:{alice}")) == 1


async def test_a_superuser_inspects_and_deletes_anyones(app: App, memories: MemoryStore) -> None:
    alice, group = next(_people), next(_groups)
    await remember(memories, alice, "Alice's cat is called Mochi", group=group)
    await remember(memories, alice, "Alice is moving to Berlin in March")
    owner = int(SUPERUSER_ID)
    reply = await reply_to(app, private_message(f"marsho.memory of {alice}", user_id=owner))
    assert reply.startswith(f"What I remember about user {alice} (2):")
    assert "Mochi" in reply and "Berlin" in reply
    # in a group, even a superuser's listing leaves out what was told in private
    reply = await reply_to(app, group_message(f"marsho.memory of {alice}", user_id=owner, group_id=group))
    assert "Mochi" in reply and "Berlin" not in reply
    berlin = (await memories.of_owner("user", f"{P}:{alice}"))[1].id
    reply = await reply_to(app, private_message(f"marsho.memory of {alice} forget {berlin}", user_id=owner))
    assert reply == f"Forgotten: #{berlin} Alice is moving to Berlin in March"
    reply = await reply_to(app, private_message(f"marsho.memory of {alice} forget all", user_id=owner))
    assert reply == "Forgotten: 1 memory."
    assert await memories.of_owner("user", f"{P}:{alice}") == []


async def test_anyone_in_a_group_lists_its_memories_and_only_admins_delete_them(
        app: App, memories: MemoryStore) -> None:
    member, admin, group, other = next(_people), next(_people), next(_groups), next(_groups)
    minecraft = await remember_group(memories, group, "This group plays Minecraft on Fridays")
    await remember_group(memories, group, "The group's mascot is a red panda", author=member)
    await remember_group(memories, other, "Another group's secret handshake")
    reply = await reply_to(app, group_message("marsho.memory group", user_id=member, group_id=group))
    assert reply.startswith(f"What I remember about this group ({group}, 2):")
    assert "Minecraft" in reply and "handshake" not in reply
    assert f"The group's mascot is a red panda  (told by {member}, " in reply  # admins see who told what
    forget = f"marsho.memory group forget {minecraft}"
    reply = await reply_to(app, group_message(forget, user_id=member, group_id=group))
    assert reply == "Only group admins and owners may delete this group's memories."
    assert len(await memories.of_owner("group", f"{P}:group:{group}")) == 2
    reply = await reply_to(app, group_message(forget, user_id=admin, group_id=group, role="admin"))
    assert reply == f"Forgotten: #{minecraft} This group plays Minecraft on Fridays"
    reply = await reply_to(app, group_message("marsho.memory group forget all", user_id=admin, group_id=group,
                                              role="owner"))
    assert reply == "Forgotten: 1 memory."
    assert texts(await memories.of_owner("group", f"{P}:group:{other}")) == ["Another group's secret handshake"]


async def test_the_teller_of_a_group_memory_is_shown_whole_even_with_colons_in_the_id(
        app: App, memories: MemoryStore) -> None:
    member, group = next(_people), next(_groups)
    await memories.add("group", f"{P}:group:{group}", "Raid on Saturday", learned_in=f"{P}:group:{group}",
                       private=False, author=f"{P}:@alice:matrix.org", limit=50)  # a Matrix id
    reply = await reply_to(app, group_message("marsho.memory group", user_id=member, group_id=group))
    assert "Raid on Saturday  (told by @alice:matrix.org, " in reply


async def test_group_memories_are_named_by_id_only_by_superusers(app: App, memories: MemoryStore) -> None:
    member, group = next(_people), next(_groups)
    await remember_group(memories, group, "This group plays Minecraft on Fridays", author=member)
    reply = await reply_to(app, private_message("marsho.memory group", user_id=member))
    assert reply == "marsho.memory group is about the group it is sent in; send it there."
    reply = await reply_to(app, private_message(f"marsho.memory group {group}", user_id=member))
    assert reply.startswith("Only superusers may look at or delete someone else's memories")
    owner = int(SUPERUSER_ID)
    reply = await reply_to(app, private_message(f"marsho.memory group {group}", user_id=owner))
    assert reply.startswith(f"What I remember about group {group} (1):")
    assert f"This group plays Minecraft on Fridays  (told by {member}," in reply  # who, for who floods
    assert f"Delete one: marsho.memory group {group} forget <number>;" in reply  # the command that works
    reply = await reply_to(app, private_message(f"marsho.memory group {group} forget all", user_id=owner))
    assert reply == "Forgotten: 1 memory."
    assert await memories.of_owner("group", f"{P}:group:{group}") == []


async def test_the_help_names_the_memory_command(app: App, memories: MemoryStore) -> None:
    reply = await reply_to(app, private_message("marsho.help", user_id=next(_people)))
    assert "marsho.memory &#91;forget <number>|all&#93;  what I remember about you" in reply  # CQ-escaped


async def test_the_number_read_is_the_memory_deleted_even_when_others_came_and_went(
        app: App, memories: MemoryStore) -> None:
    alice, group = next(_people), next(_groups)
    ids = [await remember(memories, alice, f"fact {n}", limit=3) for n in range(3)]
    await reply_to(app, private_message("marsho.memory", user_id=alice))
    await remember(memories, alice, "fact 3", group=group, limit=3)  # pushes out fact 0 meanwhile
    reply = await reply_to(app, private_message(f"marsho.memory forget {ids[1]}", user_id=alice))
    assert reply == f"Forgotten: #{ids[1]} fact 1"
    assert texts(await memories.of_owner("user", f"{P}:{alice}")) == ["fact 2", "fact 3"]


async def test_full_width_digits_name_a_memory_too(app: App, memories: MemoryStore) -> None:
    alice = next(_people)
    memory = await remember(memories, alice, "likes tea")
    wide = "".join(chr(ord(c) + 0xFEE0) for c in str(memory))  # typed on a Chinese keyboard
    reply = await reply_to(app, private_message(f"marsho.memory forget {wide}", user_id=alice))
    assert reply == f"Forgotten: #{memory} likes tea"


async def test_memories_unused_for_memory_days_are_gone_from_the_listing(
        app: App, memories: MemoryStore) -> None:
    alice = next(_people)
    await memories.add("user", f"{P}:{alice}", "an old fact", learned_in=f"{P}:private:{alice}", private=True,
                       author=f"{P}:{alice}", limit=50, now=time.time() - 40 * 86400)
    await remember(memories, alice, "a fresh fact")
    with configured(marsho_memory_days=30):
        reply = await reply_to(app, private_message("marsho.memory", user_id=alice))
    assert "a fresh fact" in reply and "an old fact" not in reply
    assert texts(await memories.of_owner("user", f"{P}:{alice}")) == ["a fresh fact"]


async def test_imported_memories_say_so_in_the_listing(app: App, memories: MemoryStore) -> None:
    from nonebot_plugin_marsho.store.memory import IMPORTED

    alice = next(_people)
    await memories.add("user", f"{P}:{alice}", "likes rain", learned_in=f"{P}:private:{alice}", private=True,
                       author=IMPORTED, limit=50)
    reply = await reply_to(app, private_message("marsho.memory", user_id=alice))
    assert "likes rain  (imported, " in reply
