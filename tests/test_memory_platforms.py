"""Memory scopes on every adapter of the platform matrix (issue 18 with issue 14): what a person
told marsho in private never reaches a group's or channel's request, and a group's memories stay
in that group (or guild channel), through each adapter's own events and Bot.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nonebot_plugin_marsho.agent.memory import MemoryBook
from tests.fake_openai import FakeOpenAI
from tests.platforms import PLATFORMS, Chat, forget_uninfo_sessions
from tests.test_memory import MEMORY_LABEL, _results, ask, question_of, recall, remember, sent
from tests.test_platforms import CELLS, PAIRS, SHARED_CELLS

OTHER_USER = "55443322"


@pytest.fixture(autouse=True)
def _fresh_uninfo() -> Iterator[None]:
    forget_uninfo_sessions()
    yield
    forget_uninfo_sessions()


def another(value: str) -> str:
    """Another id of the same shape."""
    return value[:-1] + ("7" if value[-1] != "7" else "8")


def move_to_another(chat: Chat, where: str) -> None:
    """The chat's next `where` events come from another group (or another channel of the guild)."""
    if where == "group":
        chat.group_id = another(chat.group_id)
    else:
        chat.channel_id = another(chat.channel_id)


@pytest.mark.parametrize(("name", "shared", "private"), PAIRS)
async def test_what_is_told_in_private_is_in_no_groups_request(
    app, fake: FakeOpenAI, book: MemoryBook, name: str, shared: str, private: str
) -> None:
    chat = PLATFORMS[name]()
    await ask(fake, chat, private, "I have the flu", remember("They have the flu"), user_id=None)
    assert "They have the flu" in question_of((await ask(fake, chat, private, "do I have the flu?",
                                                         user_id=None))[0])
    for user in (None, OTHER_USER):
        asked = await ask(fake, chat, shared, "do I have the flu?", recall("flu"), recall(""), user_id=user)
        assert "They have the flu" not in sent(asked), (name, shared, user)


@pytest.mark.parametrize(("name", "where"), SHARED_CELLS)
async def test_a_groups_memories_stay_in_that_group(
    app, fake: FakeOpenAI, book: MemoryBook, name: str, where: str
) -> None:
    chat = PLATFORMS[name]()
    await ask(fake, chat, where, "we meet on Fridays", remember("The group meets on Fridays", "group"),
              user_id=None)
    asked = await ask(fake, chat, where, "when do we meet?", user_id=OTHER_USER)
    assert "The group meets on Fridays" in question_of(asked[0]), name
    move_to_another(chat, where)
    for user in (None, OTHER_USER):
        asked = await ask(fake, chat, where, "when do we meet?", recall("meet"), user_id=user)
        assert "Fridays" not in sent(asked), (name, where, user)


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_each_scene_remembers_its_asker(
    app, fake: FakeOpenAI, book: MemoryBook, name: str, where: str
) -> None:
    """Everywhere, a fact about the asker is theirs (the asker's own key), and another member of
    the same chat is never offered it."""
    chat = PLATFORMS[name]()
    told = await ask(fake, chat, where, "my cat is called Mochi", remember("Their cat is called Mochi"),
                     user_id=None)
    assert _results(told) == ["Remembered as #1 (about the person asking)."]
    memory = await book.store.get(1)
    assert memory is not None and memory.about == "user" and memory.owner.startswith(f"{chat.key_prefix}:")
    assert memory.private is (where in ("private", "dms"))
    asked = await ask(fake, chat, where, "what is my cat called?", user_id=None)
    assert MEMORY_LABEL in question_of(asked[0])
    asked = await ask(fake, chat, where, "what is my cat called?", recall("cat"), user_id=OTHER_USER)
    assert MEMORY_LABEL not in question_of(asked[0]) and "Mochi" not in _results(asked)[0], (name, where)
