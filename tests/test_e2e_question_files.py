"""End to end, the files read with a question (issue 29): a real `bot.py`, the OneBot v11
simulator sending NapCat's `file` segments (served on 127.0.0.1, or through `get_file`), the
fake endpoint recording what the model got. A quoted PDF and a DOCX in the question are read
(their text, under their names, in the request); a long document is cut with a line saying so;
the next turn carries one line naming the file, not its text; a 30 MB file and a corrupt PDF get
clear replies and the bot answers the next question."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.document_files import docx, pdf
from tests.fake_openai import FakeOpenAI, text
from tests.loopback import shut
from tests.onebot_sim import (
    BotProcess,
    OneBotSim,
    file_segment,
    output_if_failed,
    reply_segment,
    text_segment,
)
from tests.test_e2e_group_context import last_question
from tests.test_e2e_knowledge_base import Files, send_file

pytestmark = pytest.mark.e2e

SELF_ID = 2233445600
ASKER = 10701
REPORT = pdf([["Quarterly report", "Revenue grew 12 percent in the third quarter."],
              ["Costs fell in the northern region."]])
MANUAL = docx([("h1", "Setup"), ("paragraph", "Hold the red button for 7 seconds to pair.")])
LONG = pdf([[f"Page {n} of the handbook."] + [f"Rule {n}.{k}: keep the lantern lit and the door shut."
                                             for k in range(12)] for n in range(1, 41)])
_groups = itertools.count(87001)


@pytest.fixture(scope="module")
def files() -> Iterator[Files]:
    served = Files()
    yield served
    shut(served.server)


@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = BotProcess(base_url=endpoint.base_url, env={
        "LOCALSTORE_DATA_DIR": str(tmp_path_factory.mktemp("marsho-files") / "data"), "MARSHO_TIMEOUT": "15",
        "MARSHO_IMAGE_ALLOW_PRIVATE": "true",  # the files are served on 127.0.0.1
    })
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


async def quoting(sim: OneBotSim, quoted: dict[str, Any], words: str, group: int) -> str:
    """`words` quoting `quoted`; the reply's text."""
    _, reply = await sim.ask([reply_segment(quoted["message_id"]), text_segment(words)], group_id=group,
                             user_id=ASKER)
    return reply.text


async def test_a_quoted_pdf_is_read_and_the_next_turn_carries_only_its_name(
        endpoint: FakeOpenAI, sim: OneBotSim, files: Files) -> None:
    group = next(_groups)
    shared = await send_file(sim, file_segment("report.pdf", url=files.url("/report.pdf", REPORT),
                                               file_size=len(REPORT)), group=group, user=ASKER)
    endpoint.push(text("Revenue grew 12% (report.pdf, page 1)."))
    assert await quoting(sim, shared, "marsho how did revenue do?", group) == (
        "Revenue grew 12% (report.pdf, page 1).")
    asked = last_question(endpoint.requests[-1])
    assert "[File report.pdf (PDF, 2 pages)" in asked
    assert "Revenue grew 12 percent in the third quarter." in asked and "Costs fell" in asked
    endpoint.push(text("About the report."))
    _, answer = await sim.ask("marsho what did I ask about?", group_id=group, user_id=ASKER)
    assert answer.text == "About the report."
    later = json.dumps(endpoint.requests[-1]["messages"], ensure_ascii=False)
    assert "[file report.pdf, 2 pages, read for this question]" in later
    assert "Revenue grew 12 percent" not in later


async def test_a_docx_in_the_question_is_read_through_get_file(
        endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = next(_groups)
    sim.files["/manual"] = {"base64": base64.b64encode(MANUAL).decode()}
    endpoint.push(text("Hold it for 7 seconds."))
    _, reply = await sim.ask([text_segment("marsho how do I pair it?"), file_segment("manual.docx", file_id="/manual")],
                             group_id=group, user_id=ASKER)
    assert reply.text == "Hold it for 7 seconds."
    asked = last_question(endpoint.requests[-1])
    assert "[File manual.docx (Word document)" in asked and "Hold the red button for 7 seconds to pair." in asked


async def test_a_file_the_implementation_keeps_on_this_machine_is_read_through_get_file(
        endpoint: FakeOpenAI, sim: OneBotSim, tmp_path: Any) -> None:
    group = next(_groups)
    kept = tmp_path / "manual.docx"
    kept.write_bytes(MANUAL)
    sim.files["/kept"] = {"file": str(kept)}  # NapCat on the same machine answers with its own copy
    endpoint.push(text("Hold it for 7 seconds."))
    _, reply = await sim.ask([text_segment("marsho how do I pair it?"), file_segment("manual.docx", file_id="/kept")],
                             group_id=group, user_id=ASKER)
    assert reply.text == "Hold it for 7 seconds."
    assert "Hold the red button for 7 seconds to pair." in last_question(endpoint.requests[-1])


async def test_a_long_document_is_cut_with_a_line_saying_so(
        endpoint: FakeOpenAI, sim: OneBotSim, files: Files) -> None:
    group = next(_groups)
    shared = await send_file(sim, file_segment("handbook.pdf", url=files.url("/handbook.pdf", LONG)),
                             group=group, user=ASKER)
    endpoint.push(text("Keep the lantern lit."))
    assert await quoting(sim, shared, "marsho", group) == "Keep the lantern lit."
    asked = last_question(endpoint.requests[-1])
    assert "Page 1 of the handbook." in asked and "Page 40 of the handbook." not in asked
    cut = next(line for line in asked.splitlines() if line.startswith("[cut: pages "))
    assert cut.endswith("-40 of 40 not included]")
    assert "[file handbook.pdf, 40 pages, read for this question]\nWhat is this file?" in asked


async def test_a_30_mb_file_and_a_corrupt_pdf_get_clear_replies_and_the_bot_answers_on(
        endpoint: FakeOpenAI, sim: OneBotSim, files: Files) -> None:
    group = next(_groups)
    big = await send_file(sim, file_segment("video.pdf", file_id="/video", file_size=30_000_000),
                          group=group, user=ASKER)
    assert await quoting(sim, big, "marsho", group) == (
        "video.pdf: 30 MB, over the limit of 20 MB (MARSHO_FILE_MAX_BYTES); not read.")
    corrupt = await send_file(sim, file_segment("broken.pdf", url=files.url(
        "/broken.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 40)), group=group, user=ASKER)
    endpoint.push(text("It is broken, but here is my answer."))
    reply = await quoting(sim, corrupt, "marsho what is in it?", group)
    assert reply.startswith("It is broken, but here is my answer.\n\nbroken.pdf was not read: it is a PDF "
                            "that could not be read")
    # the model knows a file came, and that it could not be read (the asker is told why)
    assert "[file broken.pdf, shared but it could not be read: the asker is told why]" in last_question(
        endpoint.requests[-1])
    endpoint.push(text("Still here."))
    _, answer = await sim.ask("marsho are you there?", group_id=group, user_id=ASKER)
    assert answer.text == "Still here."



async def test_a_message_of_another_chat_quoted_by_its_id_is_not_read(
        endpoint: FakeOpenAI, sim: OneBotSim, files: Files) -> None:
    group_a, group_b = next(_groups), next(_groups)
    secret = "The vault code is 4417."
    kept = await sim.group_message([text_segment("minutes: "), file_segment("minutes.txt", url=files.url(
        "/minutes.txt", secret.encode()))], group_id=group_a, user_id=10702)
    for where in ({"group_id": group_b, "user_id": ASKER}, {"private": True, "user_id": ASKER}):
        endpoint.push(text("ok"))
        _, reply = await sim.ask([reply_segment(kept), text_segment("marsho what does it say?")], **where)
        assert reply.text == "ok"
        asked = json.dumps(endpoint.requests[-1]["messages"], ensure_ascii=False)
        assert "4417" not in asked and "minutes" not in asked
    endpoint.push(text("It says the vault code is 4417."))  # in its own group it is read
    _, reply = await sim.ask([reply_segment(kept), text_segment("marsho what does it say?")],
                             group_id=group_a, user_id=ASKER)
    assert "4417" in last_question(endpoint.requests[-1])
