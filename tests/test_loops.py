"""No loops with other bots (issue 25), in process: who is taken for a bot (the marker, answers
faster than a person types, repeats of marsho's answers, the platform's mark), the per-chat
circuit breaker on a fake clock, the marker on outgoing answers and taken out of incoming
messages; then through nonebug: the pause said once, a superuser lifting it, superusers never
taken for bots."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from nonebot.adapters.onebot.v11 import Message, MessageSegment
from nonebug import App

from nonebot_plugin_marsho.chat import loops
from nonebot_plugin_marsho.chat.loops import (
    MARKER,
    MAX_CHATS,
    BotDetector,
    Breaker,
    LoopGuard,
    calls_a_marsho,
    platform_marks_bot,
    strip_marker,
    use_guard,
    with_marker,
)
from nonebot_plugin_marsho.config import Config
from tests.conftest import SUPERUSER_ID, configured
from tests.fake_openai import FakeOpenAI, text
from tests.onebot import group_message, onebot_bot, reply_call
from tests.speakers import label

ANSWER = "Marsho thinks the lighthouse keeper had a cat called Biscuit."
CHAT = "OneBot V11:group:1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


# the detector ---------------------------------------------------------------------------------


def test_a_message_carrying_the_marker_is_another_marshos(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    assert detector.verdict(CHAT, "b", "Marsho, and you?", marked=True) == "marker"
    assert detector.verdict(CHAT, "b", "Marsho, and you?", marked=False) == ""


def test_a_person_who_answers_quickly_once_or_twice_is_still_answered(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    verdicts = []
    for _ in range(2):
        detector.answered(CHAT, "p", ANSWER)
        clock.now += 0.5
        verdicts.append(detector.verdict(CHAT, "p", "why?", marked=False, quotes=True))
    assert verdicts == ["", ""]
    detector.answered(CHAT, "p", ANSWER)
    clock.now += 0.5  # a third time in a row, quoting marsho within half a second: a bot
    assert detector.verdict(CHAT, "p", "why?", marked=False, quotes=True) == "behaviour"
    assert detector.verdict(CHAT, "p", "a slow question, long after", marked=False) == "behaviour"
    clock.now += loops.BOT_SECONDS  # for BOT_SECONDS; then afresh
    assert detector.verdict(CHAT, "p", "a slow question, long after", marked=False) == ""
    assert detector.verdict("OneBot V11:group:2", "p", "why?", marked=False, quotes=True) == ""


def test_a_short_quick_line_that_quotes_nothing_is_a_person(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    for _ in range(10):
        detector.answered(CHAT, "p", ANSWER)
        clock.now += 0.2
        assert detector.verdict(CHAT, "p", "ok, and?", marked=False) == ""


def test_long_texts_pasted_one_after_another_quoting_nothing_are_a_persons(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    story = "Here is the long story of my morning, every detail of it, in order. " * 30
    for _ in range(8):
        detector.answered(CHAT, "p", "Noted.")
        clock.now += 0.5
        assert detector.verdict(CHAT, "p", story, marked=False) == ""


def test_another_marshos_answers_quoting_marsho_are_a_bots(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    reply = "Marsho, I wonder which of the old trains still runs through the mountains."
    verdicts = []
    for _ in range(3):
        detector.answered(CHAT, "b", ANSWER)
        clock.now += 6  # a model's answer of 75 characters: a person needs 2 s and 9 s to type it
        verdicts.append(detector.verdict(CHAT, "b", reply, marked=False, quotes=True))
    assert verdicts == ["", "", "behaviour"]


def test_a_reply_that_comes_after_reading_and_typing_starts_again(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    for _ in range(2):
        detector.answered(CHAT, "p", ANSWER)
        clock.now += 0.5
        assert detector.verdict(CHAT, "p", "why?", marked=False, quotes=True) == ""
    detector.answered(CHAT, "p", ANSWER)
    clock.now += 20
    assert detector.verdict(CHAT, "p", "why?", marked=False, quotes=True) == ""
    for _ in range(2):  # the suspicion started again at 0
        detector.answered(CHAT, "p", ANSWER)
        clock.now += 0.5
        assert detector.verdict(CHAT, "p", "why?", marked=False, quotes=True) == ""


def test_an_echo_is_a_bot_at_its_second_repeat_or_its_first_quoting_marsho(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    detector.answered(CHAT, "e", ANSWER)
    clock.now += 0.1
    assert detector.verdict(CHAT, "e", f"Marsho said: {ANSWER}", marked=False, quotes=True) == "behaviour"
    # a person who quotes the answer (re-punctuated) once: answered; twice: not
    detector.answered(CHAT, "q", ANSWER)
    clock.now += 0.1
    copy = ANSWER.upper().replace(" ", "  ").replace(".", "!")
    assert detector.verdict(CHAT, "q", f"you said {copy}", marked=False) == ""
    clock.now += 60
    assert detector.verdict(CHAT, "q", f"you said {copy}", marked=False) == "behaviour"


def test_an_answer_repeated_with_a_few_words_changed_is_an_echo(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    detector.answered(CHAT, "x", ANSWER)
    clock.now += 60
    changed = ANSWER.replace("keeper", "keepers").replace("Biscuit", "Biscuits")
    assert detector.verdict(CHAT, "e", changed, marked=False) == ""
    assert detector.verdict(CHAT, "e", changed, marked=False) == "behaviour"


def test_short_answers_are_never_taken_as_repeated(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    for _ in range(5):
        detector.answered(CHAT, "x", "ok!")
        clock.now += 60
        assert detector.verdict(CHAT, "p", "ok", marked=False) == ""


def test_detection_off_takes_nobody_for_a_bot(clock: Clock) -> None:
    detector = BotDetector(on=False, clock=clock)
    for _ in range(5):
        detector.answered(CHAT, "e", ANSWER)
        assert detector.verdict(CHAT, "e", f"Marsho said: {ANSWER}", marked=True, quotes=True) == ""


def test_answers_are_remembered_for_a_bounded_number_of_chats(clock: Clock) -> None:
    detector = BotDetector(clock=clock)
    for n in range(MAX_CHATS + 50):
        detector.answered(f"chat{n}", "p", ANSWER)
    assert len(detector._answers) == MAX_CHATS
    assert "chat0" not in detector._answers and f"chat{MAX_CHATS + 49}" in detector._answers
    assert all(len(a) <= loops.RECENT_ANSWERS for a in detector._answers.values())


def test_what_the_platform_marks_as_a_bot_is_told() -> None:
    kook = SimpleNamespace(extra=SimpleNamespace(author=SimpleNamespace(bot=True)))
    feishu = SimpleNamespace(event=SimpleNamespace(sender=SimpleNamespace(sender_type="app")))
    telegram = SimpleNamespace(from_=SimpleNamespace(is_bot=True))
    person = SimpleNamespace(extra=SimpleNamespace(author=SimpleNamespace(bot=False)),
                             event=SimpleNamespace(sender=SimpleNamespace(sender_type="user")))
    assert [platform_marks_bot(e) for e in (kook, feishu, telegram, person)] == [True, True, True, False]


# the breaker ----------------------------------------------------------------------------------


def asked(breaker: Breaker, chat: str = CHAT) -> str:
    """A request, answered when it goes."""
    check = breaker.check(chat)
    if check == "go":
        breaker.answered(chat)
    return check


def test_the_breaker_pauses_a_chat_once_over_the_limit_and_resumes_after_a_quiet_spell(clock: Clock) -> None:
    breaker = Breaker(limit=5, pause=120, clock=clock)
    checks = []
    for _ in range(8):
        checks.append(asked(breaker))
        clock.now += 1
    assert checks == ["go"] * 5 + ["trip", "paused", "paused"]
    assert asked(breaker, "OneBot V11:group:2") == "go"  # other chats are not held
    clock.now += 100
    assert asked(breaker) == "paused"  # not quiet yet: each call restarts the spell
    clock.now += 120
    assert asked(breaker) == "go"
    assert not breaker.is_paused(CHAT)


def test_requests_that_got_no_answer_do_not_count(clock: Clock) -> None:
    breaker = Breaker(limit=2, pause=120, clock=clock)
    assert {breaker.check(CHAT) for _ in range(1000)} == {"go"}  # refused by the queue, say
    assert not breaker.holds(CHAT)
    breaker.answered(CHAT)
    breaker.answered(CHAT)
    assert breaker.holds(CHAT) and not breaker.is_paused(CHAT)  # an unsolicited reply trips nothing
    assert breaker.check(CHAT) == "trip"


def test_a_chat_that_never_quiets_resumes_after_ten_pauses(clock: Clock) -> None:
    breaker = Breaker(limit=1, pause=10, clock=clock)
    assert [asked(breaker), asked(breaker)] == ["go", "trip"]
    for _ in range(99):
        clock.now += 1
        assert asked(breaker) == "paused"
    clock.now += 1  # 100 s = ten times the pause since it began
    assert asked(breaker) == "go"


def test_the_breaker_counts_a_sliding_minute(clock: Clock) -> None:
    breaker = Breaker(limit=3, pause=60, clock=clock)
    for _ in range(30):  # three a minute, for half an hour: never paused
        assert asked(breaker) == "go"
        clock.now += 20.5


def test_resume_lifts_a_pause_and_forgets_the_count(clock: Clock) -> None:
    breaker = Breaker(limit=2, pause=600, clock=clock)
    assert [asked(breaker) for _ in range(3)] == ["go", "go", "trip"]
    assert breaker.resume(CHAT) is True
    assert [asked(breaker) for _ in range(3)] == ["go", "go", "trip"]
    assert breaker.resume("OneBot V11:group:9") is False


def test_pauses_that_are_over_are_forgotten(clock: Clock) -> None:
    breaker = Breaker(limit=1, pause=10, clock=clock)
    for n in range(MAX_CHATS + 10):
        assert [asked(breaker, f"chat{n}"), asked(breaker, f"chat{n}")] == ["go", "trip"]
        clock.now += 1
    assert len(breaker._paused) <= MAX_CHATS and len(breaker._taken) <= MAX_CHATS + 1


def test_a_limit_of_0_is_no_breaker(clock: Clock) -> None:
    breaker = Breaker(limit=0, pause=60, clock=clock)
    assert {asked(breaker) for _ in range(10_000)} == {"go"}


def test_the_defaults_are_on() -> None:
    config = Config()
    assert config.marsho_bot_detection is True
    assert config.marsho_chat_answers_per_minute == 30 and config.marsho_chat_pause_seconds == 120


# the marker -----------------------------------------------------------------------------------


def test_the_marker_goes_after_the_text_or_after_a_closing_code_fence() -> None:
    assert with_marker("Marsho says hi") == f"Marsho says hi{MARKER}"
    fenced = "Marsho wrote:\n```python\nprint(1)\n```"
    assert with_marker(fenced) == f"{fenced}\n{MARKER}"  # the fence still closes the block
    assert with_marker("") == ""


def test_only_text_that_starts_with_a_trigger_word_could_call_a_marsho() -> None:
    assert calls_a_marsho("Marsho, what do you think?")
    assert calls_a_marsho("**ＭＡＲＳＨＯ** thinks so") and calls_a_marsho("/marsho hi")
    assert calls_a_marsho("小棉觉得可以") and calls_a_marsho("Alice says hi", ["alice"])
    assert not calls_a_marsho("Hello! I am marsho.") and not calls_a_marsho("")


def test_the_marker_is_taken_out_of_array_and_cq_messages_and_of_a_quote() -> None:
    array = group_message(Message([MessageSegment.text(f"Marsho, hi{MARKER}"), MessageSegment.face(1)]))
    cq = group_message(f"Marsho, &#91;hi&#93;{MARKER}[CQ:face,id=1]")  # a CQ string, as some send
    for event in (array, cq):
        assert strip_marker(event) is True
        assert MARKER not in event.get_plaintext() and MARKER not in event.raw_message
        assert MARKER not in event.original_message.extract_plain_text()
    assert cq.get_plaintext() == "Marsho, [hi]"
    quoting = group_message("marsho what did you mean?")
    quoting.reply = SimpleNamespace(message=Message(f"Marsho thinks so{MARKER}"), sender=None)  # type: ignore[assignment]
    assert strip_marker(quoting) is False  # its own text has no marker: a person quoting marsho
    assert quoting.reply.message.extract_plain_text() == "Marsho thinks so"
    assert strip_marker(group_message("marsho hi")) is False


# through nonebug ------------------------------------------------------------------------------


@pytest.fixture
def breaker_of_two(clock: Clock) -> Iterator[Clock]:
    with configured(marsho_chat_answers_per_minute=2) as marsho:
        use_guard(marsho, LoopGuard.from_settings(detection=True, answers_per_minute=2, pause_seconds=120,
                                                  clock=clock))
        yield clock


PAUSED = ("I answered 2 times here within a minute: I'm pausing in this chat until nobody has called me "
          "for 120 s. A superuser can lift this with marsho.resume.")


async def test_a_paused_chat_is_told_once_and_a_superuser_lifts_the_pause(
    app: App, fake: FakeOpenAI, plugin_engine, breaker_of_two: Clock
) -> None:
    fake.push(text("one"), text("two"), text("elsewhere"), text("four"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for answer, user in (("one", 10001), ("two", 10002)):
            event = group_message("marsho hi", user_id=user)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
        ctx.receive_event(bot, group_message("marsho hi", user_id=10003))
        # said once, quoting nobody
        ctx.should_call_api("send_msg", {"message_type": "group", "user_id": 10003, "group_id": 20001,
                                         "message": Message(PAUSED)}, result={"message_id": 2})
        ctx.receive_event(bot, group_message("marsho hi", user_id=10001))  # then silence
        elsewhere = group_message("marsho hi", group_id=20002)  # another group is answered
        ctx.receive_event(bot, elsewhere)
        ctx.should_call_api(*reply_call(elsewhere, "elsewhere"), result={"message_id": 3})
        resume = group_message("marsho.resume", user_id=int(SUPERUSER_ID))
        ctx.receive_event(bot, resume)
        ctx.should_call_api(*reply_call(resume, "Done: I answer in this chat again."), result={"message_id": 4})
        again = group_message("marsho hi", user_id=10001)
        ctx.receive_event(bot, again)
        ctx.should_call_api(*reply_call(again, "four"), result={"message_id": 5})
    assert len(fake.requests) == 4


async def test_a_member_cannot_lift_a_pause(
    app: App, fake: FakeOpenAI, plugin_engine, breaker_of_two: Clock
) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        resume = group_message("marsho.resume", user_id=10001)
        ctx.receive_event(bot, resume)
        ctx.should_call_api(*reply_call(resume, "Only the bot's superusers may use marsho.resume."),
                            result={"message_id": 1})


async def test_superusers_are_never_taken_for_bots_nor_paused(
    app: App, fake: FakeOpenAI, plugin_engine, breaker_of_two: Clock
) -> None:
    fake.push(*(text(f"answer {n}") for n in range(4)))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for n in range(4):  # the marker of another marsho, and over the limit of two
            event = group_message(f"marsho hi{MARKER}", user_id=int(SUPERUSER_ID))
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, f"answer {n}"), result={"message_id": n})
    assert [r["messages"][-1]["content"] for r in fake.requests] == [f"{label(f'user{SUPERUSER_ID}', SUPERUSER_ID)}: hi"] * 4


async def test_a_member_whose_message_carries_the_marker_is_not_answered(
    app: App, fake: FakeOpenAI, plugin_engine, breaker_of_two: Clock
) -> None:
    fake.push(text("hello"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, group_message(f"Marsho, what do you think?{MARKER}", user_id=10005))
        event = group_message("marsho hi", user_id=10006)  # the next person is answered
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "hello"), result={"message_id": 1})
    assert len(fake.requests) == 1


async def test_an_answer_that_starts_with_the_trigger_ends_with_the_marker(
    app: App, fake: FakeOpenAI, plugin_engine, breaker_of_two: Clock
) -> None:
    fake.push(text("Marsho thinks so."), text("**Marsho** wrote:\n```\ncode\n```"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for answer in ("Marsho thinks so." + MARKER, "**Marsho** wrote:\n```\ncode\n```\n" + MARKER):
            event = group_message("marsho hi", user_id=10007)
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
            breaker_of_two.now += 60  # a person's pace, and under the breaker's two a minute


def test_the_marker_goes_on_the_last_text_before_pictures_and_never_in_a_forward() -> None:
    from nonebot_plugin_alconna.uniseg import CustomNode, Image, Reference, Text, UniMessage

    from nonebot_plugin_marsho.chat.outgoing import _marked

    picture = Image(raw=b"\x89PNG\r\n\x1a\n", mimetype="image/png")
    sent = _marked(UniMessage([Text("Marsho drew "), picture, Text(" this"), picture]))
    assert [str(s) for s in sent if isinstance(s, Text)] == ["Marsho drew ", f" this{MARKER}"]
    assert sum(isinstance(s, Image) for s in sent) == 2
    forward = UniMessage([Reference(nodes=[CustomNode(uid="42", name="marsho", content=[Text("Marsho")])])])
    assert _marked(forward) is forward
    plain = UniMessage([Text("Hello! I'm marsho.")])
    assert _marked(plain) is plain
