"""The group toolkit (issue 28) apart from a bot process: where it is offered, how the owner's
tool settings govern it, and each call's checks against a bot that records its API calls (roles
asked once per minute, nothing that acts when refused, a platform's refusal reported, each
action logged)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from nonebot.adapters import Bot
from nonebot.exception import ActionFailed

from nonebot_plugin_marsho.chat.app import Marsho
from nonebot_plugin_marsho.chat.group_actions import GroupActions, shows_ids
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.store.group_actions import GroupActionLog
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools.model import ToolContext, Toolset
from tests.test_group_context import postgres, store_url  # noqa: F401 - fixtures

GROUP, BOT_ID = "5001", "42"
ACTS = ("set_group_ban", "set_group_kick", "delete_msg", "restrict_chat_member", "ban_chat_member",
        "unban_chat_member", "delete_message")
TELEGRAM_STATUS = {"owner": "creator", "admin": "administrator", "member": "member"}


class Refusal(ActionFailed):
    def __init__(self, wording: str) -> None:
        super().__init__("OneBot V11")
        self.info = {"retcode": 102, "wording": wording}


class RecordingBot(Bot):
    """A bot of the adapter named `adapter` answering get_group_member_info from `roles` and
    get_msg from `senders` (and `found_in`); every call recorded; `refuse` makes the acting calls
    fail."""

    def __init__(self, adapter: str = "OneBot V11", roles: dict[str, str] | None = None,
                 senders: dict[str, str] | None = None, refuse: str = "",
                 found_in: dict[str, Any] | None = None) -> None:
        stub = SimpleNamespace(get_name=lambda: adapter, config=SimpleNamespace(superusers={"onebot:999"}))
        super().__init__(stub, BOT_ID)  # type: ignore[arg-type]
        self.roles = roles or {}
        self.senders = senders or {}
        self.refuse = refuse
        self.found_in = found_in or {}
        """What get_msg says of a message's chat (default: group GROUP, as NapCat and go-cqhttp say)."""
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def send(self, event: Any, message: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def call_api(self, api: str, **data: Any) -> Any:
        self.calls.append((api, data))
        if api == "get_group_member_info":
            return {"role": self.roles.get(str(data["user_id"]), "member")}
        if api == "get_chat_member":
            role = self.roles.get(str(data["user_id"]), "member")
            return {"status": TELEGRAM_STATUS.get(role, role), "user": {"id": data["user_id"]}}
        if api == "get_msg":
            where = self.found_in.get(str(data["message_id"]), {"message_type": "group", "group_id": int(GROUP)})
            return {**where, "sender": {"user_id": int(self.senders[str(data["message_id"])])}}
        if self.refuse:
            raise Refusal(self.refuse)
        return None

    def acted(self) -> list[tuple[str, dict[str, Any]]]:
        return [call for call in self.calls if call[0] in ACTS]


def context(bot: Bot, user_id: str = "1", role: str = "admin", group: str | None = GROUP,
            event: Any = None) -> ToolContext:
    platform = bot.adapter.get_name()
    return ToolContext(session_key="k", user_id=user_id, group_id=group, role=role,  # type: ignore[arg-type]
                           bot=bot, event=event, platform=platform,
                           chat_key=f"{platform}:group:{group}" if group else f"{platform}:private:1")


@pytest.fixture
async def store() -> Any:
    sql = SqlStore("sqlite+aiosqlite://")
    await sql.start()
    yield sql
    await sql.close()


def test_the_tools_are_offered_only_in_groups_on_platforms_that_have_them(store: SqlStore) -> None:
    actions = GroupActions(store)
    [mute, *_] = actions.toolkit().tools
    onebot = RecordingBot()
    assert context(onebot).may_use(mute)
    assert not context(onebot, group=None).may_use(mute)
    assert context(RecordingBot("Telegram")).may_use(mute)
    assert not context(RecordingBot("Kaiheila")).may_use(mute)
    actions.off.add(f"OneBot V11:group:{GROUP}")
    assert not context(onebot).may_use(mute)


def test_kick_is_a_tool_only_with_its_own_setting(store: SqlStore) -> None:
    assert [tool.name for tool in GroupActions(store).toolkit().tools] == [
        "group__mute", "group__unmute", "group__recall"]
    assert "group__kick" in [tool.name for tool in GroupActions(store, kick=True).toolkit().tools]


def test_questions_show_ids_only_where_the_tools_may_run(store: SqlStore) -> None:
    group_event = SimpleNamespace()
    assert shows_ids(GroupActions(store), RecordingBot(), group_event)  # type: ignore[arg-type]
    assert not shows_ids(None, RecordingBot(), group_event)  # type: ignore[arg-type]
    assert not shows_ids(GroupActions(store), RecordingBot("Kaiheila"), group_event)  # type: ignore[arg-type]


@pytest.mark.parametrize(("settings", "names", "admin_only"), [
    ({}, ["group__mute", "group__recall", "group__unmute"], []),
    ({"marsho_disabled_tools": ["group__recall"]}, ["group__mute", "group__unmute"], []),
    ({"marsho_tool_permissions": {"group": "admin"}}, ["group__mute", "group__recall", "group__unmute"],
     ["group__mute", "group__recall", "group__unmute"]),
    ({"marsho_disabled_toolkits": ["group"]}, [], []),
])
def test_the_owners_tool_settings_govern_the_group_toolkit(
        store: SqlStore, tmp_path: Path, settings: dict[str, Any], names: list[str], admin_only: list[str]) -> None:
    app = Marsho(Config(**settings), tmp_path)
    toolset = Toolset()
    app.add_builtin(toolset, GroupActions(store).toolkit())
    assert sorted(toolset.tools) == names
    assert sorted(name for name, tool in toolset.tools.items() if tool.permission == "admin") == admin_only


async def test_a_refused_mute_calls_nothing_that_acts_and_is_logged(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"})
    actions = GroupActions(store)
    result = await actions.run(context(bot, role="member"), "mute", "7", minutes=10)
    assert result.status == "error" and "only someone above them" in result.content
    assert bot.acted() == []
    [logged] = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=5)
    assert (logged.asker, logged.action, logged.target, logged.outcome) == ("OneBot V11:1", "mute", "7", "denied")


async def test_roles_are_asked_once_a_minute_and_the_mute_sent_in_seconds(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"})
    actions = GroupActions(store)
    for _ in range(2):
        result = await actions.run(context(bot), "mute", "7", minutes=3)
        assert result.status == "success"
    assert bot.acted() == [("set_group_ban", {"group_id": 5001, "user_id": 7, "duration": 180})] * 2
    assert sum(api == "get_group_member_info" for api, _ in bot.calls) == 2  # the target and the bot, once


async def test_a_platform_refusal_is_a_clear_result(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"}, refuse="NO_PERMISSION")
    result = await GroupActions(store).run(context(bot), "unmute", "7")
    assert result.status == "error"
    assert result.content == "The platform refused: set_group_ban failed: NO_PERMISSION. Nothing was done."


async def test_an_id_that_is_not_the_platforms_is_refused_before_any_call(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"})
    result = await GroupActions(store).run(context(bot), "kick", "@Alice")
    assert result.status == "error" and "is not a QQ id" in result.content
    assert bot.calls == []


async def test_a_group_that_turned_the_tools_off_is_refused_even_if_called(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"})
    actions = GroupActions(store)
    await actions.set_on(f"OneBot V11:group:{GROUP}", False)
    other = GroupActions(store)  # another bot process, which read the settings before
    result = await other.run(context(bot), "mute", "7", minutes=1)
    assert result.status == "error" and "turned group actions off" in result.content
    assert bot.calls == []


async def test_a_superuser_is_recognised_by_the_adapters_prefix(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "owner"}, senders={"88": "999"})
    result = await GroupActions(store).run(context(bot, role="admin"), "recall", "88")
    assert result.status == "error" and "one of my superusers" in result.content
    assert bot.acted() == []


@pytest.mark.parametrize("adapter", ["OneBot V11", "Telegram"])
@pytest.mark.parametrize(("asker", "target", "bot_role", "acts"), [
    ("admin", "member", "admin", True),
    ("owner", "admin", "owner", True),
    ("member", "member", "admin", False),
    ("admin", "admin", "owner", False),
    ("admin", "owner", "owner", False),
    ("owner", "admin", "admin", False),
    ("admin", "member", "member", False),
])
async def test_the_role_table_on_every_adapter_that_offers_the_tools(
        store: SqlStore, adapter: str, asker: str, target: str, bot_role: str, acts: bool) -> None:
    bot = RecordingBot(adapter, roles={BOT_ID: bot_role, "7": target})
    result = await GroupActions(store).run(context(bot, role=asker), "mute", "7", minutes=2)
    assert (result.status == "success") is acts, result.content
    assert bool(bot.acted()) is acts


async def test_telegram_mutes_restrict_and_kicks_let_the_member_join_again(store: SqlStore) -> None:
    bot = RecordingBot("Telegram", roles={BOT_ID: "admin"})
    actions = GroupActions(store, kick=True)
    await actions.run(context(bot), "mute", "7", minutes=5)
    await actions.run(context(bot), "kick", "7")
    [(restrict, muted), *kicked] = bot.acted()
    assert restrict == "restrict_chat_member" and muted["permissions"]["can_send_messages"] is False
    assert muted["chat_id"] == int(GROUP) and muted["user_id"] == 7 and muted["until_date"] > 0
    assert [api for api, _ in kicked] == ["ban_chat_member", "unban_chat_member"]


async def test_telegram_recalls_the_message_the_question_replies_to(store: SqlStore) -> None:
    bot = RecordingBot("Telegram", roles={BOT_ID: "admin"})
    event = SimpleNamespace(reply_to_message=SimpleNamespace(message_id=31, from_=SimpleNamespace(id=1)))
    result = await GroupActions(store).run(context(bot, role="member", event=event), "recall", "31")
    assert result.status == "success"
    assert bot.acted() == [("delete_message", {"chat_id": int(GROUP), "message_id": 31})]
    other = await GroupActions(store).run(context(bot, role="member", event=event), "recall", "32")
    assert other.status == "error" and "replies to" in other.content


SPELLED_OTHERWISE = {"leading-zero": "0999", "two-zeros": "00999", "spaces": " 999 "}
NOT_ASCII = {"arabic-indic": "\u0669\u0669\u0669", "fullwidth": "\uff19\uff19\uff19", "superscript": "\u00b2"}


@pytest.mark.parametrize("spelled", SPELLED_OTHERWISE.values(), ids=SPELLED_OTHERWISE.keys())
async def test_a_superuser_spelled_with_leading_zeros_is_still_a_superuser(store: SqlStore, spelled: str) -> None:
    bot = RecordingBot(roles={BOT_ID: "owner"})
    result = await GroupActions(store).run(context(bot, role="owner"), "mute", spelled, minutes=10)
    assert result.status == "error" and result.content.startswith("999 is one of my superusers"), result.content
    assert bot.acted() == []
    [logged] = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=5)
    assert logged.target == "999"


@pytest.mark.parametrize("spelled", NOT_ASCII.values(), ids=NOT_ASCII.keys())
async def test_digits_other_than_ascii_are_no_id_and_nothing_is_called(store: SqlStore, spelled: str) -> None:
    bot = RecordingBot(roles={BOT_ID: "owner"})
    result = await GroupActions(store).run(context(bot, role="owner"), "mute", spelled, minutes=10)
    assert result.status == "error"
    assert result.content == (f"{spelled!r} is not a QQ id: a QQ id is a positive whole number in ASCII "
                              "digits 0-9, like 12345, without leading zeros (the number in a mention's "
                              "(id:...)). Nothing was done.")
    assert bot.calls == []


@pytest.mark.parametrize("spelled", ["0", "000", "-7", "+7", "7.0", "1" * 20, "9" * 5000, ""])
async def test_what_is_no_positive_whole_number_is_no_user_id(store: SqlStore, spelled: str) -> None:
    bot = RecordingBot(roles={BOT_ID: "owner"})
    result = await GroupActions(store).run(context(bot, role="owner"), "kick", spelled)
    assert result.status == "error" and "is not a QQ id" in result.content and len(result.content) < 300
    assert bot.calls == []


async def test_the_bot_spelled_with_a_leading_zero_is_still_the_bot(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "member"})
    result = await GroupActions(store).run(context(bot, role="owner"), "mute", "0" + BOT_ID, minutes=10)
    assert result.content == "I cannot mute myself: nothing was done."
    assert bot.calls == []


async def test_one_spelling_for_the_checks_the_log_and_the_call(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin", "7": "member"})
    result = await GroupActions(store).run(context(bot), "mute", "007", minutes=1)
    assert result.content == "Muted 7 for 1 minute."
    assert ("get_group_member_info", {"group_id": 5001, "user_id": 7, "no_cache": True}) in bot.calls
    assert bot.acted() == [("set_group_ban", {"group_id": 5001, "user_id": 7, "duration": 60})]
    [logged] = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=5)
    assert logged.target == "7"


async def test_a_members_own_message_of_this_group_is_recalled(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"}, senders={"88": "1"})
    result = await GroupActions(store).run(context(bot, role="member"), "recall", "088")
    assert result.content == "Recalled message 88 (sent by 1)."
    assert bot.acted() == [("delete_msg", {"message_id": 88})]


@pytest.mark.parametrize(("found_in", "why"), [
    ({"message_type": "group", "group_id": 6002}, "Message 88 was not sent in this group"),
    ({"message_type": "private"}, "Message 88 is a private message, not one of this group"),
    ({"message_type": "group"}, "The platform does not say which chat message 88 was sent in"),
    ({}, "The platform does not say which chat message 88 was sent in"),
], ids=["another-group", "private", "group-unnamed", "nothing-said"])
async def test_a_message_not_known_to_be_this_groups_is_not_recalled(
        store: SqlStore, found_in: dict[str, Any], why: str) -> None:
    bot = RecordingBot(roles={BOT_ID: "owner"}, senders={"88": "7"}, found_in={"88": found_in})
    result = await GroupActions(store).run(context(bot, role="owner"), "recall", "88")
    assert result.status == "error" and result.content.startswith(why), result.content
    assert result.content.endswith("Nothing was done.")
    assert bot.acted() == []
    [logged] = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=5)
    assert logged.outcome == "denied"


async def test_the_quoted_message_is_this_groups_though_get_msg_does_not_name_it(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"}, senders={"-88": "1"}, found_in={"-88": {"message_type": "group"}})
    question = SimpleNamespace(reply=SimpleNamespace(message_id=-88))
    result = await GroupActions(store).run(context(bot, role="member", event=question), "recall", "-88")
    assert result.content == "Recalled message -88 (sent by 1)."
    assert bot.acted() == [("delete_msg", {"message_id": -88})]


@pytest.fixture
async def file_store(tmp_path: Path) -> Any:
    """A database in a file, as the bot's: its connections are apart (the in-memory one shares one
    connection, whose reads end the other tasks' transactions)."""
    sql = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}")
    await sql.start()
    yield sql
    await sql.close()


class SlowBot(RecordingBot):
    """A RecordingBot whose acting calls wait for `go`, as a platform's round trip takes a while."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.go = asyncio.Event()
        self.waiting = 0

    async def call_api(self, api: str, **data: Any) -> Any:
        if api in ACTS:
            self.waiting += 1
            await self.go.wait()
        return await super().call_api(api, **data)


async def _in_parallel(bot: SlowBot, calls: list[Any]) -> list[Any]:
    """Run the calls at once, as a model's parallel tool calls run; let the acting ones through
    once every call has either ended or reached the platform."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    for _ in range(2000):
        if bot.waiting + sum(task.done() for task in tasks) == len(tasks):
            break
        await asyncio.sleep(0.005)
    bot.go.set()
    return list(await asyncio.gather(*tasks))


async def test_parallel_calls_of_one_answer_stay_within_the_hourly_bound(file_store: SqlStore) -> None:
    store = file_store
    bot = SlowBot(roles={BOT_ID: "admin"})
    actions = GroupActions(store, per_hour=3)
    results = await _in_parallel(bot, [actions.run(context(bot), "mute", str(victim), minutes=1)
                                       for victim in range(70, 76)])
    assert len(bot.acted()) == 3
    assert sorted(result.status for result in results) == ["error"] * 3 + ["success"] * 3
    assert all("MARSHO_GROUP_ACTIONS_PER_HOUR=3" in r.content for r in results if r.status == "error")
    logged = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=10)
    assert sorted(entry.outcome for entry in logged) == ["denied"] * 3 + ["done"] * 3


async def test_two_processes_on_one_database_stay_within_the_hourly_bound(store_url: str) -> None:  # noqa: F811
    stores = [SqlStore(store_url), SqlStore(store_url)]  # two bot processes: a lock each
    try:
        for sql in stores:
            await sql.start()
        bot = SlowBot(roles={BOT_ID: "admin"})
        first, second = (GroupActions(sql, per_hour=3) for sql in stores)
        results = await _in_parallel(bot, [actions.run(context(bot), "mute", str(victim), minutes=1)
                                           for victim in range(80, 86) for actions in (first, second)])
    finally:
        for sql in stores:
            await sql.close()
    assert 1 <= len(bot.acted()) <= 3
    assert sum(result.status == "success" for result in results) == len(bot.acted())


async def test_an_action_under_way_is_listed_and_counted(file_store: SqlStore) -> None:
    store = file_store
    bot = SlowBot(roles={BOT_ID: "admin"})
    actions = GroupActions(store, per_hour=1)
    under_way = asyncio.ensure_future(actions.run(context(bot), "mute", "7", minutes=1))
    for _ in range(2000):
        if bot.waiting:
            break
        await asyncio.sleep(0.005)
    [pending] = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=5)
    assert pending.outcome == "pending"
    refused = await actions.run(context(bot), "mute", "8", minutes=1)
    assert "MARSHO_GROUP_ACTIONS_PER_HOUR=1" in refused.content
    bot.go.set()
    assert (await under_way).status == "success"
    logged = await GroupActionLog(store).recent(f"OneBot V11:group:{GROUP}", limit=5)
    assert [(entry.target, entry.outcome) for entry in logged] == [("8", "denied"), ("7", "done")]


async def test_a_failed_action_gives_its_slot_back(store: SqlStore) -> None:
    bot = RecordingBot(roles={BOT_ID: "admin"}, refuse="NO_PERMISSION")
    actions = GroupActions(store, per_hour=1)
    assert "The platform refused" in (await actions.run(context(bot), "mute", "7", minutes=1)).content
    bot.refuse = ""
    assert (await actions.run(context(bot), "mute", "7", minutes=1)).status == "success"


async def test_a_message_the_platform_will_not_place_is_refused_naming_the_authority_first(store: SqlStore) -> None:
    unplaced = {"88": {"message_type": "group"}, "89": {"message_type": "group"}}
    bot = RecordingBot(roles={BOT_ID: "admin"}, senders={"88": "7", "89": "1"}, found_in=unplaced)
    anothers = await GroupActions(store).run(context(bot, role="member"), "recall", "88")
    assert "only someone above them" in anothers.content and "can recall a message of 7" in anothers.content
    own = await GroupActions(store).run(context(bot, role="member"), "recall", "89")
    assert own.content.startswith("The platform does not say which chat message 89 was sent in")
    assert bot.acted() == []
