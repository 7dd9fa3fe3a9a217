"""End to end, the knowledge base (issue 29): a real `bot.py`, the OneBot v11 simulator sending
file messages (NapCat's `file` segments, with `get_group_file_url` / `get_file`), the fake
endpoint scripted to call `docs__search`. A TXT an admin adds is found in a fresh conversation,
with its name, never in another group or a private chat; a member cannot add; listing and
removing work; a 30 MB file and a corrupt PDF get clear replies and the bot answers the next
question; the knowledge base survives a restart."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.loopback import QuietHandler, serve, shut
from tests.onebot_sim import (
    BotProcess,
    OneBotSim,
    file_segment,
    output_if_failed,
    reply_segment,
    text_segment,
)
from tests.test_e2e_group_context import last_question

pytestmark = pytest.mark.e2e

SELF_ID = 2233445599
ADMIN, MEMBER = 10601, 10602
RULES = "Group rules\n\nThe meetup is every Friday at the Lantern Cafe.\n\n禁止在群里发广告。".encode()
_groups = itertools.count(86001)
_calls = itertools.count(1)


class Files:
    """A loopback file server (as an implementation serving its files on 127.0.0.1)."""

    def __init__(self) -> None:
        self.bodies: dict[str, bytes] = {}
        files = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                body = files.bodies.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

        self.server = serve(Handler)

    def url(self, path: str, body: bytes) -> str:
        self.bodies[path] = body
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


@pytest.fixture(scope="module")
def files() -> Iterator[Files]:
    served = Files()
    yield served
    shut(served.server)


def new_bot(endpoint: FakeOpenAI, data_dir: Path) -> BotProcess:
    return BotProcess(base_url=endpoint.base_url, env={
        "LOCALSTORE_DATA_DIR": str(data_dir), "MARSHO_TIMEOUT": "15", "SUPERUSERS": json.dumps(["10099"]),
        "MARSHO_IMAGE_ALLOW_PRIVATE": "true",  # the files are served on 127.0.0.1
    })


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marsho-kb") / "data"


@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, data_dir: Path, request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = new_bot(endpoint, data_dir)
    with process, output_if_failed(process, request):
        yield process


@pytest.fixture(scope="module")
async def sim(bot: BotProcess) -> Any:
    async with bot.simulator(self_id=SELF_ID) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def _clean(endpoint: FakeOpenAI) -> Iterator[None]:
    endpoint.reset()
    yield
    endpoint.reset()


async def send_file(sim: OneBotSim, segment: dict[str, Any], *, group: int | None, user: int) -> dict[str, Any]:
    """The file message, pushed (nothing answers it: it does not call marsho)."""
    if group is None:
        return await sim.private_message([segment], user_id=user)
    return await sim.group_message([segment], group_id=group, user_id=user)


async def kb_add(sim: OneBotSim, quoted: dict[str, Any], *, group: int | None, user: int,
                 role: str = "member") -> str:
    """`marsho.kb add` quoting `quoted`; the reply's text."""
    message = [reply_segment(quoted["message_id"]), text_segment("marsho.kb add")]
    if group is None:
        _, reply = await sim.ask(message, private=True, user_id=user)
    else:
        _, reply = await sim.ask(message, group_id=group, user_id=user, role=role)
    return reply.text


def search(query: str) -> Any:
    return tool_calls(("docs__search", {"query": query}, f"d{next(_calls)}"))


def tool_result(endpoint: FakeOpenAI) -> str:
    """What the docs__search call answered, as the model read it in the next request."""
    return next(m["content"] for m in endpoint.requests[-1]["messages"] if m["role"] == "tool")


async def add_rules(sim: OneBotSim, files: Files, group: int) -> str:
    sim.roles.setdefault(group, {})[ADMIN] = "admin"
    message = await send_file(sim, file_segment("rules.txt", file_id=f"/rules-{group}", file_size=len(RULES)),
                              group=group, user=ADMIN)
    sim.files[f"/rules-{group}"] = {"url": files.url(f"/rules-{group}.txt", RULES)}
    return await kb_add(sim, message, group=group, user=ADMIN, role="admin")


async def test_an_admins_txt_is_found_in_a_fresh_conversation_and_only_in_its_group(
        endpoint: FakeOpenAI, sim: OneBotSim, files: Files) -> None:
    group, other = next(_groups), next(_groups)
    reply = await add_rules(sim, files, group)
    assert reply.startswith("rules.txt: 1 passage (#") and reply.endswith(" in marsho.kb).")
    assert any(a.action == "get_group_file_url" for a in sim.actions)
    await sim.ask("marsho.reset", group_id=group, user_id=MEMBER)  # a fresh conversation
    endpoint.push(search("meetup day"), text("Fridays, at the Lantern Cafe (rules.txt)."))
    _, answer = await sim.ask("marsho when is the meetup?", group_id=group, user_id=MEMBER)
    assert answer.text == "Fridays, at the Lantern Cafe (rules.txt)."
    found = tool_result(endpoint)
    assert "[rules.txt]" in found and "Lantern Cafe" in found
    # the passage went beside the question too, before the model searched
    asked = last_question(endpoint.requests[0])
    assert "[rules.txt]" in asked and "Lantern Cafe" in asked
    for where in ({"group_id": other}, {"private": True}):
        endpoint.reset()
        endpoint.push(search("meetup day"), text("I don't know."))
        await sim.ask("marsho when is the meetup?", user_id=MEMBER, **where)
        assert "Lantern" not in json.dumps(endpoint.requests, ensure_ascii=False)
        assert tool_result(endpoint) == "This chat's knowledge base has no documents."


async def test_a_member_cannot_add_but_may_list(sim: OneBotSim, files: Files) -> None:
    group = next(_groups)
    message = await send_file(sim, file_segment("notes.txt", url=files.url("/notes.txt", b"notes")),
                              group=group, user=MEMBER)
    assert await kb_add(sim, message, group=group, user=MEMBER) == (
        "Only the group's admins can add documents here (marsho.kb add).")
    _, listing = await sim.ask("marsho.kb", group_id=group, user_id=MEMBER)
    assert listing.text.startswith("This chat's knowledge base is empty.")
    await add_rules(sim, files, group)
    _, listing = await sim.ask("marsho.kb", group_id=group, user_id=MEMBER)
    lines = listing.text.splitlines()
    assert lines[0].startswith("This chat's knowledge base (1 document)")
    assert f" rules.txt · {len(RULES)} B · 1 passage · added 20" in lines[1]
    number = lines[1].split()[0]
    _, refused = await sim.ask(f"marsho.kb remove {number[1:]}", group_id=group, user_id=MEMBER)
    assert refused.text == "Only the group's admins can remove documents here."
    _, removed = await sim.ask(f"marsho.kb remove {number[1:]}", group_id=group, user_id=ADMIN, role="admin")
    assert removed.text == f"Removed {number} rules.txt and its 1 passage."
    _, listing = await sim.ask("marsho.kb", group_id=group, user_id=MEMBER)
    assert listing.text.startswith("This chat's knowledge base is empty.")


async def test_anyone_adds_their_own_in_private_through_get_file(sim: OneBotSim) -> None:
    person = 10677
    message = await send_file(sim, file_segment("diary.md", file_id="/diary"), group=None, user=person)
    sim.files["/diary"] = {"base64": base64.b64encode(b"# Locker\nMy locker code is 7712.").decode()}
    assert (await kb_add(sim, message, group=None, user=person)).startswith("diary.md: 1 passage (#")
    assert await kb_add(sim, message, group=None, user=person) == (
        "diary.md is already in this chat's knowledge base as #" + (await _first_number(sim, person)) +
        " (the same file): nothing to do.")


async def _first_number(sim: OneBotSim, person: int) -> str:
    _, listing = await sim.ask("marsho.kb", private=True, user_id=person)
    return listing.text.splitlines()[1].split()[0][1:]


async def test_a_30_mb_file_and_a_corrupt_pdf_get_clear_replies_and_the_bot_answers_on(
        endpoint: FakeOpenAI, sim: OneBotSim, files: Files) -> None:
    group = next(_groups)
    sim.roles.setdefault(group, {})[ADMIN] = "admin"
    declared = await send_file(sim, file_segment("video.pdf", file_id="/video", file_size=30_000_000),
                               group=group, user=ADMIN)
    assert await kb_add(sim, declared, group=group, user=ADMIN, role="admin") == (
        "video.pdf: 30 MB, over the limit of 20 MB (MARSHO_FILE_MAX_BYTES); not added.")
    silent = await send_file(sim, file_segment("dump.txt", url=files.url("/dump.txt", b"x" * 30_000_000)),
                             group=group, user=ADMIN)
    assert await kb_add(sim, silent, group=group, user=ADMIN, role="admin") == (
        "dump.txt: larger than the limit of 20 MB (MARSHO_FILE_MAX_BYTES); not added.")
    corrupt = await send_file(sim, file_segment("broken.pdf", url=files.url("/broken.pdf", b"%PDF-1.7\n" +
                                                                             bytes(range(256)) * 40)),
                              group=group, user=ADMIN)
    reply = await kb_add(sim, corrupt, group=group, user=ADMIN, role="admin")
    assert reply.startswith("broken.pdf was not added: it is a PDF that could not be read")
    endpoint.push(text("Still here."))
    _, answer = await sim.ask("marsho are you there?", group_id=group, user_id=MEMBER)
    assert answer.text == "Still here."


async def test_the_knowledge_base_survives_a_restart(endpoint: FakeOpenAI, data_dir: Path, bot: BotProcess,
                                                     sim: OneBotSim, files: Files) -> None:
    group = next(_groups)
    await add_rules(sim, files, group)
    restarted = new_bot(endpoint, data_dir)
    bot.stop()
    with restarted:
        async with restarted.simulator(self_id=SELF_ID) as again:
            _, listing = await again.ask("marsho.kb", group_id=group, user_id=MEMBER)
            assert "rules.txt" in listing.text
            endpoint.push(search("广告"), text("不能发广告。"))
            _, answer = await again.ask("marsho 群里能发广告吗", group_id=group, user_id=MEMBER)
            assert answer.text == "不能发广告。" and "禁止在群里发广告" in tool_result(endpoint)
