"""Whose conversation a message joins (MARSHO_SESSION_SCOPE), and the history commands:
marsho.reset, marsho.history, marsho.export, marsho.model, through nonebug."""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path

import pytest
from nonebot.adapters.onebot.v11 import GroupMessageEvent, Message, PrivateMessageEvent
from nonebug import App

from nonebot_plugin_marsho.agent.engine import MODEL_SETTING, Engine
from nonebot_plugin_marsho.exceptions import EndpointError, StoreError
from nonebot_plugin_marsho.store.session import session_key
from tests.conftest import DATA_DIR, SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, error, text, tool_calls
from tests.onebot import group_message, onebot_bot, private_message, reply_call
from tests.speakers import label

PLATFORM = "OneBot V11"
SUPERUSER = int(SUPERUSER_ID)
GROUP_KEY = session_key(PLATFORM, group_id="20001", user_id="10001", scope="group")
PLUGIN_DATA_DIR = DATA_DIR / "nonebot_plugin_marsho"
"""The plugin's localstore data folder in tests (LOCALSTORE_DATA_DIR is DATA_DIR)."""
MEMBER_ONLY = ("This conversation is shared by the whole group: only group admins and "
               "superusers can reset it.")

Event = GroupMessageEvent | PrivateMessageEvent


def key_of(scope: str, *, user: int = 10001, group: int | None = 20001) -> str:
    return session_key(PLATFORM, group_id=None if group is None else str(group),
                       user_id=str(user), scope=scope)  # type: ignore[arg-type]


def user_messages(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


async def exchange(app: App, *steps: tuple[Event, str]) -> None:
    """Send each event and expect marsho to answer it with the text."""
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for number, (event, answer) in enumerate(steps):
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": number})


class AnyText:
    """Stands for a reply's message in `should_call_api`: matches whatever is sent, keeps its text."""

    text = ""

    def __eq__(self, other: object) -> bool:
        self.text = Message(other).extract_plain_text()  # type: ignore[arg-type]
        return True


async def reply_to(app: App, event: Event) -> str:
    """Whatever marsho answers to `event`, for replies that cannot be known in advance."""
    captured = AnyText()
    api, data = reply_call(event, "")
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api(api, {**data, "message": captured}, result={"message_id": 1})
    return captured.text


@pytest.fixture
def scope(plugin_engine: Engine):
    """`scope("user")`: MARSHO_SESSION_SCOPE for the rest of the test."""
    with ExitStack() as stack:
        yield lambda value: stack.enter_context(configured(marsho_session_scope=value))


# --- session scopes --------------------------------------------------------------------------


async def test_group_scope_shares_one_conversation_naming_each_speaker(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope
) -> None:
    scope("group")
    alice = group_message("marsho hi all", user_id=10001)
    alice.sender.card = "Alice"  # the group card wins over the nickname
    bob = group_message("marsho hello", user_id=10002)  # no card: his nickname
    fake.push(text("Hi Alice"), text("Hi Bob"))
    await exchange(app, (alice, "Hi Alice"), (bob, "Hi Bob"))
    assert user_messages(fake.requests[-1]) == [f"{label('Alice', 10001)}: hi all", f"{label('user10002', 10002)}: hello"]
    assert (await plugin_engine.history.stats(GROUP_KEY))[0] == 2


async def test_user_in_group_scope_gives_each_member_their_own_conversation(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope
) -> None:
    scope("user_in_group")
    fake.push(text("a1"), text("b1"), text("a2"))
    await exchange(app, (group_message("marsho I am Alice", user_id=10001), "a1"),
                   (group_message("marsho I am Bob", user_id=10002), "b1"),
                   (group_message("marsho who am I?", user_id=10001), "a2"))
    assert user_messages(fake.requests[1]) == ["I am Bob"]  # no name prefix, nobody else's turns
    assert user_messages(fake.requests[2]) == ["I am Alice", "who am I?"]
    assert (await plugin_engine.history.stats(key_of("user_in_group", user=10001)))[0] == 2
    assert (await plugin_engine.history.stats(key_of("user_in_group", user=10002)))[0] == 1
    assert (await plugin_engine.history.stats(GROUP_KEY))[0] == 0


async def test_user_scope_follows_a_person_across_groups_but_not_into_their_private_chat(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope
) -> None:
    scope("user")
    fake.push(text("1"), text("2"), text("other"), text("3"), text("4"))
    await exchange(app, (group_message("marsho in group one", group_id=1), "1"),
                   (group_message("marsho in group two", group_id=2), "2"),
                   (group_message("marsho someone else", group_id=1, user_id=10002), "other"),
                   (private_message("marsho in private"), "3"),
                   (group_message("marsho back in group one", group_id=1), "4"))
    assert user_messages(fake.requests[2]) == ["someone else"]
    assert user_messages(fake.requests[3]) == ["in private"]  # nothing said in a group
    assert user_messages(fake.requests[4]) == ["in group one", "in group two", "back in group one"]
    assert (await plugin_engine.history.stats("OneBot V11:user:10001"))[0] == 3
    assert (await plugin_engine.history.stats("OneBot V11:private:10001"))[0] == 1


@pytest.mark.parametrize("chosen_scope", ["group", "user_in_group", "user"])
async def test_private_chats_are_per_user_in_every_scope(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope, chosen_scope: str
) -> None:
    scope(chosen_scope)
    fake.push(text("a1"), text("b1"), text("a2"))
    await exchange(app, (private_message("marsho I am Alice", user_id=10001), "a1"),
                   (private_message("marsho I am Bob", user_id=10002), "b1"),
                   (private_message("marsho who am I?", user_id=10001), "a2"))
    assert user_messages(fake.requests[1]) == ["I am Bob"]
    assert user_messages(fake.requests[2]) == ["I am Alice", "who am I?"]  # never a name prefix
    assert (await plugin_engine.history.stats(key_of(chosen_scope, group=None)))[0] == 2


# --- marsho.reset ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "user_id", "allowed"),
    [("member", 10001, False), ("admin", 10002, True), ("owner", 10003, True),
     ("member", SUPERUSER, True)],
    ids=["member", "admin", "owner", "superuser"],
)
async def test_only_admins_owners_and_superusers_reset_a_shared_group_conversation(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope, role: str, user_id: int,
    allowed: bool,
) -> None:
    scope("group")
    fake.push(text("first"))
    answer = "Done: I forgot this conversation (1 turn)." if allowed else MEMBER_ONLY
    await exchange(app, (group_message("marsho one"), "first"),
                   (group_message("marsho.reset", user_id=user_id, role=role), answer))
    assert (await plugin_engine.history.stats(GROUP_KEY))[0] == (0 if allowed else 1)


async def test_in_user_in_group_scope_any_member_resets_their_own_conversation(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope
) -> None:
    scope("user_in_group")
    fake.push(text("a"), text("b"), text("fresh"))
    await exchange(app, (group_message("marsho mine", user_id=10001), "a"),
                   (group_message("marsho theirs", user_id=10002), "b"),
                   (group_message("marsho.reset", user_id=10001),
                    "Done: I forgot this conversation (1 turn)."),
                   (group_message("marsho again", user_id=10001), "fresh"))
    assert user_messages(fake.requests[-1]) == ["again"]
    assert (await plugin_engine.history.stats(key_of("user_in_group", user=10002)))[0] == 1


# --- marsho.history --------------------------------------------------------------------------


async def test_history_reports_turns_messages_and_tokens(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope
) -> None:
    scope("group")
    await exchange(app, (group_message("marsho.history"), "This conversation is empty."))
    fake.push(text("first"), text("second"))
    sent = [{"role": "user", "content": f"{label('user10001', 10001)}: one"}, {"role": "assistant", "content": "first"},
            {"role": "user", "content": f"{label('user10001', 10001)}: two"}, {"role": "assistant", "content": "second"}]
    tokens = sum(map(plugin_engine.counter.count_message, sent))
    expected = (f"This conversation: 2 turns, 4 messages, about {tokens} tokens stored "
                f"({plugin_engine.counter.name}). Each request carries the newest turns that fit in "
                "8000 tokens (MARSHO_HISTORY_TOKENS).")
    await exchange(app, (group_message("marsho one"), "first"), (group_message("marsho two"), "second"),
                   (group_message("marsho.history"), expected))


# --- superuser commands ----------------------------------------------------------------------


def exports_dir() -> Path:
    return PLUGIN_DATA_DIR / "exports"


@pytest.mark.parametrize("command", ["export", "model", "model other-model"])
@pytest.mark.parametrize("role", ["member", "admin", "owner"])
async def test_export_and_model_are_for_superusers_only(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, command: str, role: str
) -> None:
    before = set(exports_dir().glob("*")) if exports_dir().exists() else set()
    model = plugin_engine.llm.model
    name = command.split()[0]
    await exchange(app, (group_message(f"marsho.{command}", role=role),
                         f"Only the bot's superusers may use marsho.{name}."))
    assert plugin_engine.llm.model == model
    assert await plugin_engine.history.get_setting(MODEL_SETTING) is None
    assert (set(exports_dir().glob("*")) if exports_dir().exists() else set()) == before
    assert fake.requests == []


async def test_export_writes_every_message_of_the_session_as_json(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, scope
) -> None:
    scope("group")
    fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}, "call_9")),
              text("Hot in Hangzhou"), text("You're welcome"))
    await exchange(app, (group_message("marsho weather?", user_id=SUPERUSER), "Hot in Hangzhou"),
                   (group_message("marsho thanks", user_id=10002), "You're welcome"))
    event = group_message("marsho.export", user_id=SUPERUSER)
    privately, in_group = AnyText(), AnyText()
    async with app.test_matcher() as ctx:  # the path goes to the superuser privately (issue 25)
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api("send_msg", {"message_type": "private", "user_id": SUPERUSER, "message": privately},
                            result={"message_id": 1})
        api, data = reply_call(event, "")
        ctx.should_call_api(api, {**data, "message": in_group}, result={"message_id": 2})

    found = re.match(r"(\d+) messages of .+? exported to (.+?\.json)$", privately.text)
    assert found, privately.text
    assert found.group(1) == "6"
    path = Path(found.group(2))
    assert path.is_relative_to(PLUGIN_DATA_DIR)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["session"] == GROUP_KEY
    messages = [item["message"] for item in data["messages"]]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user",
                                             "assistant"]
    assert messages[0] == {"role": "user", "content": f"{label(f'user{SUPERUSER}', SUPERUSER)}: weather?"}
    assert messages[1]["tool_calls"][0]["id"] == messages[2]["tool_call_id"] == "call_9"
    assert messages[2]["content"] == "The temperature of Hangzhou is 114514℃。"
    assert messages[3:] == [{"role": "assistant", "content": "Hot in Hangzhou"},
                            {"role": "user", "content": f"{label('user10002', 10002)}: thanks"},
                            {"role": "assistant", "content": "You're welcome"}]
    assert in_group.text == "6 messages exported; where the file is was sent to you privately."


async def test_model_shows_switches_and_keeps_the_model(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # put the plugin's engine back as it was for the other tests
    monkeypatch.setattr(plugin_engine.llm, "model", plugin_engine.llm.model)
    monkeypatch.setattr(plugin_engine.llm, "model_setting", plugin_engine.llm.model_setting)
    monkeypatch.setattr(plugin_engine, "counter", plugin_engine.counter)
    previous, base_url = plugin_engine.llm.model, plugin_engine.llm.base_url
    fake.push(text("from the other model"))
    await exchange(
        app,
        (group_message("marsho.model", user_id=SUPERUSER), f"The model is {previous} (at {base_url})."),
        (group_message("marsho.model other-model", user_id=SUPERUSER),
         f"Switched from {previous} to other-model; kept across restarts."),
        (group_message("marsho hi"), "from the other model"),
        (group_message("marsho.model", user_id=SUPERUSER), f"The model is other-model (at {base_url})."),
    )
    assert [body["model"] for body in fake.requests] == ["other-model"]
    assert await plugin_engine.history.get_setting(MODEL_SETTING) == "other-model"
    # a model the endpoint does not know is now fixed with marsho.model: .env's MARSHO_MODEL no longer counts
    assert plugin_engine.llm.model_setting == "marsho.model"


async def test_after_a_restart_a_model_chosen_with_marsho_model_is_what_its_errors_name(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    from nonebot_plugin_marsho.chat.app import Marsho
    from nonebot_plugin_marsho.config import Config

    config = Config(marsho_base_url=fake.base_url, marsho_api_key="k", marsho_model="good-model",
                    marsho_database_url=f"sqlite:///{tmp_path / 'marsho.db'}", marsho_lang="en")
    for chosen in (None, "gpt-typo"):
        bot = Marsho(config, tmp_path)
        await bot.start()
        try:
            engine = bot.require_engine()
            if chosen is None:
                assert engine.llm.model_setting == "MARSHO_MODEL"
                await engine.switch_model("gpt-typo")  # what marsho.model does, kept across the restart
                continue
            fake.push(error(404, "The model `gpt-typo` does not exist"))
            with pytest.raises(EndpointError) as raised:
                await engine.llm.complete([{"role": "user", "content": "hi"}])
            assert f"Check marsho.model (gpt-typo) and MARSHO_BASE_URL ({fake.base_url})." in str(raised.value)
        finally:
            await bot.stop()


async def test_a_model_name_that_is_not_one_is_refused(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    model = plugin_engine.llm.model
    await exchange(app, (group_message("marsho.model rm -rf /", user_id=SUPERUSER),
                         "'rm -rf /' does not look like a model name."))
    assert plugin_engine.llm.model == model
    assert await plugin_engine.history.get_setting(MODEL_SETTING) is None


# --- a database that fails --------------------------------------------------------------------


async def test_an_answer_that_cannot_be_saved_is_still_sent_with_a_note(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = "cannot save the turn to sqlite+aiosqlite://: OperationalError: disk I/O error"

    async def disk_full(*args: object) -> None:
        raise StoreError(problem)

    fake.push(text("kept"), text("not kept"))
    await exchange(app, (group_message("marsho one"), "kept"))
    before = await plugin_engine.history.export(GROUP_KEY)
    with monkeypatch.context() as patch:
        patch.setattr(plugin_engine.history, "append_turn", disk_full)
        # a member is told it was not saved; the owner also why (the database's address)
        await exchange(app, (group_message("marsho two"), "not kept\n(This exchange could not be "
                             "saved; the bot's owner has the details in the log.)"))
        fake.push(text("not kept either"))
        await exchange(app, (group_message("marsho two again", user_id=SUPERUSER),
                             f"not kept either\n(This exchange could not be saved: {problem})"))
    assert await plugin_engine.history.export(GROUP_KEY) == before
    fake.push(text("third"))
    await exchange(app, (group_message("marsho three"), "third"))
    assert user_messages(fake.requests[-1]) == [f"{label('user10001', 10001)}: one", f"{label('user10001', 10001)}: three"]


async def test_history_that_cannot_be_read_is_explained(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = "cannot read the history from sqlite+aiosqlite://: OperationalError: disk I/O error"

    async def unreadable(*args: object, **kwargs: object) -> None:
        raise StoreError(problem)

    monkeypatch.setattr(plugin_engine.history, "recent_turns", unreadable)
    await exchange(
        app,
        (group_message("marsho hi"), "Sorry, I could not answer: my conversation database failed. "
                                     "The bot's owner has the details in the log."),
        (group_message("marsho hi", user_id=SUPERUSER), f"Sorry, my conversation database failed: {problem}"),
    )
    assert fake.requests == []
