"""Questions as the model gets them (nonebot_plugin_marsho.chat.incoming): the asker's pictures and the
quoted message, through nonebug with a loopback server playing the OneBot implementation's
picture host."""

from __future__ import annotations

import base64
import json
import random
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from nonebot.adapters.onebot.v11 import GroupMessageEvent, Message, MessageSegment
from nonebot.adapters.onebot.v11.event import Reply as OneBotReply
from nonebot.adapters.onebot.v11.event import Sender
from nonebug import App

from nonebot_plugin_marsho.chat.incoming import Limits, read_question, sees_pictures
from nonebot_plugin_marsho.chat.media import MediaError, download_image
from nonebot_plugin_marsho.config import DEFAULT_VISION_MODELS, Config
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.session import session_key
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, text
from tests.loopback import LoopbackServer, QuietHandler, serve, shut
from tests.onebot import SELF_ID, group_message, onebot_bot, reply_call
from tests.speakers import label

NO_VISION_TIP = "(The model fake-model cannot see pictures, so I left out {n} and read only the text.)"
IMAGE_ONLY_TIP = "I can't see pictures with the model fake-model. Tell me in words what you'd like to know."
ASKER, BOBBY = label("user10001", 10001), label("Bobby", 10002)
"""The asker and the quoted member as a shared conversation names them."""
GROUP_KEY = session_key("OneBot V11", group_id="20001", user_id="10001", scope="group")


def make_png(width: int = 4, height: int = 3, seed: int = 0, noise: bool = False) -> bytes:
    """A real, valid RGB PNG built by hand; `seed` varies the colour so pictures differ, `noise`
    makes every pixel random (so it does not compress)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rng = random.Random(seed)
    pixel = bytes([(seed * 37) % 256, 0x80, 0x00])
    rows = b"".join(b"\x00" + (rng.randbytes(width * 3) if noise else pixel * width) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


PNGS = [make_png(seed=i) for i in range(6)]
BIG_PNG = make_png(64, 64, noise=True)  # ~12 KB of incompressible pixels, over the least MARSHO_IMAGE_MAX_BYTES


# --- the picture host ---------------------------------------------------------------------------


class PictureServer(LoopbackServer):
    hits: list[str]
    release: threading.Event


class PictureHandler(QuietHandler):
    """/p0.png ... /p5.png: small PNGs; /big.png: ~12 KB; /missing.png: 404; /text.png: text
    sent as image/png; /never.png: never answers (until the test ends)."""

    server: PictureServer

    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        name = self.path.split("?", 1)[0].lstrip("/")
        if name == "never.png":
            self.server.release.wait(30)
            return
        if name == "missing.png":
            body, status = b"no such picture", 404
        elif name == "text.png":
            body, status = b"<html>this is not a picture at all</html>", 200
        elif name == "big.png":
            body, status = BIG_PNG, 200
        elif name.startswith("p") and name.endswith(".png") and name[1:-4].isdigit():
            body, status = PNGS[int(name[1:-4])], 200
        else:
            body, status = b"", 404
        self.send_response(status)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def start_host() -> PictureServer:
    server = cast(PictureServer, serve(PictureHandler, server_class=PictureServer))
    server.hits = []
    server.release = threading.Event()
    return server


@pytest.fixture
def host(plugin_engine) -> Iterator[PictureServer]:
    """The picture host, on 127.0.0.1 like an implementation serving files itself: the bot may
    fetch from it here (test_a_picture_on_a_private_address_is_refused_by_default checks the
    default)."""
    server = start_host()
    with configured(marsho_image_allow_private=True):
        yield server
    server.release.set()
    shut(server)


def url(server: PictureServer, name: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/{name}"


def picture(address: str, file: str = "abc.image") -> MessageSegment:
    """An image segment as OneBot implementations send it: a file name and a download URL."""
    return MessageSegment("image", {"file": file, "url": address})


def asking(question: str, *pictures: MessageSegment, **options: Any) -> GroupMessageEvent:
    """A group message: the trigger and question text, then the pictures."""
    return group_message(Message([MessageSegment.text(question), *pictures]), **options)


def quoting(
    event: GroupMessageEvent, body: Message | str, *, user_id: int = 10002, nickname: str | None = "bob",
    card: str | None = "Bobby",
) -> GroupMessageEvent:
    """`event` replying to a message, as the OneBot adapter hands it over after its get_msg."""
    event.reply = OneBotReply(
        time=int(time.time()), message_type="group", message_id=777, real_id=777,
        sender=Sender(user_id=user_id, nickname=nickname, card=card), message=Message(body),
    )
    return event


class Like:
    """Equal to whatever `check` accepts (nonebug compares expected == actual); keeps the last."""

    def __init__(self, check: Callable[[Any], bool]) -> None:
        self.check = check
        self.seen: Any = None

    def __eq__(self, other: object) -> bool:
        self.seen = other
        return self.check(other)

    def __repr__(self) -> str:
        return f"Like(seen={self.seen!r})"


def reply_where(event: GroupMessageEvent, check: Callable[[str], bool]) -> tuple[str, dict[str, Any], Like]:
    """A `send_msg` call answering `event` (quoting it) whose text `check` accepts."""
    api, data = reply_call(event, "x")

    def message_ok(message: Any) -> bool:
        segments = list(message)
        return (len(segments) == 2 and segments[0].type == "reply"
                and str(segments[0].data["id"]) == str(event.message_id)
                and segments[1].type == "text" and check(segments[1].data["text"]))

    like = Like(message_ok)
    data["message"] = like
    return api, data, like


def user_content(fake: FakeOpenAI, index: int = -1) -> Any:
    """The content of the last user message of request `index`."""
    messages = fake.requests[index]["messages"]
    return [m for m in messages if m["role"] == "user"][-1]["content"]


def decoded(part: dict[str, Any]) -> bytes:
    assert part["type"] == "image_url"
    address = part["image_url"]["url"]
    prefix = "data:image/png;base64,"
    assert address.startswith(prefix)
    return base64.b64decode(address[len(prefix):], validate=True)


@pytest.fixture
def vision(plugin_engine) -> Iterator[None]:
    """fake-model becomes a model that sees pictures."""
    with configured(marsho_vision_models=["fake-*"]):
        yield


# --- which models see pictures ------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", ["gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet", "claude-3-5-sonnet-20241022",
              "gemini-2.0-flash", "qwen-vl-max", "glm-4v", "GPT-4o", "Qwen-VL-Max"],
)
def test_the_default_list_names_the_common_vision_models(model: str) -> None:
    assert sees_pictures(model, DEFAULT_VISION_MODELS)
    assert sees_pictures(model, Config().marsho_vision_models)


@pytest.mark.parametrize("model", ["gpt-3.5-turbo", "deepseek-chat", "fake-model", "qwen-max", "glm-4"])
def test_the_default_list_leaves_out_text_models(model: str) -> None:
    assert not sees_pictures(model, DEFAULT_VISION_MODELS)


def test_vision_patterns_are_shell_style_and_ignore_case() -> None:
    assert sees_pictures("My-Model-7B", ["my-model-*"])
    assert sees_pictures("my-model-7b", ["MY-MODEL-*"])
    assert sees_pictures("exact", ["exact"]) and not sees_pictures("exact-2", ["exact"])
    assert sees_pictures("a1", ["a?"]) and not sees_pictures("a12", ["a?"])
    assert sees_pictures("v3", ["v[0-9]"]) and not sees_pictures("vx", ["v[0-9]"])
    assert not sees_pictures("gpt-4o", [])
    # a whole-name match, not a search: "gpt-4o" does not match a model merely containing it
    assert not sees_pictures("my-gpt-4o-proxy", ["gpt-4o"])


# --- the asker's own pictures -------------------------------------------------------------------


async def test_a_vision_model_gets_the_picture_as_a_data_url_and_history_keeps_a_placeholder(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None
) -> None:
    fake.push(text("An orange square."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho what is this", picture(url(host, "p0.png")))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "An orange square."), result={"message_id": 1})
    content = user_content(fake)
    assert isinstance(content, list) and len(content) == 2
    assert content[0] == {"type": "text", "text": f"{ASKER}: what is this"}
    assert decoded(content[1]) == PNGS[0]
    assert host.hits == ["/p0.png"]
    stored = await plugin_engine.history.export(GROUP_KEY)
    dump = json.dumps(stored, ensure_ascii=False)
    assert "base64" not in dump and "data:image" not in dump and "image_url" not in dump
    assert [m["message"] for m in stored] == [
        {"role": "user", "content": f"{ASKER}: what is this\n[picture]"},
        {"role": "assistant", "content": "An orange square."},
    ]
    # the next turn sends the earlier picture as its placeholder only
    fake.push(text("Still orange."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho and now?")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Still orange."), result={"message_id": 2})
    assert "base64" not in json.dumps(fake.requests[-1]["messages"])
    assert user_content(fake) == f"{ASKER}: and now?"


async def test_a_model_that_cannot_see_gets_no_picture_and_the_asker_a_tip(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer
) -> None:
    fake.push(text("I read your words."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho what is this", picture(url(host, "p0.png")))
        ctx.receive_event(bot, event)
        answer = "I read your words.\n\n" + NO_VISION_TIP.format(n="1 picture")
        ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert user_content(fake) == f"{ASKER}: what is this\n[picture]"
    assert host.hits == []  # not even downloaded


async def test_a_picture_alone_for_a_model_that_cannot_see_gets_only_a_tip(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer
) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho", picture(url(host, "p0.png")))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, IMAGE_ONLY_TIP), result={"message_id": 1})
    assert fake.requests == []
    assert await plugin_engine.history.export(GROUP_KEY) == []


async def test_a_picture_alone_for_a_vision_model_is_asked_about_without_an_empty_text_part(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None
) -> None:
    fake.push(text("A square."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho", picture(url(host, "p1.png")))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "A square."), result={"message_id": 1})
    content = user_content(fake)
    assert isinstance(content, list)
    # some OpenAI-compatible endpoints refuse empty text blocks
    assert all(part.get("text") for part in content if part["type"] == "text"), content
    assert [decoded(p) for p in content if p["type"] == "image_url"] == [PNGS[1]]


async def test_a_picture_alone_in_a_shared_group_still_names_the_speaker(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None
) -> None:
    fake.push(text("A square."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho", picture(url(host, "p1.png")))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "A square."), result={"message_id": 1})
    texts = [p["text"] for p in user_content(fake) if p["type"] == "text"]
    assert texts and texts[0].startswith(f"{ASKER}:")


@pytest.mark.parametrize(
    ("name", "setting", "value", "reason"),
    [
        ("big.png", "marsho_image_max_bytes", 10_000, "too large (the limit is 0.01 MB)"),
        ("missing.png", None, None, "the server refused it"),
        ("text.png", None, None, "not a picture"),
        ("never.png", "marsho_image_timeout", 0.5, "not downloaded within 0.5 s"),
    ],
    ids=["too-large", "404", "not-an-image", "never-answers"],
)
async def test_a_picture_that_cannot_be_had_is_left_out_and_the_tip_says_why(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None,
    name: str, setting: str | None, value: Any, reason: str,
) -> None:
    fake.push(text("Words only."))
    started = time.monotonic()
    with configured(**({setting: value} if setting else {})):
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = asking("marsho what is this", picture(url(host, name)))
            ctx.receive_event(bot, event)
            api, data, like = reply_where(event, lambda answer: answer.startswith(
                "Words only.\n\n(I could not load 1 picture: ") and reason in answer
                and answer.endswith(".)"))
            ctx.should_call_api(api, data, result={"message_id": 1})
    assert time.monotonic() - started < 15
    assert user_content(fake) == f"{ASKER}: what is this\n[a picture that could not be loaded]"
    assert host.hits == [f"/{name}"]


async def test_a_picture_on_a_private_address_is_refused_by_default(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a message's picture address is not trusted with the bot's own network
    with configured(marsho_image_allow_private=False):
        fake.push(text("Words only."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = asking("marsho what is this", picture(url(host, "red.png")))
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, "Words only.\n\n(I could not load 1 picture: "
                                                   "the address is not allowed (the bot's owner can allow "
                                                   "local ones: MARSHO_IMAGE_ALLOW_PRIVATE).)"),
                                result={"message_id": 1})
        assert host.hits == []


async def test_a_non_image_body_labelled_png_is_refused() -> None:
    server = start_host()
    try:
        with pytest.raises(MediaError) as caught:
            await download_image(url(server, "text.png"), max_bytes=100_000, timeout=5)
        assert caught.value.kind == "not_image"
        assert "image/png" in caught.value.detail
    finally:
        shut(server)


async def test_only_the_first_max_images_pictures_are_sent(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with configured(marsho_max_images=2):
        fake.push(text("Three squares."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = asking("marsho compare", *(picture(url(host, f"p{i}.png"), f"{i}.image") for i in range(3)))
            ctx.receive_event(bot, event)
            answer = "Three squares.\n\n(I read at most 2 pictures per question; I skipped the rest.)"
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
        content = user_content(fake)
        assert [decoded(p) for p in content if p["type"] == "image_url"] == PNGS[:2]
        assert content[-1] == {"type": "text", "text": "[picture]"}  # the third, not downloaded
        assert sorted(host.hits) == ["/p0.png", "/p1.png"]


async def test_max_images_zero_sends_no_pictures_even_to_a_vision_model(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with configured(marsho_max_images=0):
        fake.push(text("Words only."))
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = asking("marsho what is this", picture(url(host, "p0.png")))
            ctx.receive_event(bot, event)
            # the tip names the setting, not the model (which could see the picture)
            ctx.should_call_api(*reply_call(event, "Words only.\n\n(Pictures are not sent to the model "
                                                   "here (MARSHO_MAX_IMAGES=0); I read only the text.)"),
                                result={"message_id": 1})
        assert user_content(fake) == f"{ASKER}: what is this\n[picture]"
        assert host.hits == []


async def test_an_inline_base64_picture_is_read_without_a_download(
    app: App, fake: FakeOpenAI, plugin_engine, vision: None
) -> None:
    fake.push(text("Inline."))
    inline = "base64://" + base64.b64encode(PNGS[3]).decode()
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho what is this", MessageSegment("image", {"file": inline}))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Inline."), result={"message_id": 1})
    assert [decoded(p) for p in user_content(fake) if p["type"] == "image_url"] == [PNGS[3]]


# --- quoted messages ----------------------------------------------------------------------------


async def test_a_quoted_message_comes_labelled_before_the_question(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("No, it is blue."), text("Still blue."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho is this true?"), "the sky is green")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "No, it is blue."), result={"message_id": 1})
        # no group card: the account name
        event = quoting(group_message("marsho sure?"), "the sky is green", card="")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Still blue."), result={"message_id": 2})
    # the speaker comes first, before the quote: every message of a shared group starts with who speaks
    assert user_content(fake, 0) == (
        f"{ASKER}: [Quoted message from {BOBBY}]\n┆ the sky is green\n[End of quote]\n┆ is this true?")
    assert user_content(fake, 1) == (
        f"{ASKER}: [Quoted message from {label('bob', 10002)}]\n┆ the sky is green\n[End of quote]\n┆ sure?")


async def test_quoting_the_bots_own_message_names_it_marsho(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("I said that, yes."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho why?"), "Cats purr when content.",
                        user_id=int(SELF_ID), nickname="SomeQQName", card=None)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "I said that, yes."), result={"message_id": 1})
    assert user_content(fake) == (
        f"{ASKER}: [Quoted message from marsho]\n┆ Cats purr when content.\n"
        "[End of quote]\n┆ why?")


async def test_a_quote_whose_sender_is_unknown_is_labelled_without_a_name(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("Unknown."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho who said it?"), "something", nickname=None, card=None)
        assert event.reply is not None
        event.reply.sender.user_id = None
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Unknown."), result={"message_id": 1})
    assert user_content(fake) == f"{ASKER}: [Quoted message]\n┆ something\n[End of quote]\n┆ who said it?"


async def test_the_trigger_alone_replying_to_a_message_asks_about_the_quote(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    fake.push(text("It means hello."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho"), "bonjour")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "It means hello."), result={"message_id": 1})
    assert len(fake.requests) == 1
    # the asker is named even without a question: the system prompt says every message is
    assert user_content(fake) == f"{ASKER}: [Quoted message from {BOBBY}]\n┆ bonjour\n[End of quote]"


async def test_quoted_pictures_go_to_a_vision_model_inside_the_quote(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None
) -> None:
    fake.push(text("Two squares."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(asking("marsho same colour?", picture(url(host, "p1.png"), "mine.image")),
                        Message([MessageSegment.text("look"), picture(url(host, "p2.png"), "q.image")]))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, "Two squares."), result={"message_id": 1})
    content = user_content(fake)
    assert [p["type"] for p in content] == ["text", "image_url", "text", "text", "image_url"]
    assert content[0]["text"] == f"{ASKER}: [Quoted message from {BOBBY}]\n┆ look"
    assert decoded(content[1]) == PNGS[2]
    assert content[2]["text"] == "[End of quote]"
    assert content[3]["text"] == "┆ same colour?"
    assert decoded(content[4]) == PNGS[1]
    stored = await plugin_engine.history.export(GROUP_KEY)
    assert "base64" not in json.dumps(stored)
    assert stored[0]["message"]["content"] == (
        f"{ASKER}: [Quoted message from {BOBBY}]\n┆ look\n[picture]\n[End of quote]\n┆ same colour?\n[picture]")


async def test_a_quoted_picture_for_a_model_that_cannot_see_becomes_a_placeholder(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer
) -> None:
    fake.push(text("I cannot see it."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho what is it?"),
                        Message([MessageSegment.text("look"), picture(url(host, "p2.png"))]))
        ctx.receive_event(bot, event)
        answer = "I cannot see it.\n\n" + NO_VISION_TIP.format(n="1 picture")
        ctx.should_call_api(*reply_call(event, answer), result={"message_id": 1})
    assert user_content(fake) == (
        f"{ASKER}: [Quoted message from {BOBBY}]\n┆ look\n[picture]\n[End of quote]\n┆ what is it?")
    assert host.hits == []


async def test_the_trigger_alone_quoting_only_a_picture_for_a_model_that_cannot_see_gets_the_tip(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer
) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho"), Message([picture(url(host, "p2.png"))]))
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, IMAGE_ONLY_TIP), result={"message_id": 1})
    assert fake.requests == []


# --- read_question on its own -------------------------------------------------------------------


async def test_read_question_without_a_quote_or_pictures_is_the_plain_text(app: App) -> None:
    async with app.test_api() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho hello")
        question = await read_question(bot, event, "hello", vision=True, model="m", limits=Limits(),
                                       marsho_name="marsho", t=Texts("en"))
    assert question.content() == "hello"
    assert question.tips == [] and question.images_seen == 0 and question.quoted_text == ""


# --- the cost of pictures -----------------------------------------------------------------------


def test_a_picture_costs_a_flat_count_never_its_base64() -> None:
    from nonebot_plugin_marsho.agent.tokens import IMAGE_TOKENS, TokenCounter
    from nonebot_plugin_marsho.chat.media import data_url

    huge = data_url(make_png(256, 256, noise=True), "image/png")  # ~260 KB of base64
    message = {"role": "user", "content": [{"type": "text", "text": "hi"},
                                           {"type": "image_url", "image_url": {"url": huge}}]}
    counter = TokenCounter()
    assert counter.count_message(message) == counter.count_message({"role": "user", "content": "hi"}) \
        + IMAGE_TOKENS


async def _ask_with_a_long_quote(app: App, fake: FakeOpenAI, host: PictureServer | None) -> Any:
    long_quote = "lorem ipsum dolor sit amet " * 2000  # ~54,000 characters, far over the budget
    body = Message([MessageSegment.text(long_quote)])
    if host is not None:
        body += picture(url(host, "p0.png"))
    fake.push(text("Long."))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = quoting(group_message("marsho summarise"), body)
        ctx.receive_event(bot, event)
        api, data, _ = reply_where(event, lambda answer: answer.startswith("Long."))
        ctx.should_call_api(api, data, result={"message_id": 1})
    return user_content(fake)


def _request_tokens(fake: FakeOpenAI, engine: Any) -> int:
    return sum(engine.counter.count_message(m) for m in fake.requests[-1]["messages"])


async def test_a_long_quote_is_cut_to_the_token_budget(app: App, fake: FakeOpenAI, plugin_engine) -> None:
    await _ask_with_a_long_quote(app, fake, None)
    assert _request_tokens(fake, plugin_engine) <= plugin_engine.max_tokens


async def test_a_long_quote_with_a_picture_is_cut_to_the_token_budget_too(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None
) -> None:
    content = await _ask_with_a_long_quote(app, fake, host)
    assert any(part["type"] == "image_url" for part in content)
    assert _request_tokens(fake, plugin_engine) <= plugin_engine.max_tokens


async def test_a_picture_alone_that_cannot_be_downloaded_gets_the_reason_not_the_vision_tip(
    app: App, fake: FakeOpenAI, plugin_engine, host: PictureServer, vision: None
) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = asking("marsho", picture(url(host, "missing.png")))
        ctx.receive_event(bot, event)
        # the model could see it; the download failed: say that, and ask the model nothing
        ctx.should_call_api(*reply_call(event, "(I could not load 1 picture: the server refused it.)"),
                            result={"message_id": 1})
    assert fake.requests == []
