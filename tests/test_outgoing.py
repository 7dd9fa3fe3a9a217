"""Answers going out: split at paragraphs or one forward message, formulas and markdown images as
pictures, the model's thinking as a forward message, and tool progress lines."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    GroupMessageEvent,
    Message,
    MessageSegment,
    PrivateMessageEvent,
)
from nonebot_plugin_alconna.uniseg import Image, Segment, Text
from nonebug import App

from nonebot_plugin_marsho.chat import outgoing
from nonebot_plugin_marsho.chat.media import MediaError
from nonebot_plugin_marsho.chat.outgoing import Delivery, rich_segments
from nonebot_plugin_marsho.chat.richtext import render_formula
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.onebot import SELF_ID, group_message, onebot_bot, private_message, reply_call

# the smallest valid PNG (what owner-kit__draw_pixel returns)
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
# three paragraphs of 60 characters: with MARSHO_SPLIT_CHARS=100 each is a chunk of its own
PARAGRAPHS = [f"Paragraph {n} " + "x" * 48 for n in ("one", "two", "six")]
LONG = "\n\n".join(PARAGRAPHS)


def send_call(event: GroupMessageEvent | PrivateMessageEvent, message: Message) -> tuple[str, dict]:
    """The `send_msg` call that sends `message` to the chat of `event`, quoting nothing."""
    if isinstance(event, GroupMessageEvent):
        return "send_msg", {"message_type": "group", "user_id": event.user_id,
                            "group_id": event.group_id, "message": message}
    return "send_msg", {"message_type": "private", "user_id": event.user_id, "message": message}


def quoting(event: GroupMessageEvent | PrivateMessageEvent, message: Message) -> tuple[str, dict]:
    """The `send_msg` call that sends `message` quoting the question."""
    api, data = reply_call(event, "")
    data["message"] = MessageSegment.reply(event.message_id) + message
    return api, data


def nodes(*contents: str | Message, name: str = "marsho") -> Message:
    """The nodes of a forward message from the bot."""
    return Message([MessageSegment.node_custom(user_id=int(SELF_ID), nickname=name,
                                               content=Message(content)) for content in contents])


def group_forward(event: GroupMessageEvent, messages: Message) -> tuple[str, dict]:
    return "send_group_forward_msg", {"group_id": event.group_id, "messages": messages}


@pytest.fixture
def split_at_100(plugin_engine) -> Iterator[None]:
    with configured(marsho_split_chars=100):
        yield


# --- long answers -------------------------------------------------------------------------------


async def test_a_short_answer_is_one_message_quoting_the_question(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    fake.push(text("Short and sweet."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho hi")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Short and sweet."), result={"message_id": 1})


async def test_a_long_answer_is_split_at_paragraphs_and_only_the_first_quotes(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    fake.push(text(LONG))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho tell me a lot")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, PARAGRAPHS[0]), result={"message_id": 1})
        ctx.should_call_api(*send_call(event, Message(PARAGRAPHS[1])), result={"message_id": 2})
        ctx.should_call_api(*send_call(event, Message(PARAGRAPHS[2])), result={"message_id": 3})


async def test_an_answer_needing_too_many_messages_goes_as_one_forward_message(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_max_split_messages=2):
        fake.push(text(LONG))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho tell me a lot")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*group_forward(event, nodes(*PARAGRAPHS)), result={"message_id": 1})


async def test_the_forward_message_is_signed_with_marsho_name(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="forward", marsho_name="Mallow"):
        fake.push(text(LONG))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("Mallow tell me a lot")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*group_forward(event, nodes(*PARAGRAPHS, name="Mallow")),
                                result={"message_id": 1})


async def test_forward_mode_forwards_even_two_chunks(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="forward"):
        fake.push(text("\n\n".join(PARAGRAPHS[:2])))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho tell me a bit")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*group_forward(event, nodes(*PARAGRAPHS[:2])), result={"message_id": 1})


async def test_forward_mode_leaves_a_short_answer_alone(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="forward"):
        fake.push(text(PARAGRAPHS[0]))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho hi")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, PARAGRAPHS[0]), result={"message_id": 1})


async def test_a_failed_forward_message_falls_back_to_separate_messages(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="forward"):
        fake.push(text(LONG))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho tell me a lot")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*group_forward(event, nodes(*PARAGRAPHS)),
                                exception=ActionFailed(retcode=100, msg="forward not supported"))
            ctx.should_call_api(*reply_call(event, PARAGRAPHS[0]), result={"message_id": 1})
            ctx.should_call_api(*send_call(event, Message(PARAGRAPHS[1])), result={"message_id": 2})
            ctx.should_call_api(*send_call(event, Message(PARAGRAPHS[2])), result={"message_id": 3})


async def test_single_mode_sends_a_long_answer_whole(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="single"):
        fake.push(text(LONG))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho tell me a lot")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, LONG), result={"message_id": 1})


async def test_a_private_chat_gets_a_private_forward_message(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="forward"):
        fake.push(text(LONG))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = private_message("marsho tell me a lot")
            ctx.receive_event(bot, event)
            ctx.should_call_api("send_private_forward_msg",
                                {"user_id": event.user_id, "messages": nodes(*PARAGRAPHS)},
                                result={"message_id": 1})


async def test_tool_pictures_go_with_the_last_message_of_a_split_answer(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    fake.push(tool_calls(("owner-kit__draw_pixel", {}, "c1")), text(LONG))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho draw and talk")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, PARAGRAPHS[0]), result={"message_id": 1})
        ctx.should_call_api(*send_call(event, Message(PARAGRAPHS[1])), result={"message_id": 2})
        ctx.should_call_api(*send_call(event, PARAGRAPHS[2] + MessageSegment.image(PIXEL)),
                            result={"message_id": 3})


async def test_tool_pictures_are_the_last_node_of_a_forward_answer(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    with configured(marsho_long_answer="forward"):
        fake.push(tool_calls(("owner-kit__draw_pixel", {}, "c1")), text(LONG))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho draw and talk")
            ctx.receive_event(bot, event)
            expected = nodes(*PARAGRAPHS, Message(MessageSegment.image(PIXEL)))
            ctx.should_call_api(*group_forward(event, expected), result={"message_id": 1})


# --- reasoning ----------------------------------------------------------------------------------


async def test_the_reasoning_comes_as_a_forward_message_before_the_answer(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_send_reasoning=True):
        fake.push(text("Forty-two.", reasoning="Let me count.\n\nYes, forty-two."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho the answer?")
            ctx.receive_event(bot, event)
            thinking = nodes("Let me count.\n\nYes, forty-two.", name="marsho: How I thought about it")
            ctx.should_call_api(*group_forward(event, thinking), result={"message_id": 1})
            ctx.should_call_api(*reply_call(event, "Forty-two."), result={"message_id": 2})


async def test_the_reasoning_of_a_private_chat_is_a_private_forward_message(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_send_reasoning=True):
        fake.push(text("Forty-two.", reasoning="Counting."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = private_message("marsho the answer?")
            ctx.receive_event(bot, event)
            thinking = nodes("Counting.", name="marsho: How I thought about it")
            ctx.should_call_api("send_private_forward_msg", {"user_id": event.user_id, "messages": thinking},
                                result={"message_id": 1})
            ctx.should_call_api(*reply_call(event, "Forty-two."), result={"message_id": 2})


async def test_the_reasoning_is_not_sent_by_default(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    fake.push(text("Forty-two.", reasoning="Let me count."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho the answer?")
        ctx.receive_event(bot, event)
        # the only call: the answer, without the thinking in it
        ctx.should_call_api(*reply_call(event, "Forty-two."), result={"message_id": 1})


async def test_a_failed_reasoning_forward_does_not_stop_the_answer(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_send_reasoning=True):
        fake.push(text("Forty-two.", reasoning="Counting."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho the answer?")
            ctx.receive_event(bot, event)
            thinking = nodes("Counting.", name="marsho: How I thought about it")
            ctx.should_call_api(*group_forward(event, thinking), exception=ActionFailed(retcode=100))
            ctx.should_call_api(*reply_call(event, "Forty-two."), result={"message_id": 2})


# --- tool progress ------------------------------------------------------------------------------


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> list[tuple[str, int]]:
    """Every message outgoing sends, as its text and how many requests the endpoint had by then."""
    seen: list[tuple[str, int]] = []
    real = outgoing._send

    async def recording(message, *, reply: bool) -> bool:
        seen.append((message.extract_plain_text(), len(fake.requests)))
        return await real(message, reply=reply)

    monkeypatch.setattr(outgoing, "_send", recording)
    return seen


async def test_tool_progress_is_announced_during_the_tool_round(
    app: App, fake: FakeOpenAI, plugin_engine,
    sends: list[tuple[str, int]],
) -> None:
    with configured(marsho_tool_progress=True):
        fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}),
                             ("marshoai-example__get_weather", {"location": "Beijing"}),
                             ("marshoai-example__get_current_time", {})),
                  text("Hot everywhere."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho weather?")
            ctx.receive_event(bot, event)
            progress = ("marsho is using marshoai-example__get_weather, "
                        "marshoai-example__get_current_time …")
            ctx.should_call_api(*send_call(event, Message(progress)), result={"message_id": 1})
            ctx.should_call_api(*reply_call(event, "Hot everywhere."), result={"message_id": 2})
        # announced before the tool results went back to the model
        assert sends == [(progress, 1), ("Hot everywhere.", 2)]


async def test_tool_progress_is_off_by_default(
    app: App, fake: FakeOpenAI, plugin_engine, sends: list[tuple[str, int]]
) -> None:
    fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"})), text("Hot."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho weather?")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Hot."), result={"message_id": 1})
    assert sends == [("Hot.", 2)]


async def test_one_progress_line_per_round_of_tool_calls(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_tool_progress=True):
        fake.push(tool_calls(("marshoai-example__get_current_time", {})),
                  tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"})),
                  text("Done."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho time and weather?")
            ctx.receive_event(bot, event)
            for tool in ("get_current_time", "get_weather"):
                line = f"marsho is using marshoai-example__{tool} …"
                ctx.should_call_api(*send_call(event, Message(line)), result={"message_id": 1})
            ctx.should_call_api(*reply_call(event, "Done."), result={"message_id": 2})


async def test_a_failed_progress_line_does_not_break_the_turn(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_tool_progress=True):
        fake.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}, "w1")),
                  text("Hot in Hangzhou."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho weather?")
            ctx.receive_event(bot, event)
            line = "marsho is using marshoai-example__get_weather …"
            ctx.should_call_api(*send_call(event, Message(line)), exception=ActionFailed(retcode=1))
            ctx.should_call_api(*reply_call(event, "Hot in Hangzhou."), result={"message_id": 2})
        # the tool ran and its result reached the model
        assert fake.requests[-1]["messages"][-1]["content"] == "The temperature of Hangzhou is 114514℃。"


# --- formulas and markdown images ---------------------------------------------------------------


FRACTION = render_formula(r"\frac{a}{b}")


def test_the_formula_used_here_can_be_drawn() -> None:
    assert FRACTION is not None and FRACTION.startswith(b"\x89PNG")


async def test_a_display_formula_is_sent_as_a_picture_with_its_text_kept(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    assert FRACTION is not None
    fake.push(text("The ratio is\n$$\\frac{a}{b}$$\nso there."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho ratio?")
        ctx.receive_event(bot, event)
        expected = "The ratio is\n" + MessageSegment.image(FRACTION) + "so there."
        ctx.should_call_api(*quoting(event, expected), result={"message_id": 1})
    # history keeps the formula's source
    stored = await plugin_engine.history.export("OneBot V11:group:20001")
    assert stored[-1]["message"]["content"] == "The ratio is\n$$\\frac{a}{b}$$\nso there."


async def test_a_formula_that_cannot_be_drawn_stays_text(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    answer = "Broken: $$\\frac{a$$ sorry."
    fake.push(text(answer))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho ratio?")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})


async def test_formulas_stay_text_when_render_latex_is_off(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    with configured(marsho_render_latex=False):
        answer = "The ratio is $$\\frac{a}{b}$$ there."
        fake.push(text(answer))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho ratio?")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})


async def test_a_markdown_image_on_loopback_stays_text(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.chat import media

    fetched: list[str] = []
    real = media.download_image

    async def spy(url: str, **options):
        fetched.append(url)
        assert options["guarded"] is True
        return await real(url, **options)

    monkeypatch.setattr(outgoing, "download_image", spy)
    answer = f"Look: ![cat](http://127.0.0.1:{fake.port}/cat.png) nice."
    fake.push(text(answer))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho a cat?")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert fetched == [f"http://127.0.0.1:{fake.port}/cat.png"]
    assert len(fake.requests) == 1  # the fake endpoint on loopback was never asked for the picture


async def test_a_downloaded_markdown_image_is_sent_as_a_picture(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def download(url: str, **options):
        assert url == "https://example.com/cat.png" and options["guarded"] is True
        return PIXEL, "image/png"

    monkeypatch.setattr(outgoing, "download_image", download)
    fake.push(text("Look:\n![cat](https://example.com/cat.png)\nnice."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho a cat?")
        ctx.receive_event(bot, event)
        expected = "Look:\n" + MessageSegment.image(PIXEL) + "nice."
        ctx.should_call_api(*quoting(event, expected), result={"message_id": 1})


async def test_markdown_images_stay_text_when_rendering_them_is_off(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def download(url: str, **options):
        raise AssertionError("nothing should be downloaded")

    monkeypatch.setattr(outgoing, "download_image", download)
    answer = "Look: ![cat](https://example.com/cat.png) nice."
    fake.push(text(answer))
    with configured(marsho_render_markdown_images=False):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho a cat?")
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})


async def test_formulas_in_a_split_answer_are_drawn_in_their_chunk(
    app: App, fake: FakeOpenAI, plugin_engine, split_at_100: None
) -> None:
    assert FRACTION is not None
    fake.push(text(f"{PARAGRAPHS[0]}\n\n$$\\frac{{a}}{{b}}$$\n\n{PARAGRAPHS[1]}"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho tell me a lot")
        ctx.receive_event(bot, event)
        # the formula's paragraph joins the first chunk (60 + 2 + 15 characters)
        expected = PARAGRAPHS[0] + "\n\n" + MessageSegment.image(FRACTION)
        ctx.should_call_api(*quoting(event, expected), result={"message_id": 1})
        ctx.should_call_api(*send_call(event, Message(PARAGRAPHS[1])), result={"message_id": 2})


# --- rich_segments on its own -------------------------------------------------------------------


def plain(segments: list[Segment]) -> list[object]:
    return [s.text if isinstance(s, Text) else ("image", s.raw) if isinstance(s, Image) else s
            for s in segments]


async def test_rich_segments_leave_plain_text_alone() -> None:
    assert plain(await rich_segments("just text, $5 and $10", Delivery())) == ["just text, $5 and $10"]


async def test_an_answer_that_is_only_a_formula_is_only_a_picture() -> None:
    assert plain(await rich_segments("$$\\frac{a}{b}$$", Delivery())) == [("image", FRACTION)]


async def test_inline_formulas_are_drawn_only_when_asked() -> None:
    source = "so $x^2$ grows"
    assert plain(await rich_segments(source, Delivery())) == [source]
    drawn = plain(await rich_segments(source, Delivery(render_inline_latex=True)))
    assert drawn[0] == "so" and drawn[1][0] == "image" and drawn[2] == " grows"  # type: ignore[index]


async def test_formulas_and_images_in_code_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    async def download(url: str, **options):
        raise AssertionError("nothing should be downloaded")

    monkeypatch.setattr(outgoing, "download_image", download)
    source = "```\n$$\\frac{a}{b}$$\n![x](https://example.com/x.png)\n```\nand `$$y$$`"
    assert plain(await rich_segments(source, Delivery())) == [source]


async def test_a_failed_download_stays_text(monkeypatch: pytest.MonkeyPatch) -> None:
    async def download(url: str, **options):
        if "bad" in url:
            raise MediaError("not_image", "HTML")
        if "boom" in url:
            raise RuntimeError("unexpected")
        return PIXEL, "image/png"

    monkeypatch.setattr(outgoing, "download_image", download)
    source = ("![a](https://example.com/bad.png)\n![b](https://example.com/ok.png)\n"
              "![c](https://example.com/boom.png)")
    assert plain(await rich_segments(source, Delivery())) == [
        "![a](https://example.com/bad.png)\n", ("image", PIXEL), "![c](https://example.com/boom.png)"]


async def test_at_most_four_markdown_images_of_an_answer_are_downloaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fetched: list[str] = []

    async def download(url: str, **options):
        fetched.append(url)
        return PIXEL, "image/png"

    monkeypatch.setattr(outgoing, "download_image", download)
    urls = [f"https://example.com/{n}.png" for n in range(6)]
    segments = plain(await rich_segments("\n".join(f"![{n}]({u})" for n, u in enumerate(urls)),
                                         Delivery()))
    assert fetched == urls[:4]
    assert segments == [*[("image", PIXEL)] * 4, f"![4]({urls[4]})\n![5]({urls[5]})"]


async def test_the_caps_hold_for_a_whole_split_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    fetched: list[str] = []
    drawn: list[str] = []
    sent: list[list[object]] = []

    async def download(url: str, **options):
        fetched.append(url)
        return PIXEL, "image/png"

    def draw(source: str) -> bytes:
        drawn.append(source)
        return PIXEL

    async def send(message, *, reply: bool) -> bool:
        sent.append(plain(list(message)))
        return True

    monkeypatch.setattr(outgoing, "download_image", download)
    monkeypatch.setattr(outgoing, "render_formula", draw)
    monkeypatch.setattr(outgoing, "_send", send)
    # ten paragraphs, each with two images and a formula: ten chunks of a split answer
    answer = "\n\n".join(f"![a{n}](https://example.com/a{n}.png) $$x_{n}$$ ![b{n}](https://example.com/b{n}.png)"
                         for n in range(10))
    bot = type("FakeBot", (), {"self_id": SELF_ID})()
    await outgoing.send_answer(bot, answer, [], Delivery(split_chars=100, max_split_messages=20))  # type: ignore[arg-type]
    # the first ones of the answer, not the first ones of every chunk
    assert sorted(fetched) == [f"https://example.com/{x}.png" for x in ("a0", "a1", "b0", "b1")]
    assert sorted(drawn) == sorted(f"x_{n}" for n in range(outgoing.MAX_FORMULAS))
    assert len(sent) == 10 and sent[9] == ["![a9](https://example.com/a9.png) $$x_9$$ "
                                           "![b9](https://example.com/b9.png)"]


async def test_the_delivery_defaults_match_the_settings() -> None:
    from nonebot_plugin_marsho.config import Config

    config = Config()
    defaults = Delivery()
    assert (defaults.long_answer, defaults.split_chars, defaults.max_split_messages) == (
        config.marsho_long_answer, config.marsho_split_chars, config.marsho_max_split_messages)
    assert (defaults.render_latex, defaults.render_inline_latex, defaults.render_images) == (
        config.marsho_render_latex, config.marsho_render_inline_latex,
        config.marsho_render_markdown_images)


def test_the_bot_delivers_as_its_settings_say(marsho) -> None:
    with configured(marsho_name="Mallow", marsho_split_chars=100, marsho_long_answer="forward",
                    marsho_lang="zh-CN") as bot:
        how = bot.delivery()
    assert (how.name, how.split_chars, how.long_answer) == ("Mallow", 100, "forward")
    assert how.texts("reply.reasoning_title") == "我的思考过程"
    assert marsho.delivery().name == "marsho"


async def test_formulas_are_drawn_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    threads: list[threading.Thread] = []

    def draw(source: str) -> bytes:
        threads.append(threading.current_thread())
        return PIXEL

    monkeypatch.setattr(outgoing, "render_formula", draw)
    await rich_segments("$$a$$ $$b$$", Delivery())
    assert len(threads) == 2 and threading.main_thread() not in threads
    await asyncio.sleep(0)


# --- answers that could not be saved ------------------------------------------------------------


async def test_an_answer_that_could_not_be_saved_still_brings_its_pictures(
    app: App, fake: FakeOpenAI, plugin_engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.exceptions import StoreError

    async def broken(*args, **kwargs):
        raise StoreError("disk full")

    monkeypatch.setattr(plugin_engine.history, "append_turn", broken)
    fake.push(tool_calls(("owner-kit__draw_pixel", {}, "c1")), text("Here is your pixel."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho draw me a pixel")
        ctx.receive_event(bot, event)
        api, data = reply_call(event, "Here is your pixel.\n(This exchange could not be saved; the bot's "
                                      "owner has the details in the log.)")
        data["message"] = data["message"] + MessageSegment.image(PIXEL)
        ctx.should_call_api(api, data, result={"message_id": 1})


async def test_a_forward_message_that_may_have_arrived_is_not_sent_again_in_parts(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    from nonebot.exception import NetworkError

    fake.push(text(LONG))
    with configured(marsho_split_chars=100, marsho_max_split_messages=2):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho tell me a lot")
            ctx.receive_event(bot, event)
            # a timeout: the implementation may well have posted it, so no second copy in parts
            ctx.should_call_api(*group_forward(event, nodes(*PARAGRAPHS)),
                                exception=NetworkError("WebSocket call api send_group_forward_msg timeout"))
