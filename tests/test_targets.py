"""Speaking later (issue 23, item 5): a chat's nonebot-plugin-alconna Target, remembered from a
question, is in the database after a restart (SQLite and PostgreSQL), and a message sent to the
chat's key later, outside any handler, reaches that chat through the adapter's own send API on
every platform; without a connected bot, or for a chat never answered, the error says so; an
unsolicited reply goes out the same way, without quoting; repeated questions cost no writes.

Events are the adapters' own (tests/platforms.py); bots are connected to NoneBot as an adapter
connects them, and record every API call.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from nonebot.adapters import Event
from nonebot.adapters.onebot.v11.exception import ActionFailed
from nonebot_plugin_alconna.uniseg import Target
from sqlalchemy import event as sql_event

from nonebot_plugin_marsho.chat.outgoing import Delivery, send_answer
from nonebot_plugin_marsho.chat.targets import SEEN_EVERY, SendError, TargetBook, target_of
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.store.targets import TargetStore
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.platforms import PLATFORMS, Chat, forget_uninfo_sessions
from tests.postgres_server import PostgresServer
from tests.test_platforms import say
from tests.test_postgres import start_postgres

CELLS = [pytest.param(name, where, id=f"{name}-{where}")
         for name, chat in PLATFORMS.items() for where in chat.wheres]
_databases = itertools.count(1)
_groups = itertools.count(93001)


@pytest.fixture(autouse=True)
def _fresh_uninfo() -> Iterator[None]:
    forget_uninfo_sessions()
    yield
    forget_uninfo_sessions()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty database: an SQLite file, or one on the throw-away PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'marsho.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database(f"marsho_targets_{os.getpid()}_{next(_databases)}")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'marsho.db'}"


@pytest.fixture
async def opened() -> AsyncIterator[Any]:
    """`opened(url)`: a SqlStore on `url`, closed when the test ends (a restart closes one and
    opens another on the same database)."""
    stores: list[SqlStore] = []

    def open_store(url: str) -> SqlStore:
        stores.append(SqlStore(url))
        return stores[-1]

    yield open_store
    for store in stores:
        await store.close()


DIRECT_CHANNELS: dict[str, tuple[str, Any]] = {
    "QQ": ("post_dms", {"guild_id": "8880001", "channel_id": "8880002", "create_time": 0}),
    "Discord": ("create_DM", {"id": "1300000000000000999", "type": 1}),
    "Satori": ("user_channel_create", {"id": "private:10001", "type": 1}),
}
"""What each platform answers when a bot opens a direct chat with a person, which a message sent
to a person (not in reply to them) starts with: tests/platforms.py's fakes only reply."""


def opens_direct_chats(chat: Chat) -> None:
    """The chat's platform also answers the call that opens a direct chat (DIRECT_CHANNELS)."""
    answer = chat.answer
    opening = DIRECT_CHANNELS.get(chat.adapter_name)

    def answer_too(api: str, data: dict[str, Any]) -> Any:
        if opening is not None and api == opening[0]:
            return opening[1]
        if chat.adapter_name == "Console" and api == "create_dm":
            from nonechat.model import DIRECT

            return DIRECT
        return answer(api, data)

    chat.answer = answer_too  # type: ignore[method-assign]


def sent_later_to(chat: Chat, where: str, event: Event) -> str:
    """Where a message sent later to the chat of `event` goes: where an answer to it goes, but
    for platforms whose answers reply to the message (Feishu: to the chat, or the person) or
    reach a person through the direct chat the event came from (QQ's guild direct messages: a
    message sent later goes to the direct chat post_dms opens)."""
    if chat.adapter_name == "Feishu":
        return f"chat_id:{chat.group_id}" if where == "group" else f"open_id:{event.get_user_id()}"
    if (chat.adapter_name, where) == ("QQ", "dms"):
        return f"post_dms_messages:{DIRECT_CHANNELS['QQ'][1]['guild_id']}"
    return chat.expected_target(where, event)


@contextmanager
def connected(chat: Chat) -> Iterator[None]:
    """The chat's bot connected to NoneBot (as its adapter connects it) during the block."""
    chat.bot.adapter.bot_connect(chat.bot)
    try:
        yield
    finally:
        chat.bot.adapter.bot_disconnect(chat.bot)


def writes_to_targets(store: SqlStore) -> list[str]:
    """The statements that write marsho_targets, as the store sends them from now on."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "marsho_targets" in statement and statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            seen.append(statement)

    sql_event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    return seen


# --- remembered, and there after a restart ------------------------------------------------------


async def test_a_target_remembered_from_a_question_is_found_after_a_restart(url: str, opened: Any) -> None:
    chat = PLATFORMS["OneBot V11"]()
    event = chat.group_event("marsho what time is it?")
    key = chat.expected_key("group", event)
    remembered = await TargetBook(opened(url)).remember(chat.bot, event, key)
    assert remembered == Target(chat.group_id, adapter="OneBot V11", self_id=chat.self_id)
    await opened(url).close()  # nothing kept in memory from here on

    restarted = opened(url)
    found = await TargetBook(restarted).target(key)
    assert found is not None and found.dump() == remembered.dump()
    saved = await TargetStore(restarted).get(key)
    assert saved is not None and (saved.adapter, saved.self_id) == ("OneBot V11", chat.self_id)
    assert await TargetBook(restarted).target("OneBot V11:group:1") is None


@pytest.mark.parametrize(("name", "where"), CELLS)
async def test_a_message_sent_later_reaches_the_chat_it_was_remembered_from(
    name: str, where: str, sqlite_url: str, opened: Any,
) -> None:
    chat = PLATFORMS[name]()
    event = chat.event(where, "marsho remind me later")
    key = chat.expected_key(where, event)
    await TargetBook(opened(sqlite_url)).remember(chat.bot, event, key)

    later = TargetBook(opened(sqlite_url))  # after a restart: from the database alone
    opens_direct_chats(chat)
    with connected(chat):
        await later.send_to(key, "It is time!")
    assert chat.sent_texts() == ["It is time!"]
    assert chat.sent_targets() == [sent_later_to(chat, where, event)]
    opening = DIRECT_CHANNELS.get(name, ("",))[0]
    opened_for = [data for api, data in chat.calls if api == opening]
    if where in ("private", "dms") and opened_for:  # the direct chat is the person's
        assert str(opened_for[0].get("recipient_id", opened_for[0].get("user_id"))) == event.get_user_id()


async def test_onebot_v11_sends_to_the_group_or_the_person_without_quoting(sqlite_url: str, opened: Any) -> None:
    chat = PLATFORMS["OneBot V11"]()
    group, private = chat.group_event("marsho hi"), chat.private_event("marsho hi", user_id="10777")
    book = TargetBook(opened(sqlite_url))
    for event, where in ((group, "group"), (private, "private")):
        await book.remember(chat.bot, event, chat.expected_key(where, event))
    with connected(chat):
        await book.send_to(chat.expected_key("group", group), "to the group")
        await book.send_to(chat.expected_key("private", private), "to you")
    sent = [(data["message_type"], data.get("group_id"), data.get("user_id"), str(data["message"]))
            for _, data in chat.sent_calls()]
    assert sent == [("group", int(chat.group_id), None, "to the group"), ("private", None, 10777, "to you")]


async def test_an_answer_sent_to_a_target_outside_a_handler_is_split_and_quotes_nothing(sqlite_url: str, opened: Any) -> None:
    chat = PLATFORMS["Telegram"]()
    event = chat.group_event("marsho tell me a long story")
    target = await TargetBook(opened(sqlite_url)).remember(chat.bot, event, chat.expected_key("group", event))
    story = "\n\n".join(f"Part {n} of the story." for n in range(3))
    with connected(chat):  # outside any handler: no event is being handled
        await send_answer(chat.bot, story, [], Delivery(split_chars=25), quote=True, to=target)
    assert chat.sent_texts() == [f"Part {n} of the story." for n in range(3)]
    assert chat.sent_targets() == [f"chat:{chat.group_id}"] * 3
    assert all(data["reply_parameters"] is None and data["reply_to_message_id"] is None
               for _, data in chat.sent_calls())


# --- what goes wrong, said -------------------------------------------------------------------------


async def test_with_no_bot_connected_sending_says_so(sqlite_url: str, opened: Any) -> None:
    chat = PLATFORMS["OneBot V11"]()
    event = chat.group_event("marsho hi")
    key = chat.expected_key("group", event)
    book = TargetBook(opened(sqlite_url))
    await book.remember(chat.bot, event, key)
    with pytest.raises(SendError) as failed:
        await book.send_to(key, "anyone?")
    assert failed.value.reason == "no_bot"
    assert str(failed.value) == (f"no bot is connected that can speak in chat {key} (it was answered by "
                                 f"bot {chat.self_id} on OneBot V11)")
    assert chat.sent_calls() == []


async def test_a_chat_never_answered_in_has_no_target(sqlite_url: str, opened: Any) -> None:
    chat = PLATFORMS["OneBot V11"]()
    with connected(chat), pytest.raises(SendError) as failed:
        await TargetBook(opened(sqlite_url)).send_to("OneBot V11:group:999", "hello?")
    assert failed.value.reason == "unknown"
    assert str(failed.value) == "no target is saved for chat OneBot V11:group:999: marsho has not answered there"


async def test_a_message_the_platform_refuses_is_a_named_error(sqlite_url: str, opened: Any) -> None:
    chat = PLATFORMS["OneBot V11"]()
    event = chat.group_event("marsho hi")
    key = chat.expected_key("group", event)
    book = TargetBook(opened(sqlite_url))
    await book.remember(chat.bot, event, key)
    chat.answer = lambda api, data: ActionFailed(retcode=1200, msg="muted")  # type: ignore[method-assign]
    with connected(chat), pytest.raises(SendError) as failed:
        await book.send_to(key, "hi")
    assert failed.value.reason == "refused" and key in str(failed.value) and "muted" in str(failed.value)


# --- no write per message -------------------------------------------------------------------------


async def test_repeated_questions_from_one_chat_write_its_target_once(sqlite_url: str, opened: Any) -> None:
    chat = PLATFORMS["OneBot V11"]()
    store = opened(sqlite_url)
    writes = writes_to_targets(store)
    now = [1000.0]
    book = TargetBook(store, clock=lambda: now[0])
    key = chat.group_key()
    for n in range(5):
        await book.remember(chat.bot, chat.group_event(f"marsho question {n}", user_id=f"1000{n}"), key)
    assert len(writes) == 1
    await book.remember(chat.bot, chat.private_event("marsho hi"), chat.expected_key("private", chat.private_event("x")))
    assert len(writes) == 2  # another chat: its own row

    restarted = TargetBook(store, clock=lambda: now[0])  # knows nothing yet: reads, finds it as it is
    await restarted.remember(chat.bot, chat.group_event("marsho again"), key)
    assert len(writes) == 2

    now[0] += SEEN_EVERY  # a day on: written again, to keep when the chat was last seen
    await restarted.remember(chat.bot, chat.group_event("marsho next day"), key)
    assert len(writes) == 3
    saved = await TargetStore(store).get(key)
    assert saved is not None and saved.seen_at == now[0]


async def test_a_chat_answered_by_another_bot_is_written_again(sqlite_url: str, opened: Any) -> None:
    first, second = PLATFORMS["OneBot V11"](), PLATFORMS["OneBot V11"]()
    second.bot.self_id = "43"
    store = opened(sqlite_url)
    writes = writes_to_targets(store)
    book = TargetBook(store)
    key = first.group_key()
    await book.remember(first.bot, first.group_event("marsho hi"), key)
    await book.remember(second.bot, second.group_event("marsho hi"), key)
    assert len(writes) == 2
    saved = await TargetStore(store).get(key)
    assert saved is not None and saved.self_id == "43" and saved.target["self_id"] == "43"


def test_a_target_is_the_chat_not_a_reply_to_the_message() -> None:
    """QQ's reply sequence (which changes with every message) is not part of a saved target."""
    chat = PLATFORMS["QQ"]()
    event: Event = chat.group_event("marsho hi")
    assert "qq.reply_seq" not in target_of(chat.bot, event).extra


# --- an unsolicited reply, outside any handler --------------------------------------------------------


@pytest.fixture
def group() -> Chat:
    """A OneBot v11 bot in a group of this test's own."""
    chat = PLATFORMS["OneBot V11"]()
    chat.group_id = str(next(_groups))
    return chat


async def test_an_unsolicited_reply_and_its_progress_line_go_to_the_group_without_quoting(
    fake: FakeOpenAI, plugin_engine: Any, group: Chat,
) -> None:
    with configured(marsho_active_cooldown=0, marsho_tool_progress=True) as app:
        await say(group, group.group_event("marsho.active 1", user_id="10501", name="Ada", role="admin"))
        fake.push(tool_calls(("marshoai-example__get_current_time", {})), text("It is noon, by the way."))
        await say(group, group.group_event("what a long morning", user_id="10502", name="Alice"))
        await app.active.settled()
    sent = group.sent_calls()[1:]  # after the command's answer: the progress line, then the reply
    assert group.sent_texts()[1:] == ["marsho is using marshoai-example__get_current_time …",
                                      "It is noon, by the way."]
    assert [(data["message_type"], data["group_id"]) for _, data in sent] == [("group", int(group.group_id))] * 2
    assert [data["message"][0].type for _, data in sent] == ["text", "text"]  # neither quotes


async def test_a_question_answered_in_a_group_saves_where_it_was_asked_for_later(
    fake: FakeOpenAI, plugin_engine: Any, group: Chat,
) -> None:
    with configured() as app:
        fake.push(text("Hello, Alice."))
        await say(group, group.group_event("marsho hello", user_id="10503", name="Alice"))
        keys = [key for key in app.targets._known if key.endswith(f":group:{group.group_id}")]
        assert len(keys) == 1, keys  # the group's chat key, whoever asked and whatever the scope
        with connected(group):
            await app.targets.send_to(keys[0], "later")
    assert group.sent_texts()[-1] == "later"
    assert group.sent_calls()[-1][1]["group_id"] == int(group.group_id)
