"""`python -m nonebot_plugin_marsho import-memory <path>`: nonebot-plugin-marshoai's memories
(its memory toolkit's `memory.json`: `{"<user id>": ["memory", ...]}`) imported once into marsho's
memory, as the owner runs it: a real subprocess in a bot folder with a `.env`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nonebot_plugin_marsho.store.memory import MemoryStore, Sight
from nonebot_plugin_marsho.store.sql import SqlStore
from tests.test_cli import make_project, marsho

P = "OneBot V11"

pytestmark = pytest.mark.timeout(300)  # several CLI processes a test: 55 s for one at a load of 15

MARSHOAI_MEMORY = {
    "10001": ["[2025-01-02] [preference] 喜欢吃鱼", "Has a cat named Mochi"],
    "10002": ["Works night shifts at the hospital"],
}


def bot_folder(tmp_path: Path, memory: object = MARSHOAI_MEMORY, **settings: str) -> Path:
    folder = make_project(tmp_path / "bot", [], **settings)
    data = folder / "marshoai-data"
    data.mkdir()
    (data / "memory.json").write_text(json.dumps(memory, ensure_ascii=False), encoding="utf-8")
    return folder


async def kept(folder: Path) -> MemoryStore:
    store = SqlStore(f"sqlite:///{folder / 'data' / 'nonebot_plugin_marsho' / 'marsho.db'}")
    return MemoryStore(store)


async def test_imported_memories_are_kept_for_each_person_and_used_only_in_their_private_chat(
        tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    done = marsho(folder, "import-memory", "marshoai-data/memory.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Imported 3 memories of 2 people on OneBot V11 from marshoai-data/memory.json.")
    assert "only in each person's private chat" in done.stdout
    memories = await kept(folder)
    try:
        alice = await memories.of_owner("user", f"{P}:10001")
        assert [m.text for m in alice] == ["[2025-01-02] [preference] 喜欢吃鱼", "Has a cat named Mochi"]
        assert all(m.private and m.learned_in == f"{P}:private:10001" for m in alice)
        private = Sight(f"{P}:10001", f"{P}:private:10001")
        group = Sight(f"{P}:10001", f"{P}:group:1", f"{P}:group:1")
        assert [m.text for m in await memories.search(private, "what is my cat called", limit=5)] == [
            "Has a cat named Mochi"]
        assert [m.text for m in await memories.search(private, "我喜欢吃什么", limit=5)] == [
            "[2025-01-02] [preference] 喜欢吃鱼"]
        assert await memories.search(group, "what is my cat called", limit=5) == []
        assert await memories.visible(group) == []
        other = Sight(f"{P}:10002", f"{P}:private:10002")
        assert [m.text for m in await memories.visible(other)] == ["Works night shifts at the hospital"]
    finally:
        await memories.store.close()


async def test_importing_again_keeps_nothing_twice(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    assert marsho(folder, "import-memory", "marshoai-data").returncode == 0  # the folder holding it
    again = marsho(folder, "import-memory", "marshoai-data")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Imported 0 memories of 2 people on OneBot V11 from "
                                   "marshoai-data/memory.json; 3 were already kept.")
    memories = await kept(folder)
    try:
        assert await memories.count("user", f"{P}:10001") == 2
    finally:
        await memories.store.close()


async def test_from_groups_makes_them_usable_in_the_persons_groups_too(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    done = marsho(folder, "import-memory", "marshoai-data/memory.json", "--from-groups")
    assert done.returncode == 0, done.stderr
    assert "used in the groups of each person and in their private chat" in done.stdout
    memories = await kept(folder)
    try:
        group = Sight(f"{P}:10001", f"{P}:group:1", f"{P}:group:1")
        assert [m.text for m in await memories.search(group, "cat", limit=5)] == ["Has a cat named Mochi"]
        stranger = Sight(f"{P}:10003", f"{P}:group:1", f"{P}:group:1")
        assert await memories.search(stranger, "cat", limit=5) == []
    finally:
        await memories.store.close()


async def test_limits_apply_to_imports_the_newest_are_kept_and_long_ones_cut(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path, {"10001": [f"fact number {n}" for n in range(5)] + ["x" * 100]},
                        MARSHO_MEMORY_PER_USER="3", MARSHO_MEMORY_CHARS="40")
    done = marsho(folder, "import-memory", "marshoai-data/memory.json", "--platform", "Telegram")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "Imported 3 memories of 1 person on Telegram from marshoai-data/memory.json; 1 cut to "
        "MARSHO_MEMORY_CHARS=40 characters; 3 older ones left out by MARSHO_MEMORY_PER_USER=3.")
    memories = await kept(folder)
    try:
        assert [m.text for m in await memories.of_owner("user", "Telegram:10001")] == [
            "fact number 3", "fact number 4", "x" * 39 + "…"]
    finally:
        await memories.store.close()


async def test_what_cannot_be_read_is_named_and_the_rest_imported(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path, {"10001": ["ok", 5, ""], "not an id": ["x"], "10003": {"a": 1}})
    done = marsho(folder, "import-memory", "marshoai-data/memory.json")
    assert done.returncode == 1
    assert done.stdout.startswith("Imported 1 memory of 1 person")
    problems = [line for line in done.stderr.splitlines() if line.startswith("! ")]
    assert problems == [
        "! marshoai-data/memory.json: '10001'[1]: not a text; skipped",
        "! marshoai-data/memory.json: '10001'[2]: not a text; skipped",
        "! marshoai-data/memory.json: 'not an id' is not a user id; its memories were skipped",
        "! marshoai-data/memory.json: '10003': expected a list of memories, found dict; skipped",
    ]


async def test_a_file_that_is_not_marshoais_is_refused_with_where_and_why(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    (folder / "broken.json").write_text('{"10001": ["a",]', encoding="utf-8")
    (folder / "list.json").write_text('["a", "b"]', encoding="utf-8")
    for name, error in [
        ("missing.json", "error: missing.json: no such file (marshoai keeps it as memory.json in its data folder)"),
        ("broken.json", "error: broken.json: not JSON: Expecting value at line 1, column 16"),
        ("list.json", "error: list.json: expected an object of user ids, each with a list of memories, "
                      "found list"),
    ]:
        done = marsho(folder, "import-memory", name)
        assert done.returncode == 1
        assert error in done.stderr, done.stderr
        assert done.stdout == ""
    assert not (folder / "data" / "nonebot_plugin_marsho" / "marsho.db").exists()  # nothing was opened


async def test_from_groups_after_a_private_import_moves_the_memories_not_copies_them(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    assert marsho(folder, "import-memory", "marshoai-data").returncode == 0
    done = marsho(folder, "import-memory", "marshoai-data", "--from-groups")
    assert done.returncode == 0, done.stderr
    assert "3 imported before for private chats only now used in groups too" in done.stdout
    memories = await kept(folder)
    try:
        alice = await memories.of_owner("user", f"{P}:10001")
        assert [(m.text, m.private) for m in alice] == [("[2025-01-02] [preference] 喜欢吃鱼", False),
                                                        ("Has a cat named Mochi", False)]
    finally:
        await memories.store.close()


def test_a_broken_env_imports_nothing_and_says_why(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path, MARSHO_MEMORY_SCOPE="foo")
    done = marsho(folder, "import-memory", "marshoai-data")
    assert done.returncode == 1
    assert "MARSHO_MEMORY_SCOPE" in done.stderr and "Fix .env first: nothing was imported." in done.stderr
    assert not (folder / "data" / "nonebot_plugin_marsho" / "marsho.db").exists()


def test_the_cli_checks_the_memory_tools_as_the_bot_offers_them(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    done = marsho(folder, "tools")
    assert done.returncode == 0, done.stderr
    assert "✓ memory  (built-in)\n    memory__remember: Keep a lasting fact for later conversations." in done.stdout
    called = marsho(folder, "call", "memory__recall", "{}")
    assert called.returncode == 1
    assert called.stdout.startswith("Error: Memory is kept only in chats")
    off = bot_folder(tmp_path / "off", MARSHO_MEMORY="false")
    assert "memory__remember" not in marsho(off, "tools").stdout


def test_a_platform_no_installed_adapter_has_is_refused_with_the_names_there_are(tmp_path: Path) -> None:
    folder = bot_folder(tmp_path)
    done = marsho(folder, "import-memory", "marshoai-data", "--platform", "telegram")
    assert done.returncode == 1
    assert ("error: --platform 'telegram' is not the name of an installed adapter (did you mean 'Telegram'?). "
            "Installed: ") in done.stderr, done.stderr
    assert "OneBot V11, OneBot V12, QQ, Satori, Telegram" in done.stderr
    assert "Nothing was imported." in done.stderr
    assert not (folder / "data" / "nonebot_plugin_marsho" / "marsho.db").exists()
    done = marsho(folder, "import-memory", "marshoai-data", "--platform", "Satori/Discord")
    assert done.returncode == 1
    assert ("error: --platform 'Satori/Discord': a Satori server names its platforms in lower case, without "
            "spaces (Satori/discord, Satori/qq) (did you mean 'Satori/discord'?). Nothing was imported.") in done.stderr
    done = marsho(folder, "import-memory", "marshoai-data", "--platform", "Satori/discord")
    assert done.returncode == 0, done.stderr
    assert "of 2 people on Satori/discord" in done.stdout
