"""End to end, the features of "a chat people like": a real `bot.py` process, the OneBot v11
simulator over WebSocket, the fake endpoint.

What nonebug cannot show: the OneBot adapter itself calling `get_msg` for a `reply` segment and
the quoted message reaching the model, pictures downloaded from the OneBot implementation's
address, poke notices, forward messages for long answers, a nickname kept in the database across
a restart, and a zh-CN bot.

One bot serves the module (English, vision for `fake-*`, a long poke cooldown, long answers as a
forward message); the last two tests restart it on the same data folder as a zh-CN bot, so they
stay last in this file.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import struct
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, text
from tests.loopback import LoopbackServer, QuietHandler, serve, shut
from tests.onebot_sim import (
    BotProcess,
    OneBotSim,
    image_segment,
    output_if_failed,
    reply_segment,
    show_output,
    text_segment,
)
from tests.speakers import label

pytestmark = pytest.mark.e2e

SELF_ID = 2233445566
ALICE = 10201
BOB = 10202
_groups = itertools.count(60001)


def new_group() -> int:
    """A group never used before in this module, so each test starts with empty history."""
    return next(_groups)


def _png(width: int = 2, height: int = 2) -> bytes:
    """A real (tiny, red) PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = _png()
PNG_DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


class PictureServer:
    """What a OneBot implementation serves pictures from: every path is the PNG but /missing...
    (404); paths asked for are recorded."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server: LoopbackServer | None = None

    def start(self) -> PictureServer:
        owner = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                with owner._lock:
                    owner.paths.append(self.path)
                if self.path.startswith("/missing"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(PNG)))
                self.end_headers()
                self.wfile.write(PNG)

        self._server = serve(Handler)
        return self

    def url(self, name: str) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}"

    def stop(self) -> None:
        shut(self._server)
        self._server = None


def user_messages(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def system_prompt(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")


def parts_of(content: Any) -> list[dict[str, Any]]:
    """A user message's content as OpenAI parts (a plain string is one text part)."""
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def joined_text(content: Any) -> str:
    return "\n".join(p["text"] for p in parts_of(content) if p["type"] == "text")


@pytest.fixture(scope="module")
def pictures() -> Iterator[PictureServer]:
    server = PictureServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bot's data folder (its SQLite database): it outlives the first bot process."""
    return tmp_path_factory.mktemp("marsho-features") / "data"


@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, data_dir: Path, request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = BotProcess(
        base_url=endpoint.base_url,
        env={
            "LOCALSTORE_DATA_DIR": str(data_dir),
            "MARSHO_TIMEOUT": "15",
            "MARSHO_VISION_MODELS": json.dumps(["fake-*"]),
            # the pictures are served from 127.0.0.1, as by an implementation serving files itself
            "MARSHO_IMAGE_ALLOW_PRIVATE": "true",
            "MARSHO_POKE_COOLDOWN": "600",
            "MARSHO_SPLIT_CHARS": "200",
            "MARSHO_MAX_SPLIT_MESSAGES": "1",
        },
    )
    with process, output_if_failed(process, request):
        yield process


@pytest.fixture(scope="module")
async def sim(bot: BotProcess) -> AsyncIterator[OneBotSim]:
    async with bot.simulator(self_id=SELF_ID) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def _clean(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> Iterator[None]:
    """Empty the fake (and the module's simulator, if the test uses it) around each test."""
    endpoint.reset()
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").clear()
    yield
    endpoint.reset()


# quoted messages ---------------------------------------------------------------------------------


async def test_a_quoted_message_reaches_the_model(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = new_group()
    quoted = await sim.group_message(
        "the password is swordfish", group_id=group, user_id=ALICE, nickname="alice-qq", card="Alice",
    )
    endpoint.push(text("They said the password is swordfish."))
    event, reply = await sim.ask(
        [reply_segment(quoted), text_segment("marsho what did they say?")],
        group_id=group, user_id=BOB, nickname="Bob",
    )

    # the adapter asked the simulator for the quoted message
    get_msg = await sim.wait_action(
        "get_msg", timeout=1, where=lambda a: int(a.params["message_id"]) == quoted["message_id"]
    )
    assert get_msg.response["status"] == "ok"

    assert reply.reply_id == event["message_id"]
    assert reply.params["group_id"] == group
    assert reply.text == "They said the password is swordfish."

    [request] = endpoint.requests
    [question] = user_messages(request)
    assert isinstance(question, str), question  # no picture: plain text for any endpoint
    assert question == (
        f"{label('Bob', BOB)}: [Quoted message from {label('Alice', ALICE)}]\n┆ the password is swordfish\n"
        "[End of quote]\n┆ what did they say?"
    )


async def test_quoting_the_bot_is_labelled_with_its_name(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    """A reply to the bot's own answer: get_msg answers with the sent message; the adapter then
    counts the message as addressed to the bot (no trigger word needed)."""
    group = new_group()
    endpoint.push(text("The answer is 42."))
    _, first = await sim.ask("marsho what is the answer?", group_id=group, user_id=BOB)
    sent_id = first.response["data"]["message_id"]

    endpoint.push(text("Because I said so."))
    event, reply = await sim.ask(
        [reply_segment(sent_id), text_segment("marsho why?")], group_id=group, user_id=BOB,
    )
    assert reply.text == "Because I said so."
    question = user_messages(endpoint.requests[-1])[-1]
    assert question.startswith(f"{label('user10202', BOB)}: [Quoted message from marsho]\n"), question
    assert "The answer is 42." in question
    assert question.endswith("[End of quote]\n┆ why?"), question


# pictures ----------------------------------------------------------------------------------------


async def test_a_picture_goes_to_a_vision_model_as_a_data_url(
    endpoint: FakeOpenAI, sim: OneBotSim, pictures: PictureServer
) -> None:
    endpoint.push(text("A red square."))
    event, reply = await sim.ask(
        [text_segment("marsho what is this?"), image_segment(pictures.url("own.png"))],
        group_id=new_group(), user_id=BOB,
    )
    assert reply.text == "A red square."
    assert "/own.png" in pictures.paths
    [question] = user_messages(endpoint.requests[0])
    assert question == [
        {"type": "text", "text": f"{label('user10202', BOB)}: what is this?"},
        {"type": "image_url", "image_url": {"url": PNG_DATA_URL}},
    ]


async def test_a_quoted_picture_goes_to_the_model_too(
    endpoint: FakeOpenAI, sim: OneBotSim, pictures: PictureServer
) -> None:
    group = new_group()
    quoted = await sim.group_message(
        [text_segment("look at my cat"), image_segment(pictures.url("cat.png"))],
        group_id=group, user_id=ALICE, card="Alice",
    )
    endpoint.push(text("A very red cat."))
    event, reply = await sim.ask(
        [reply_segment(quoted), text_segment("marsho what is in the picture?")],
        group_id=group, user_id=BOB, nickname="Bob",
    )
    assert reply.reply_id == event["message_id"]
    assert reply.text == "A very red cat."
    assert "/cat.png" in pictures.paths
    [question] = user_messages(endpoint.requests[0])
    assert parts_of(question) == [
        {"type": "text", "text": f"{label('Bob', BOB)}: [Quoted message from {label('Alice', ALICE)}]\n┆ look at my cat"},
        {"type": "image_url", "image_url": {"url": PNG_DATA_URL}},
        {"type": "text", "text": "[End of quote]"},
        {"type": "text", "text": "┆ what is in the picture?"},
    ]


async def test_a_picture_alone_is_asked_about_with_the_speaker_named(
    endpoint: FakeOpenAI, sim: OneBotSim, pictures: PictureServer
) -> None:
    endpoint.push(text("A red square."))
    event, reply = await sim.ask(
        [text_segment("marsho"), image_segment(pictures.url("alone.png"))], group_id=new_group(), user_id=BOB,
    )
    assert reply.text == "A red square."
    [question] = user_messages(endpoint.requests[0])
    assert [p["type"] for p in question] == ["text", "image_url"], question
    assert question[0]["text"].startswith("user10202"), question
    assert question[1]["image_url"]["url"] == PNG_DATA_URL


async def test_a_picture_that_cannot_be_loaded_is_a_placeholder_and_a_tip(
    endpoint: FakeOpenAI, sim: OneBotSim, pictures: PictureServer
) -> None:
    endpoint.push(text("I cannot see it."))
    event, reply = await sim.ask(
        [text_segment("marsho what is this?"), image_segment(pictures.url("missing.png"))],
        group_id=new_group(), user_id=BOB,
    )
    assert "/missing.png" in pictures.paths
    assert reply.text.startswith("I cannot see it.\n\n"), reply.text
    assert "(I could not load 1 picture: the server refused it.)" in reply.text
    [question] = user_messages(endpoint.requests[0])
    assert question == f"{label('user10202', BOB)}: what is this?\n[a picture that could not be loaded]"


async def test_a_quote_the_implementation_cannot_find_leaves_the_question_alone(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    """get_msg fails (the message is too old, say): the question is asked without a quote."""
    endpoint.push(text("No idea what you mean."))
    unknown = 987_654_321
    event, reply = await sim.ask(
        [reply_segment(unknown), text_segment("marsho what about this?")], group_id=new_group(),
    )
    failed = await sim.wait_action("get_msg", timeout=1,
                                   where=lambda a: int(a.params["message_id"]) == unknown)
    assert failed.response["status"] == "failed"
    assert reply.text == "No idea what you mean."
    [question] = user_messages(endpoint.requests[0])
    assert question == f"{label('user10001', 10001)}: what about this?"


# poke --------------------------------------------------------------------------------------------


async def test_a_poke_gets_a_line_and_a_second_poke_is_ignored(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    group = new_group()
    endpoint.push(text("Hey! Stop poking me~"))
    await sim.poke(user_id=ALICE, group_id=group)
    sent = await sim.wait_send(where=lambda a: a.params.get("group_id") == group)
    assert sent.action == "send_msg"
    assert sent.message[0] == {"type": "at", "data": {"qq": str(ALICE)}}
    assert sent.text.strip() == "Hey! Stop poking me~"
    [request] = endpoint.requests
    assert "poked you" in joined_text(user_messages(request)[-1])
    assert "tools" not in request, sorted(request)  # one short line: no tools

    await sim.poke(user_id=ALICE, group_id=group)  # within MARSHO_POKE_COOLDOWN
    await sim.expect_no_send(1.5, where=lambda a: a.params.get("group_id") == group)
    assert len(endpoint.requests) == 1


async def test_a_private_poke_gets_a_line_without_a_mention(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    endpoint.push(text("Meow?"))
    await sim.poke(user_id=BOB, group_id=None)
    sent = await sim.wait_send(where=lambda a: a.params.get("user_id") == BOB)
    assert (sent.action, sent.params["message_type"]) == ("send_msg", "private")
    assert sent.params.get("group_id") is None  # the adapter copies the notice's null group_id
    assert sent.message == [{"type": "text", "data": {"text": "Meow?"}}]


async def test_a_poke_at_someone_else_is_not_answered(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = new_group()
    await sim.poke(user_id=BOB, group_id=group, target_id=ALICE)
    await sim.expect_no_send(1.0, where=lambda a: a.params.get("group_id") == group)
    assert endpoint.requests == []


# long answers ------------------------------------------------------------------------------------


async def test_a_long_answer_goes_as_one_forward_message(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    paragraphs = [f"Paragraph {i}: " + " ".join(["lorem ipsum dolor"] * 8) + "." for i in range(1, 4)]
    answer = "\n\n".join(paragraphs)
    assert len(answer) > 200 and all(len(p) <= 200 for p in paragraphs)
    endpoint.push(text(answer))
    group = new_group()
    event = await sim.group_message("marsho tell me a long story", group_id=group)
    sent = await sim.wait_send(where=lambda a: a.params.get("group_id") == group)

    assert sent.action == "send_group_forward_msg", sent
    assert sent.params["group_id"] == group
    nodes = sent.nodes
    assert nodes and all(n["type"] == "node" for n in nodes)
    assert all(str(n["data"]["user_id"]) == str(SELF_ID) for n in nodes)
    assert sent.node_texts == paragraphs
    # nothing else went out for that answer
    await sim.expect_no_send(0.3, where=lambda a: a.params.get("group_id") == group)
    assert sim.sends_quoting(event) == []


async def test_a_long_answer_in_private_goes_as_a_private_forward_message(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    paragraphs = [f"Chapter {i}: " + " ".join(["consectetur"] * 12) + "." for i in range(1, 3)]
    endpoint.push(text("\n\n".join(paragraphs)))
    await sim.private_message("marsho tell me a long story", user_id=ALICE)
    sent = await sim.wait_send(where=lambda a: a.params.get("user_id") == ALICE)
    assert sent.action == "send_private_forward_msg", sent
    assert sent.node_texts == paragraphs


async def test_a_long_answer_is_sent_in_parts_when_the_forward_message_fails(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    def refuse(params: dict[str, Any]) -> Any:
        raise RuntimeError("forward messages are not supported here")

    paragraphs = [f"Part {i}: " + " ".join(["sit amet"] * 15) + "." for i in range(1, 4)]
    endpoint.push(text("\n\n".join(paragraphs)))
    sim.handlers["send_group_forward_msg"] = refuse
    try:
        group = new_group()
        event = await sim.group_message("marsho tell me a long story", group_id=group)
        refused = await sim.wait_send(where=lambda a: a.params.get("group_id") == group)
        first = await sim.reply_to(event)
        rest = [await sim.wait_send(where=lambda a: a.params.get("group_id") == group) for _ in range(2)]
    finally:
        del sim.handlers["send_group_forward_msg"]
    assert refused.action == "send_group_forward_msg" and refused.response["status"] == "failed"
    assert refused.node_texts == paragraphs
    assert [a.action for a in (first, *rest)] == ["send_msg"] * 3
    assert [first.text, *(a.text for a in rest)] == paragraphs
    assert [a.reply_id for a in rest] == [None, None]  # only the first part quotes the question


# nickname across a restart, and a zh-CN bot (keep these last: they stop the module's bot) -------


@pytest.fixture(scope="module")
async def restarted(
    endpoint: FakeOpenAI, bot: BotProcess, sim: OneBotSim, data_dir: Path,
) -> AsyncIterator[tuple[OneBotSim, str]]:
    """Alice sets a nickname on the module's bot, which is then stopped; a zh-CN bot starts on
    the same data folder. Yields its simulator and the answer to the nickname command."""
    _, reply = await sim.ask("marsho.nickname Alice", group_id=new_group(), user_id=ALICE)
    await sim.close()
    await asyncio.to_thread(bot.stop)

    process = BotProcess(
        base_url=endpoint.base_url,
        env={"LOCALSTORE_DATA_DIR": str(data_dir), "MARSHO_TIMEOUT": "15", "MARSHO_LANG": "zh-CN"},
    )
    try:
        async with process, process.simulator(self_id=SELF_ID) as simulator:
            yield simulator, reply.text
    except BaseException:
        show_output(process, "restarted bot.py")
        raise


async def test_a_nickname_survives_a_restart(
    endpoint: FakeOpenAI, restarted: tuple[OneBotSim, str]
) -> None:
    sim, before = restarted
    assert before == "Got it, I'll call you Alice!"
    _, reply = await sim.ask("marsho.nickname", group_id=new_group(), user_id=ALICE)
    assert reply.text.startswith("我叫你「Alice」"), reply.text

    # in a group the model knows her as the speaker "Alice", in private from the note after the
    # question (the system prompt stays the same whoever asks)
    endpoint.push(text("你好，Alice！"), text("又见面了！"))
    _, reply = await sim.ask("marsho 你好", group_id=new_group(), user_id=ALICE, nickname="alice-qq")
    assert reply.text == "你好，Alice！"
    _, reply = await sim.ask("marsho 又是我", private=True, user_id=ALICE, nickname="alice-qq")
    assert reply.text == "又见面了！"
    in_group, in_private = endpoint.requests
    assert user_messages(in_group) == [f"{label('Alice', ALICE)}: 你好"]
    words, note = user_messages(in_private)[-1].split("\n\n")
    assert words == "又是我"  # no speaker prefix in private
    assert "希望被称为「Alice」" in note and "Alice" not in system_prompt(in_private)


async def test_a_zh_cn_bot_answers_its_name_alone_with_the_chinese_usage(
    endpoint: FakeOpenAI, restarted: tuple[OneBotSim, str]
) -> None:
    sim, _ = restarted
    event, reply = await sim.ask("marsho", group_id=new_group())
    assert reply.reply_id == event["message_id"]
    assert reply.text.startswith("有问题就问我"), reply.text
    assert endpoint.requests == []


async def test_a_long_answer_is_split_at_paragraphs(
    endpoint: FakeOpenAI, restarted: tuple[OneBotSim, str]
) -> None:
    """MARSHO_LONG_ANSWER=split (the default) with room for the parts: several send_msg."""
    sim, _ = restarted
    paragraphs = [f"第 {i} 段：" + "喵" * 500 + "。" for i in range(1, 4)]
    endpoint.push(text("\n\n".join(paragraphs)))
    group = new_group()
    event = await sim.group_message("marsho 讲个长故事", group_id=group)
    first = await sim.reply_to(event)
    rest = [await sim.wait_send(where=lambda a: a.params.get("group_id") == group) for _ in range(2)]
    assert [first.text, *(a.text for a in rest)] == paragraphs
    assert all(a.action == "send_msg" and a.reply_id is None for a in rest)


async def test_a_picture_for_a_model_that_cannot_see_gets_a_chinese_tip(
    endpoint: FakeOpenAI, restarted: tuple[OneBotSim, str], pictures: PictureServer
) -> None:
    """The restarted bot has the default MARSHO_VISION_MODELS: fake-model is not among them."""
    sim, _ = restarted
    endpoint.push(text("我只读了文字。"))
    event, reply = await sim.ask(
        [text_segment("marsho 这是什么？"), image_segment(pictures.url("unseen.png"))],
        group_id=new_group(),
    )
    assert reply.text == "我只读了文字。\n\n（模型 fake-model 看不到图片，我略过了 1 张图片，只读了文字。）"
    assert "/unseen.png" not in pictures.paths
    assert user_messages(endpoint.requests[0]) == [f"{label('user10001', 10001)}: 这是什么？\n[图片]"]

