"""Answers delivered as they are written (MARSHO_SEGMENTED_REPLY, issue 26) and the typing
indicator: the paragraphs of a growing text (never cut inside a code block), what is left to
send of the final text, the segments and the growing message a stream makes; then through the
adapters: Telegram's message edited in place, its chat action, and NapCat's set_input_status in
private chats only (asked once of an implementation that lacks it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from nonebot.adapters.onebot.v11.exception import ActionFailed as OneBotActionFailed

from nonebot_plugin_marsho.chat import segments as segments_module
from nonebot_plugin_marsho.chat import typing_indicator
from nonebot_plugin_marsho.chat.outgoing import Delivery
from nonebot_plugin_marsho.chat.segments import Paragraphs, SegmentedReply, cut_at, remainder
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, streamed_text, text, tool_calls
from tests.platforms import PLATFORMS, Chat, forget_uninfo_sessions

THREE = "First paragraph.\n\nSecond paragraph.\n\nThird paragraph."
CODE = "Here is code:\n\n```python\ndef f():\n\n    return 1\n```\n\nThat is all."


def pieces(whole: str, size: int = 5) -> list[str]:
    return [whole[i:i + size] for i in range(0, len(whole), size)]


def fed(whole: str, size: int = 5) -> list[str]:
    paragraphs = Paragraphs()
    finished = [p for piece in pieces(whole, size) for p in paragraphs.add(piece)]
    return [*finished, paragraphs.rest()]


# --- the paragraphs of a growing text ---------------------------------------------------------


def test_a_paragraph_is_finished_by_the_blank_line_after_it() -> None:
    paragraphs = Paragraphs()
    assert paragraphs.add("First paragraph.\n") == []
    assert paragraphs.add("\nSecond") == ["First paragraph."]
    assert paragraphs.add(" paragraph.") == []
    assert paragraphs.rest() == "Second paragraph."


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_a_code_block_with_blank_lines_inside_stays_whole(size: int) -> None:
    assert fed(CODE, size) == ["Here is code:", "```python\ndef f():\n\n    return 1\n```", "That is all."]


def test_an_open_code_block_finishes_nothing_until_it_closes() -> None:
    paragraphs = Paragraphs()
    assert paragraphs.add("```\na\n\nb\n\n") == []
    assert paragraphs.add("```\n\nafter") == ["```\na\n\nb\n\n```"]


def test_a_table_and_a_formula_stay_whole() -> None:
    answer = "Intro.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n$$\nx^2\n$$\n\nEnd."
    assert fed(answer, 4) == ["Intro.", "| a | b |\n|---|---|\n| 1 | 2 |", "$$\nx^2\n$$", "End."]


def test_what_is_left_of_the_final_text_is_after_what_was_sent() -> None:
    assert remainder(THREE, ["First paragraph.", "Second paragraph."]) == "Third paragraph."
    assert remainder(THREE, []) == THREE


def test_words_before_a_round_of_tool_calls_are_not_in_the_final_text() -> None:
    assert remainder("The answer.\n\nMore.", ["Let me look.", "The answer."]) == "More."
    assert remainder("The answer.", ["Let me look."]) == "The answer."


# --- the segments a stream makes --------------------------------------------------------------


class FakeBot:
    """Just enough of a Bot for SegmentedReply: its adapter's name."""

    class adapter:  # noqa: N801
        @staticmethod
        def get_name() -> str:
            return "OneBot V11"


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, int]]:
    """Each segment sent: its text, whether it quotes the question, its pictures."""
    sends: list[tuple[str, bool, int]] = []

    async def send_answer(bot: Any, text: str, images: Any, delivery: Delivery, *, quote: bool = True) -> None:
        assert delivery.long_answer == "single"  # a segment is one message
        sends.append((text, quote, len(images)))

    monkeypatch.setattr(segments_module, "send_answer", send_answer)
    return sends


async def stream(reply: SegmentedReply, whole: str, size: int = 5) -> None:
    hook = reply.hook()
    for piece in pieces(whole, size):
        await hook(piece)


async def test_three_paragraphs_go_in_three_messages_the_first_quoting_the_question(sent) -> None:
    guarded: list[str] = []  # what the loop guard is told marsho said
    reply = SegmentedReply(FakeBot(), Delivery(), limit=3, on_sent=guarded.append)  # type: ignore[arg-type]
    await stream(reply, THREE)
    assert sent == [("First paragraph.", True, 0), ("Second paragraph.", False, 0)]
    assert await reply.finish(THREE, [b"png"])
    assert sent[-1] == ("Third paragraph.", False, 1)
    assert guarded == ["First paragraph.", "Second paragraph.", "Third paragraph."]


async def test_the_first_text_is_told_once_to_whoever_waits_for_it(sent) -> None:
    shown: list[str] = []
    reply = SegmentedReply(FakeBot(), Delivery(), limit=3)  # type: ignore[arg-type]
    reply.on_shown = lambda: shown.append("shown")
    await stream(reply, THREE)
    assert shown == ["shown"]


async def test_paragraphs_past_the_limit_go_in_the_last_message(sent) -> None:
    reply = SegmentedReply(FakeBot(), Delivery(), limit=2)  # type: ignore[arg-type]
    await stream(reply, THREE)
    assert await reply.finish(f"{THREE}\n\nA tip.")
    assert [text for text, _, _ in sent] == ["First paragraph.", "Second paragraph.\n\nThird paragraph.\n\nA tip."]


async def test_one_segment_is_the_whole_answer_at_the_end(sent) -> None:
    reply = SegmentedReply(FakeBot(), Delivery(), limit=1)  # type: ignore[arg-type]
    await stream(reply, THREE)
    assert sent == []
    assert await reply.finish(THREE)
    assert sent == [(THREE, True, 0)]


async def test_an_answer_that_did_not_stream_is_left_to_the_usual_delivery(sent) -> None:
    reply = SegmentedReply(FakeBot(), Delivery(), limit=3)  # type: ignore[arg-type]
    reply.hook()
    assert not await reply.finish(THREE)
    assert sent == []


async def test_a_failed_turn_sends_what_streamed_and_was_not_shown(sent) -> None:
    reply = SegmentedReply(FakeBot(), Delivery(), limit=3)  # type: ignore[arg-type]
    await stream(reply, "Done part.\n\nHalf a sent")
    await reply.fail()
    assert [text for text, _, _ in sent] == ["Done part.", "Half a"]  # not the word cut short


# --- the growing message ----------------------------------------------------------------------


class FakeReceipt:
    def __init__(self, edits: list[str]) -> None:
        self.edits = edits

    async def edit(self, message: Any) -> FakeReceipt:
        self.edits.append(str(message))
        return self


class Clock:
    """A clock the test moves, and a sleep that waits for the test to let it end."""

    def __init__(self) -> None:
        self.now = 100.0
        self.asleep = asyncio.Event()
        self.wake = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.asleep.set()
        await self.wake.wait()
        self.wake.clear()
        self.now += seconds


async def test_the_growing_message_is_edited_at_most_once_a_second_and_ends_whole(monkeypatch) -> None:
    firsts: list[str] = []
    edits: list[str] = []

    async def send(message: Any, **_: Any) -> FakeReceipt:
        firsts.append(str(message))
        return FakeReceipt(edits)

    monkeypatch.setattr(segments_module.UniMessage, "send", send)
    clock = Clock()
    reply = SegmentedReply(FakeBot(), Delivery(render_latex=False, render_images=False),  # type: ignore[arg-type]
                           limit=3, edits=True, clock=clock, sleep=clock.sleep)
    hook = reply.hook()
    await hook("First ")
    assert firsts == ["First"] and edits == []
    for piece in ("paragraph.", "\n\nSecond", " one"):  # all within the same second
        await hook(piece)
        await asyncio.sleep(0)
    await clock.asleep.wait()
    assert edits == []  # coalesced: waiting for the second to pass
    clock.wake.set()
    while not edits:
        await asyncio.sleep(0)
    # one edit carries the three pieces, but the word still being written
    assert edits == ["First paragraph.\n\nSecond"]
    assert await reply.finish("First paragraph.\n\nSecond one. And the end.")
    assert edits[-1] == "First paragraph.\n\nSecond one. And the end."
    assert len(firsts) == 1


def test_a_full_message_ends_at_its_last_paragraph_that_fits() -> None:
    assert cut_at("One two.\n\nThree four five.", 20) == len("One two.")
    assert cut_at("```\na\n\nb\n```\n\nafter", 12) == len("```\na\n\nb")  # a line, not the code's blank
    assert cut_at("one two three", 9) == len("one two")
    assert cut_at("x" * 30, 10) == 10


async def test_an_answer_longer_than_a_message_goes_on_in_a_new_one(monkeypatch) -> None:
    messages: list[list[str]] = []  # each growing message's texts, first to last

    class Receipt:
        def __init__(self, texts: list[str]) -> None:
            self.texts = texts

        async def edit(self, message: Any) -> Receipt:
            self.texts.append(str(message))
            return self

    async def send(message: Any, **_: Any) -> Receipt:
        messages.append([str(message)])
        return Receipt(messages[-1])

    monkeypatch.setattr(segments_module.UniMessage, "send", send)
    reply = SegmentedReply(FakeBot(), Delivery(render_latex=False, render_images=False),  # type: ignore[arg-type]
                           limit=3, edits=True, interval=0)
    reply.room = 40
    answer = "First paragraph is here.\n\nSecond paragraph is here.\n\nThird one."
    hook = reply.hook()
    for piece in pieces(answer, 4):
        await hook(piece)
        for _ in range(5):
            await asyncio.sleep(0)
    assert await reply.finish(answer)
    assert [texts[-1] for texts in messages] == ["First paragraph is here.",
                                                 "Second paragraph is here.\n\nThird one."]
    assert all(len(text) <= 40 for texts in messages for text in texts)


# --- through the adapters ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A new uninfo and typing state; the indicator shows at once (the fake answers quickly)."""
    monkeypatch.setattr(typing_indicator, "SHOW_AFTER", 0.0)
    forget_uninfo_sessions()
    typing_indicator._without_input_status.clear()
    yield
    forget_uninfo_sessions()
    typing_indicator._without_input_status.clear()


async def test_telegram_edits_one_message_as_the_answer_grows(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Telegram"]()
    fake.push(streamed_text("First paragraph.", "\n\nSecond ", "paragraph.", "\n\nThird paragraph."))
    with configured(marsho_segmented_reply=True):
        await chat.bot.handle_event(chat.event("group", "marsho tell me three things"))
    assert fake.requests[-1]["stream"] is True
    names = [api for api, _ in chat.calls]
    assert names.count("send_message") == 1, chat.calls
    edits = [data["text"] for api, data in chat.calls if api == "edit_message_text"]
    assert edits and edits[-1] == THREE
    assert ("send_chat_action", {"chat_id": int(chat.group_id), "action": "typing"}) in chat.calls
    assert names.index("send_chat_action") < names.index("send_message")


async def test_telegram_shows_typing_in_the_forum_topic_asked_in(app, fake: FakeOpenAI, plugin_engine) -> None:
    from nonebot.adapters.telegram.event import Event as TelegramEvent

    chat = PLATFORMS["Telegram"]()
    chat.remember(chat.user_id, None, "member")
    message = {"message_id": 901, "date": 1_700_000_000, "chat": {**chat._group(), "is_forum": True},
               "from": chat._user(chat.user_id), "text": "marsho hi", "message_thread_id": 7,
               "is_topic_message": True}
    fake.push(text("In the topic."))
    await chat.bot.handle_event(TelegramEvent.parse_event({"update_id": 902, "message": message}))
    assert chat.sent_texts() == ["In the topic."]
    actions = [data for api, data in chat.calls if api == "send_chat_action"]
    assert actions == [{"chat_id": int(chat.group_id), "action": "typing", "message_thread_id": 7}]


EDITED = {"Telegram": "edit_message_text", "Discord": "edit_message", "Kaiheila": "message_update"}


@pytest.mark.parametrize("name", ["Discord", "Kaiheila"])
async def test_discord_and_kook_edit_one_message_as_the_answer_grows(
    app, fake: FakeOpenAI, plugin_engine, name: str
) -> None:
    chat = PLATFORMS[name]()
    fake.push(streamed_text("First paragraph.", "\n\nSecond ", "paragraph.", "\n\nThird paragraph."))
    with configured(marsho_segmented_reply=True):
        await chat.bot.handle_event(chat.event(chat.wheres[0], "marsho tell me three things"))
    assert len(chat.sent_calls()) == 1, chat.calls
    edits = [data for api, data in chat.calls if api == EDITED[name]]
    assert edits, chat.calls
    assert edits[-1]["content"] == THREE


async def test_with_one_segment_a_streamed_answer_is_one_message_whatever_its_length(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = PLATFORMS["OneBot V11"]()
    long = "\n\n".join(f"Paragraph {i}: " + "word " * 40 for i in range(6))  # past MARSHO_SPLIT_CHARS
    fake.push(text(long))
    with configured(marsho_segmented_reply=True, marsho_segments=1):
        await chat.bot.handle_event(chat.event("group", "marsho a long one"))
    assert chat.sent_texts() == [long.strip()]
    assert fake.requests[-1]["stream"] is True


async def test_discord_shows_typing_in_the_channel_asked_in(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Discord"]()
    fake.push(text("Typed."))
    event = chat.event("channel", "marsho hi")
    await chat.bot.handle_event(event)
    actions = [data for api, data in chat.calls if api == "trigger_typing_indicator"]
    assert actions == [{"channel_id": event.channel_id}]


async def test_discord_goes_on_in_a_new_message_past_2000_characters(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Discord"]()
    paragraphs = [f"Paragraph {i}: " + "word " * 60 for i in range(10)]  # about 3,100 characters
    answer = "\n\n".join(p.strip() for p in paragraphs)
    fake.push(text(answer))
    with configured(marsho_segmented_reply=True):
        await chat.bot.handle_event(chat.event("channel", "marsho a long one"))
    created = [data for api, data in chat.sent_calls()]
    assert len(created) == 2, chat.calls
    last = {}  # each message's text at the end: as sent, then as last edited
    for api, data in chat.calls:
        if api in chat.sends:
            last[len(last)] = data.get("content")
        elif api == "edit_message":
            last[len(last) - 1] = data["content"]
    assert all(len(content) <= 2000 for content in last.values())
    assert "\n\n".join(last.values()) == answer


async def test_the_words_before_tool_calls_stay_and_the_answer_follows(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = PLATFORMS["OneBot V11"]()
    fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}, "c1"),
                         content="Let me look it up.\n\nOne moment."),
              text("Hot in Hangzhou."))
    with configured(marsho_segmented_reply=True):
        await chat.bot.handle_event(chat.event("group", "marsho weather in Hangzhou?"))
    assert chat.sent_texts() == ["Let me look it up.", "One moment.", "Hot in Hangzhou."]
    assert all(body["stream"] is True for body in fake.requests)


async def test_a_stream_cut_half_way_sends_what_came_then_says_so(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["OneBot V11"]()
    fake.push(streamed_text("Done part.\n\n", "Half a sent", done=False, finish=False))
    with configured(marsho_segmented_reply=True):
        await chat.bot.handle_event(chat.event("group", "marsho tell me"))
    sent = chat.sent_texts()
    assert sent[:2] == ["Done part.", "Half a"]  # not the word cut short
    assert len(sent) == 3 and sent[2].startswith("Sorry, I could not answer"), sent  # (a member's brief)
    assert len(fake.requests) == 1  # shown in part: not asked again


async def test_the_thinking_goes_after_an_answer_that_streamed(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["OneBot V11"]()
    fake.push(text("First.\n\nSecond.", reasoning="Let me think about it."))
    with configured(marsho_segmented_reply=True, marsho_send_reasoning=True):
        await chat.bot.handle_event(chat.event("group", "marsho think"))
    names = [api for api, _ in chat.calls if api.startswith("send_")]
    assert names == ["send_msg", "send_msg", "send_group_forward_msg"], chat.calls
    assert chat.sent_texts() == ["First.", "Second."]


async def test_without_segmented_replies_telegram_gets_the_answer_unstreamed(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = PLATFORMS["Telegram"]()
    fake.push(text(THREE))
    await chat.bot.handle_event(chat.event("group", "marsho tell me three things"))
    assert "stream" not in fake.requests[-1]
    assert chat.sent_texts() == [THREE]
    assert "edit_message_text" not in [api for api, _ in chat.calls]


def input_statuses(chat: Chat) -> list[dict[str, Any]]:
    return [data for api, data in chat.calls if api == "set_input_status"]


async def test_set_input_status_is_called_in_a_private_chat_and_not_in_a_group(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = PLATFORMS["OneBot V11"]()
    fake.push(text("In private."), text("In the group."))
    await chat.bot.handle_event(chat.event("private", "marsho hi"))
    assert input_statuses(chat) == [{"user_id": int(chat.user_id), "event_type": 1}]
    await chat.bot.handle_event(chat.event("group", "marsho hi"))
    assert len(input_statuses(chat)) == 1
    assert chat.sent_texts()[-1] == "In the group."


async def test_an_implementation_without_set_input_status_is_asked_once(
    app, fake: FakeOpenAI, plugin_engine
) -> None:
    chat = PLATFORMS["OneBot V11"]()
    answer = chat.answer

    def without_input_status(api: str, data: dict[str, Any]) -> Any:
        if api == "set_input_status":
            return OneBotActionFailed(status="failed", retcode=1404, msg="unknown action")
        return answer(api, data)

    chat.answer = without_input_status  # type: ignore[method-assign]
    fake.push(text("One."), text("Two."))
    await chat.bot.handle_event(chat.event("private", "marsho hi"))
    await chat.bot.handle_event(chat.event("private", "marsho again"))
    assert len(input_statuses(chat)) == 1
    assert chat.sent_texts() == ["One.", "Two."]


async def test_no_typing_indicator_when_it_is_turned_off(app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["OneBot V11"]()
    fake.push(text("Quietly."))
    with configured(marsho_typing_indicator=False):
        await chat.bot.handle_event(chat.event("private", "marsho hi"))
    assert input_statuses(chat) == []
    assert chat.sent_texts() == ["Quietly."]


async def test_a_secret_being_written_is_never_shown_in_part(monkeypatch) -> None:
    from nonebot_plugin_marsho.redaction import SECRETS

    secret = "sk-live-0123456789abcdefXYZ"
    shown: list[str] = []

    async def send(message: Any, **_: Any) -> FakeReceipt:
        shown.append(str(message))
        return FakeReceipt(shown)

    monkeypatch.setattr(segments_module.UniMessage, "send", send)
    SECRETS.add(secret)
    try:
        reply = SegmentedReply(FakeBot(), Delivery(render_latex=False, render_images=False),  # type: ignore[arg-type]
                               limit=3, edits=True, interval=0)
        hook = reply.hook()
        for piece in ("The key is ", *pieces(secret, 4), " and that is all."):
            await hook(piece)
            for _ in range(5):
                await asyncio.sleep(0)
        assert await reply.finish(f"The key is {secret} and that is all.")
    finally:
        SECRETS.discard(secret)
    assert len(shown) >= 3
    assert not any("sk-l" in text for text in shown), shown
    assert "that is all." in shown[-1]


async def test_a_question_asked_again_rewrites_the_growing_message(monkeypatch) -> None:
    shown: list[str] = []

    async def send(message: Any, **_: Any) -> FakeReceipt:
        shown.append(str(message))
        return FakeReceipt(shown)

    monkeypatch.setattr(segments_module.UniMessage, "send", send)
    reply = SegmentedReply(FakeBot(), Delivery(render_latex=False, render_images=False),  # type: ignore[arg-type]
                           limit=3, edits=True, interval=0)
    reply.room = 20
    first = reply.hook()
    for piece in ("An answer to the first line ", "that goes on and on "):  # past one message's room
        await first(piece)
        for _ in range(5):
            await asyncio.sleep(0)
    again = reply.hook()  # a follow-up line came: the question is asked again
    await again("Both lines answered ")
    for _ in range(5):
        await asyncio.sleep(0)
    assert shown[-1] == "Both lines answered"  # the new text, from its start
    assert await reply.finish("Both lines answered.")
    assert shown[-1] == "Both lines answered."
