"""Memory against the paths a review found around its rules: a OneBot v11 temporary chat, anonymous
members, unsolicited replies, MARSHO_MEMORY_SCOPE=chat listings, parallel remembers on
PostgreSQL, MARSHO_MEMORY_DAYS, text that cannot be stored, the who-has-memories list, and
hostile import files."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import Adapter

from nonebot_plugin_marsho.agent.memory import MemoryBook
from nonebot_plugin_marsho.store.memory import MemoryStore, Sight, search_terms
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.onebot import group_message
from tests.test_cli import make_project, marsho
from tests.test_group_context import postgres, store_url  # noqa: F401 - fixtures
from tests.test_memory import (  # noqa: F401 - _fresh_uninfo (autouse) and store: fixtures
    ALICE,
    BOB,
    GROUP_A,
    GROUP_B,
    MEMORY_LABEL,
    _fresh_uninfo,
    _results,
    ask,
    onebot,
    question_of,
    remember,
    sent,
    store,
)
from tests.test_memory_command import memories, reply_to  # noqa: F401 - a fixture
from tests.test_platforms import say

P = "OneBot V11"


def v11(payload: dict[str, Any]) -> Any:
    """An event as the OneBot v11 adapter reads it off the wire."""
    return Adapter.json_to_event({"time": int(time.time()), "self_id": 42, "post_type": "message",
                                  "font": 0, **payload})


async def test_a_onebot_v11_temporary_chat_from_a_group_is_a_private_chat(
        app: Any, fake: FakeOpenAI, book: MemoryBook, plugin_engine: Any) -> None:
    # NapCat and LLOneBot send a temporary chat started from a group as message_type "private",
    # sub_type "group", with that group's id
    words = "marsho I have the flu, keep it between us"
    event = v11({"message_type": "private", "sub_type": "group", "message_id": 777001,
                 "user_id": int(ALICE), "group_id": int(GROUP_A), "temp_source": 0,
                 "message": [{"type": "text", "data": {"text": words}}], "raw_message": words,
                 "sender": {"user_id": int(ALICE), "nickname": "alice", "group_id": int(GROUP_A)}})
    fake.push(remember("They have the flu"))
    fake.push(text("ok"))
    await onebot(GROUP_A).bot.handle_event(event)
    [memory] = await book.store.of_owner("user", f"{P}:{ALICE}")
    assert (memory.private, memory.learned_in) == (True, f"{P}:private:{ALICE}")
    assert await plugin_engine.history.export(f"{P}:group:{GROUP_A}") == []
    assert len(await plugin_engine.history.export(f"{P}:private:{ALICE}")) == 4
    for group in (GROUP_A, GROUP_B):
        asked = await ask(fake, onebot(group), "group", "do I have the flu?")
        assert "flu" not in sent(asked).replace("do I have the flu?", "")


def anonymous(group: str, alias: int, words: str) -> Any:
    """A QQ group's anonymous message: every anonymous member has the same user id."""
    return v11({"message_type": "group", "sub_type": "anonymous", "message_id": alias * 7,
                "user_id": 80000000, "group_id": int(group),
                "anonymous": {"id": alias, "name": f"anon{alias}", "flag": f"flag{alias}"},
                "message": [{"type": "text", "data": {"text": words}}], "raw_message": words,
                "sender": {"user_id": 80000000, "nickname": "匿名消息", "role": "member"}})


async def test_anonymous_members_are_nobody_memory_keeps_nothing_for_them(
        app: Any, fake: FakeOpenAI, book: MemoryBook) -> None:
    before = len(fake.requests)
    fake.push(remember("Their bank PIN hint is the dog's name"))
    fake.push(text("ok"))
    await onebot(GROUP_A).bot.handle_event(anonymous(GROUP_A, 111, "marsho my PIN hint is the dog's name"))
    assert "Nothing is remembered about this person here" in _results(fake.requests[before:])[0]
    assert await book.store.owners() == set()
    # a memory the shared anonymous id may already have is offered to no anonymous member
    await book.store.add("user", f"{P}:80000000", "Their bank PIN hint is the dog's name",
                         learned_in=f"{P}:group:{GROUP_A}", private=False, author=f"{P}:80000000", limit=50)
    book._owners = None
    before = len(fake.requests)
    fake.push(text("ok"))
    await onebot(GROUP_B).bot.handle_event(anonymous(GROUP_B, 222, "marsho what is my bank PIN hint?"))
    assert "dog's name" not in sent(fake.requests[before:])


async def test_an_anonymous_member_cannot_forget_what_another_anonymous_member_told_the_group(
        app: Any, fake: FakeOpenAI, book: MemoryBook) -> None:
    fake.push(remember("The group's raid is on Saturday", about="group"))
    fake.push(text("ok"))
    await onebot(GROUP_A).bot.handle_event(anonymous(GROUP_A, 111, "marsho remember our raid day"))
    [kept] = await book.store.of_owner("group", f"{P}:group:{GROUP_A}")
    assert kept.author == ""  # nobody's: anonymous members cannot be told apart
    before = len(fake.requests)
    fake.push(tool_calls(("memory__forget", {"memory_id": kept.id}, "call_anon_forget")))
    fake.push(text("ok"))
    await onebot(GROUP_A).bot.handle_event(anonymous(GROUP_A, 222, "marsho forget the raid day"))
    assert _results(fake.requests[before:])[0].startswith(f"Error: Memory #{kept.id} belongs to the group")
    assert [m.id for m in await book.store.of_owner("group", f"{P}:group:{GROUP_A}")] == [kept.id]


async def test_an_unsolicited_reply_uses_only_the_groups_memories_not_the_speakers(
        app: Any, fake: FakeOpenAI, book: MemoryBook, plugin_engine: Any) -> None:
    await ask(fake, onebot(GROUP_A), "group", "I am job hunting, keep it quiet",
              remember("They are job hunting secretly"))
    elsewhere = onebot("90777")
    await ask(fake, elsewhere, "group", "we meet on Fridays", remember("The group's job fair is on Friday",
                                                                       about="group"), user_id=BOB)
    with configured(marsho_active_cooldown=0) as bot:
        await say(elsewhere, elsewhere.group_event("marsho.active 1", user_id="10501", name="Ada", role="admin"))
        before = len(fake.requests)
        fake.push(remember("They hate their job"))
        fake.push(text("reply"))
        # Alice chats in another group without addressing marsho
        await say(elsewhere, elsewhere.group_event("ugh, my job is boring today", user_id=ALICE, name="Alice"))
        await bot.active.settled()
    requests = fake.requests[before:]
    assert len(requests) == 2, "the unsolicited reply was not made"
    assert "job hunting" not in sent(requests)
    assert "The group's job fair is on Friday" in question_of(requests[0])  # the group's own: yes
    assert "Nothing is remembered about this person here" in _results(requests)[0]
    assert [m.text for m in await book.store.of_owner("user", f"{P}:{ALICE}")] == ["They are job hunting secretly"]


async def test_under_scope_chat_a_group_listing_shows_only_what_was_told_in_that_group(
        app: Any, memories: MemoryStore) -> None:  # noqa: F811 - the fixture
    await memories.add("user", f"{P}:50001", "Is job hunting, do not tell the boss", learned_in=f"{P}:group:1",
                       private=False, author=f"{P}:50001", limit=50)
    await memories.add("user", f"{P}:50001", "Plays the cello", learned_in=f"{P}:group:2",
                       private=False, author=f"{P}:50001", limit=50)
    with configured(marsho_memory_scope="chat"):
        reply = await reply_to(app, group_message("marsho.memory", user_id=50001, group_id=2))
        assert "cello" in reply and "job hunting" not in reply
        assert "1 more are not listed here" in reply
        reply = await reply_to(app, group_message("marsho.memory forget all", user_id=50001, group_id=2))
        assert reply.startswith("Forgotten: 1 memory.")
    assert [m.text for m in await memories.of_owner("user", f"{P}:50001")] == [
        "Is job hunting, do not tell the boss"]


# the store under pressure ---------------------------------------------------------------------------


async def test_parallel_remembers_keep_the_limit_and_never_twice(store: MemoryStore) -> None:  # noqa: F811 - the fixture
    owner = f"{P}:{ALICE}"

    async def add(fact: str) -> Any:
        return await store.add("user", owner, fact, learned_in=f"{P}:private:{ALICE}", private=True,
                               author=owner, limit=3)

    await asyncio.gather(*[add(f"They like fruit number {n}") for n in range(6)],
                         add("They like tea"), add("They like tea"), add("they LIKE  tea"))
    kept = [memory.text for memory in await store.of_owner("user", owner)]
    assert len(kept) == 3
    assert sum("tea" in fact.casefold() for fact in kept) <= 1


async def test_memories_unused_for_memory_days_are_neither_found_nor_kept_fresh(store: MemoryStore) -> None:  # noqa: F811 - the fixture
    owner, chat = f"{P}:{ALICE}", f"{P}:private:{ALICE}"
    old = time.time() - 400 * 86400
    await store.add("user", owner, "Their cat is called Mochi", learned_in=chat, private=True, author=owner,
                    limit=50, now=old)
    sight = Sight(owner, chat, fresh_after=time.time() - 30 * 86400)
    assert await store.search(sight, "cat", limit=5) == []
    assert await store.visible(sight) == []
    assert [m.used_at for m in await store.of_owner("user", owner)] == [old]  # not refreshed by a look
    assert await store.expire(30) == 1
    assert await store.of_owner("user", owner) == []


async def test_text_no_database_can_store_is_cleaned_not_an_outage(
        app: Any, fake: FakeOpenAI, book: MemoryBook) -> None:
    asked = await ask(fake, onebot(), "private", "remember", remember("They like \ud800 tea\x00 and cake"))
    assert _results(asked)[0].startswith("Remembered as #")
    assert [m.text for m in await book.store.of_owner("user", f"{P}:{ALICE}")] == ["They like \ufffd tea and cake"]


async def test_a_memory_kept_while_the_list_of_owners_is_read_is_not_lost(
        book: MemoryBook, monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_marsho.tools.model import ToolContext

    context = ToolContext(session_key="s", user_id=ALICE, platform=P, chat_key=f"{P}:private:{ALICE}")
    await book.note(context, "hello there")  # the list is read: nobody
    read, release = asyncio.Event(), asyncio.Event()
    owners = book.store.owners

    async def slow_owners() -> Any:
        found = await owners()
        read.set()
        await release.wait()  # read before the memory below is kept, answered after
        return found

    monkeypatch.setattr(book.store, "owners", slow_owners)
    book._owners_read = 0.0  # due: the next note reads it again in the background
    await book.note(context, "hello again")
    assert book._reading is not None
    await read.wait()
    await book.remember(context, "Their cat is called Mochi")
    release.set()
    await book.settled()
    assert "Mochi" in await book.note(context, "what is my cat called?")


def test_words_keep_their_combining_marks() -> None:
    # Devanagari vowel signs are not \\w: "है" must not become letters that match other words
    assert search_terms("उसे चाय पसंद है") == "उसे चाय पसंद है"
    assert search_terms("我的猫叫Mochi café") == "我的 的猫 猫叫 我 的 猫 叫 mochi café"


def test_hostile_import_files_are_named_not_crashed_on(tmp_path: Path) -> None:
    folder = make_project(tmp_path / "bot", [])
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    done = marsho(folder, "import-memory", "deep.json")
    assert done.returncode == 1 and "error: deep.json: nested too deeply" in done.stderr
    (folder / "odd.json").write_text(json.dumps(
        {"10001": ["bad \ud800 text", "nul\x00byte"], "OneBot V11:group:1": ["a key shaped like a group"]}),
        encoding="utf-8")
    done = marsho(folder, "import-memory", "odd.json")
    assert done.returncode == 1
    assert "'OneBot V11:group:1' is not a user id" in done.stderr
    assert done.stdout.startswith("Imported 2 memories of 1 person")


async def test_a_word_of_one_chinese_character_finds_its_memory(store: MemoryStore) -> None:  # noqa: F811 - the fixture
    owner, chat = f"{P}:{ALICE}", f"{P}:private:{ALICE}"
    await store.add("user", owner, "养了一只猫叫年糕", learned_in=chat, private=True, author=owner, limit=50)
    sight = Sight(owner, chat)
    for query in ("猫", "我的猫呢", "年糕"):
        assert [m.text for m in await store.search(sight, query, limit=5)] == ["养了一只猫叫年糕"], query
    assert await store.search(sight, "狗", limit=5) == []
