"""The owner's first hour (issue 13): the triggers work whatever COMMAND_START and NICKNAME are,
`marsho.<typo>` lists the commands (closest first), a failed answer does not use up a rate-limit
slot, and counts read "1 turn", "2 turns" in English."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nonebot import get_driver
from nonebot.adapters.onebot.v11.bot import _check_nickname
from nonebug import App

from nonebot_plugin_marsho.chat.commands import HELP_ORDER
from nonebot_plugin_marsho.chat.fairuse import FairUse, RateLimiter
from nonebot_plugin_marsho.chat.matchers import Request, parse_request
from nonebot_plugin_marsho.chat.render import history_text, unknown_command_text
from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.i18n import EN, ZH, Texts
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, error, text
from tests.onebot import group_message, onebot_bot, private_message, reply_call
from tests.onebot_sim import BotProcess, OneBotSim, output_if_failed
from tests.speakers import label

NAMES = ["marsho", "小棉"]
EN_TEXTS = Texts("en")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# triggers


@pytest.mark.parametrize("starts", [{"/"}, {"!"}, {""}, {"/", "!", "#"}, {"", "!!", "!"}, set()],
                         ids=["slash", "bang", "empty", "several", "empty-and-prefixes", "none"])
@pytest.mark.parametrize("message", ["marsho hi", "/marsho hi", "Marsho hi", "/ marsho hi", "小棉 hi"])
def test_marsho_and_slash_marsho_work_whatever_command_start_is(starts: set[str], message: str) -> None:
    assert parse_request(message, NAMES, starts) == Request("chat", "hi")


@pytest.mark.parametrize(("message", "starts"), [
    ("!marsho hi", {"!"}), ("!!marsho hi", {"!!", "!"}), ("#marsho hi", {"/", "!", "#"}),
    ("! marsho hi", {"!"}), ("！marsho hi", {"！"}),
])
def test_any_configured_command_start_works_before_marsho(message: str, starts: set[str]) -> None:
    assert parse_request(message, NAMES, starts) == Request("chat", "hi")


def test_a_command_start_that_is_not_configured_is_not_taken_off() -> None:
    assert parse_request("!marsho hi", NAMES, {"/"}) is None
    assert parse_request("!/marsho hi", NAMES, {"!"}) is None


def test_a_command_start_that_begins_a_trigger_word_does_not_hide_it() -> None:
    assert parse_request("小棉 hi", NAMES, {"小"}) == Request("chat", "hi")
    assert parse_request("小小棉 hi", NAMES, {"小"}) == Request("chat", "hi")


@pytest.mark.parametrize(("message", "expected"), [
    ("marsho.rest", Request("unknown", "rest")),
    ("Marsho.RESTART now", Request("unknown", "restart")),
    ("/marsho.histroy", Request("unknown", "histroy")),
    ("小棉.foo", Request("unknown", "foo")),
    ("marsho.reset2", Request("unknown", "reset2")),
    ("marsho.reset", Request("reset", "")),
    ("marsho.nickname Neko", Request("nickname", "Neko")),
    # a space (or nothing) after the dot: a question
    ("marsho. what is this", Request("chat", "what is this")),
    ("marsho.", Request("chat", "")),
    ("marsho.\nwhat is this", Request("chat", "what is this")),
    # anything else after the dot is not for marsho
    ("marsho.ai/docs is a website", None),
    ("marsho.reset!", None),
    ("marsho..", None),
    ("marsho.a" + "b" * 40, None),
])
def test_a_word_right_after_the_dot_is_a_command_known_or_not(message: str, expected: Request | None) -> None:
    assert parse_request(message, NAMES, {"/"}) == expected


@pytest.fixture
def command_start(monkeypatch: pytest.MonkeyPatch):
    """Set the bot's COMMAND_START for this test."""
    def set_starts(starts: set[str]) -> None:
        monkeypatch.setattr(get_driver().config, "command_start", starts)
    return set_starts


@pytest.mark.parametrize("starts", [{"!"}, {""}, {"/", "!"}], ids=["bang", "empty", "several"])
async def test_every_trigger_is_answered_whatever_command_start_is(
    app: App, fake: FakeOpenAI, plugin_engine, command_start, starts: set[str]
) -> None:
    command_start(starts)
    messages = ["marsho one", "/marsho two", *(f"{s}marsho three" for s in sorted(starts) if s)]
    fake.push(*(text(f"answer {i}") for i in range(len(messages))))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for i, message in enumerate(messages):
            event = group_message(message)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, f"answer {i}"), result={"message_id": i})
    asked = [r["messages"][-1]["content"] for r in fake.requests]
    assert asked == [f"{label('user10001', 10001)}: {m.split('marsho ')[1]}" for m in messages]


async def test_a_nickname_the_adapter_takes_off_still_reaches_marsho(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With NICKNAME=["marsho"], OneBot's adapter strips "marsho" before any rule sees the message
    ("marsho.reset" arrives as ".reset"); marsho reads what was sent."""
    monkeypatch.setattr(get_driver().config, "nickname", {"marsho"})
    fake.push(text("first"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for message, answer in [("marsho one", "first"),
                                ("marsho.reset", "Done: I forgot this conversation (1 turn).")]:
            event = group_message(message, role="admin")
            _check_nickname(bot, event)  # what the adapter does before handle_event
            assert event.to_me and not event.get_plaintext().startswith("marsho")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert fake.requests[0]["messages"][-1]["content"] == f"{label('user10001', 10001)}: one"


# marsho.<unknown>


def test_an_unknown_command_names_the_closest_then_every_command() -> None:
    reply = unknown_command_text(EN_TEXTS, "marsho", "rest").split("\n")
    assert reply[0] == "marsho.rest is not one of my commands. Did you mean marsho.reset? All of them:"
    assert reply[1] == "marsho.reset  forget this conversation"
    assert sorted(reply[1:]) == sorted(EN_TEXTS(f"usage.{c}", name="marsho") for c in HELP_ORDER)


@pytest.mark.parametrize(("word", "closest"), [
    ("histroy", "history"), ("tool", "tools"), ("call", "calls"), ("nick", "nickname"),
    ("exprot", "export"), ("modle", "model"), ("hlep", "help"),
])
def test_the_closest_command_comes_first(word: str, closest: str) -> None:
    lines = unknown_command_text(EN_TEXTS, "marsho", word).split("\n")
    assert f"Did you mean marsho.{closest}?" in lines[0]
    assert lines[1].startswith(f"marsho.{closest} ")


def test_a_word_like_no_command_gets_the_list_without_a_guess() -> None:
    lines = unknown_command_text(EN_TEXTS, "marsho", "xyzzy").split("\n")
    assert lines[0] == "marsho.xyzzy is not one of my commands. These are:"
    assert len(lines) == 1 + len(HELP_ORDER)


def test_an_unknown_command_in_chinese() -> None:
    first = unknown_command_text(Texts("zh-CN"), "小棉", "rest").split("\n")[:2]
    assert first == ["我没有 小棉.rest 这个命令。你是想用 小棉.reset 吗？全部命令：", "小棉.reset  忘掉这段对话"]


async def test_marsho_dot_typo_answers_with_the_commands_and_asks_nothing(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho.rest")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, unknown_command_text(EN_TEXTS, "marsho", "rest")),
                            result={"message_id": 1})
    assert fake.requests == []


async def test_marsho_dot_space_question_is_asked(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("It is a dot."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = private_message("marsho. what is this")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "It is a dot."), result={"message_id": 1})
    assert fake.requests[0]["messages"][-1] == {"role": "user", "content": "what is this"}


# a failed answer gives its rate-limit slot back


def test_a_refunded_question_does_not_count_against_the_user_or_the_group() -> None:
    fair_use = FairUse(user_limit=1, group_limit=1, window=60, clock=Clock())
    turn = fair_use.admit("u", "g", superuser=False)
    assert turn.go
    turn.refund()
    turn.refund()  # once only: a second refund gives back nothing more
    turn.done()
    again = fair_use.admit("u", "g", superuser=False)
    assert again.go
    again.done()  # answered: it keeps its slot
    assert not fair_use.admit("u", "g", superuser=False).go
    assert not fair_use.admit("v", "g", superuser=False).go  # the group's slot is taken too


def test_a_refund_takes_back_only_its_own_question() -> None:
    clock = Clock()
    limiter = RateLimiter(2, 60, clock=clock)
    first = limiter.take("u")
    clock.now += 61  # the first left the window
    second = limiter.take("u")
    limiter.give_back("u", first)  # too late: nothing to give back, the second still counts
    assert limiter.wait("u") == 0 and limiter.take("u") is not None
    assert limiter.wait("u") > 0
    limiter.give_back("u", second)
    assert limiter.wait("u") == 0
    assert RateLimiter(0, 60).take("u") is None  # no limit: nothing counted, nothing to give back


FAILURES = {
    "endpoint": None,  # the fake endpoint answers 503
    "database": StoreError(code="store.read_history", url="sqlite://", detail="disk I/O error"),
    "internal": RuntimeError("boom"),
}
BRIEF = {
    "endpoint": "the model's service failed",
    "database": "my conversation database failed",
    "internal": "something went wrong inside me (our conversation so far is kept)",
}


@pytest.mark.parametrize("kind", sorted(FAILURES))
async def test_failed_answers_do_not_use_up_the_rate_limit(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A user limit of 2: two failures, then two answers all go through; the next is held back."""
    failures = [FAILURES[kind]] * 2
    chat = plugin_engine.chat

    async def failing_chat(*args: Any, **kwargs: Any) -> Any:
        failure = failures.pop(0) if failures else None
        if failure is not None:
            raise failure
        return await chat(*args, **kwargs)

    monkeypatch.setattr(plugin_engine, "chat", failing_chat)
    if kind == "endpoint":
        fake.push(error(503, "down"), error(503, "down"))
    fake.push(text("one"), text("two"))
    failed = f"Sorry, I could not answer: {BRIEF[kind]}. The bot's owner has the details in the log."
    with configured(marsho_user_rate_limit=2, marsho_rate_window=60):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            for answer in (failed, failed, "one", "two", "You are asking a bit fast: try again in 60 s."):
                event = group_message("marsho hi")
                ctx.receive_event(bot, event)
                ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert len(fake.requests) == (4 if kind == "endpoint" else 2)


async def test_a_failed_answer_gives_the_groups_slot_back_too(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(error(503, "down"), text("one"))
    failed = "Sorry, I could not answer: the model's service failed. The bot's owner has the details in the log."
    with configured(marsho_group_rate_limit=1, marsho_rate_window=60):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            for user, answer in [(1, failed), (2, "one"), (3, "You are asking a bit fast: try again in 60 s.")]:
                event = group_message("marsho hi", user_id=user)
                ctx.receive_event(bot, event)
                ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})


# counts


@pytest.mark.parametrize(("n", "expected"), [(0, "0 turns"), (1, "1 turn"), (2, "2 turns"), (21, "21 turns")])
def test_english_counts_are_singular_for_one_only(n: int, expected: str) -> None:
    assert EN_TEXTS.plural("count.turns", n) == expected


def test_chinese_counts_have_one_form() -> None:
    zh = Texts("zh-CN")
    assert [zh.plural("count.turns", n) for n in (1, 2)] == ["1 轮", "2 轮"]
    assert zh.plural("count.pictures", 1) == "1 张图片"


def test_every_count_has_a_singular_and_a_plural_in_english_and_one_form_in_chinese() -> None:
    counts = [key for key in EN if key.startswith("count.")]
    assert counts
    for key in counts:
        assert [form.count("{n}") for form in EN[key].split("|")] == [1, 1], key
        assert ZH[key].count("{n}") == 1 and "|" not in ZH[key], key


def test_no_text_says_picture_s_or_one_turns() -> None:
    # a word with "(s)" for its plural ("picture(s)"); "http(s)", the scheme, is no plural
    assert [key for key, value in EN.items() if "(s)" in value.replace("http(s)", "")] == []
    assert history_text(EN_TEXTS, 1, 1, 5, 8000, "tiktoken").startswith(
        "This conversation: 1 turn, 1 message, about 5 tokens stored")
    assert EN_TEXTS("tip.image_failed", pictures_text=EN_TEXTS.plural("count.pictures", 1),
                    reasons="x") == "(I could not load 1 picture: x.)"


# end to end: bot.py with COMMAND_START=["!"] and NICKNAME=["marsho"]


@pytest.fixture(scope="module")
def bang_bot(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = BotProcess(base_url=endpoint.base_url,
                         env={"COMMAND_START": json.dumps(["!"]), "NICKNAME": json.dumps(["marsho"])})
    with process, output_if_failed(process, request):
        yield process


@pytest.fixture(scope="module")
async def bang_sim(bang_bot: BotProcess) -> AsyncIterator[OneBotSim]:
    async with bang_bot.simulator(self_id=4242) as simulator:
        yield simulator


@pytest.mark.e2e
async def test_bot_with_a_bang_command_start_answers_every_trigger(
    endpoint: FakeOpenAI, bang_sim: OneBotSim
) -> None:
    endpoint.responder = lambda body: text(f"you said {body['messages'][-1]['content']!r}")
    for group, message in enumerate(["/marsho hi", "!marsho hi", "marsho hi", "Marsho, hi",
                                     "marsho. hi"], start=50001):
        event, reply = await bang_sim.ask(message, group_id=group)
        assert reply.text == f"you said '{label('user10001', 10001)}: hi'", (message, reply.text)
    assert len(endpoint.requests) == 5


@pytest.mark.e2e
async def test_bot_with_marsho_as_nickname_runs_commands_and_lists_them_on_a_typo(
    endpoint: FakeOpenAI, bang_sim: OneBotSim
) -> None:
    endpoint.reset()
    _, reply = await bang_sim.ask("marsho.history", group_id=50101)
    assert reply.text == "This conversation is empty."
    _, reply = await bang_sim.ask("!marsho.rest", group_id=50101)
    assert reply.text.startswith(
        "marsho.rest is not one of my commands. Did you mean marsho.reset? All of them:\n"
        "marsho.reset  forget this conversation\n")
    assert endpoint.requests == []
