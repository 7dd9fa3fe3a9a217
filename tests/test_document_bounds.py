"""The bounds a file is read within (issue 29, the attacker's findings): every format in the capped
worker process, killed at its time bound, a few workers at once across the bot, and every way a
file can break the sniffer or a parser a DocumentError naming the file."""

from __future__ import annotations

import asyncio
import os
import random
import struct
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from nonebot_plugin_marsho.agent import documents
from nonebot_plugin_marsho.agent.documents import DocumentError, Limits, extract, extract_here, kind_of, sniff
from nonebot_plugin_marsho.agent.documents.formats import MAX_PARTS
from nonebot_plugin_marsho.net import download
from tests import document_files
from tests.loopback import QuietHandler, serve, shut

ANSWER = '{"extracted": {"name": "x", "kind": "txt", "sections": [], "pages": 0, "cut": false}}'


def _fake_worker(tmp_path: Path, body: str) -> Path:
    """A worker script that logs to tmp_path/log.txt (its pid, then "+"/"-" around `body`)."""
    script = tmp_path / "worker.py"
    log = tmp_path / "log.txt"
    script.write_text(
        "import os, sys, time\n"
        "sys.stdin.buffer.read()\n"
        f"def log(mark):\n    with open({str(log)!r}, 'a') as f:\n        f.write(f'{{mark}} {{os.getpid()}}\\n')\n"
        f"log('+')\n{body}\nlog('-')\n"
        f"print({ANSWER!r})\n")
    return script


def _log(tmp_path: Path) -> list[tuple[str, int]]:
    path = tmp_path / "log.txt"
    if not path.exists():
        return []
    return [(mark, int(pid)) for mark, pid in (line.split() for line in path.read_text().splitlines())]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("name", ["notes.txt", "readme.md", "table.csv", "page.html", "report.pdf"])
async def test_every_format_is_sniffed_and_read_in_the_worker_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(documents, "WORKER", _fake_worker(tmp_path, ""))
    monkeypatch.setattr(documents, "kind_of", None)  # never sniffed in the bot's process
    monkeypatch.setattr(documents, "extract_here", None)
    await extract(b"%PDF-1.4\n" if name.endswith(".pdf") else b"some text", name)
    assert [mark for mark, _ in _log(tmp_path)] == ["+", "-"]


async def test_a_web_page_is_read_within_the_worker_memory_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    page = b"<html><body>" + b"<div><p>word</p></div>" * 200_000 + b"</body></html>"
    assert (await extract(page, "page.html")).chars > 1_000_000
    monkeypatch.setattr(documents, "WORKER_MEMORY", 120_000_000)
    with pytest.raises(DocumentError, match="(?i)memory") as caught:
        await extract(page, "page.html")
    assert caught.value.code == "corrupt"


async def test_a_text_file_read_past_its_timeout_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "WORKER", _fake_worker(tmp_path, "time.sleep(600)"))
    with pytest.raises(DocumentError, match="longer than 1 s") as caught:
        await extract(b"# Heading\n" * 1000, "headings.md", timeout=1)
    assert caught.value.code == "timeout"
    [(mark, pid)] = _log(tmp_path)
    assert mark == "+" and _gone(pid)


async def test_at_most_two_workers_read_at_once_and_the_others_wait_their_turn(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "WORKER", _fake_worker(tmp_path, "time.sleep(0.3)"))
    await asyncio.gather(*(extract(b"text", f"file{number}.txt", timeout=60) for number in range(6)))
    marks = [mark for mark, _ in _log(tmp_path)]
    running, most = 0, 0
    for mark in marks:
        running += 1 if mark == "+" else -1
        most = max(most, running)
    assert marks.count("+") == 6 and most == documents.WORKERS_AT_ONCE == 2


async def test_a_file_whose_turn_does_not_come_in_time_is_told_the_bot_is_busy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "WORKERS_AT_ONCE", 1)
    monkeypatch.setattr(documents, "_slots", weakref.WeakKeyDictionary())
    monkeypatch.setattr(documents, "WORKER", _fake_worker(tmp_path, "time.sleep(600)"))
    first = asyncio.ensure_future(extract(b"text", "first.txt", timeout=3))
    while not _log(tmp_path):  # the first one holds the only slot
        await asyncio.sleep(0.05)
    with pytest.raises(DocumentError, match="busy reading other files") as caught:
        await extract(b"text", "second.txt", timeout=0.5)
    assert caught.value.code == "timeout" and caught.value.name == "second.txt"
    with pytest.raises(DocumentError, match="longer than 3 s"):
        await first
    assert len(_log(tmp_path)) == 1  # the second never started a worker


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
async def test_a_docx_and_an_xlsx_with_a_line_separator_are_read(separator: str) -> None:
    contract = document_files.docx([("paragraph", f"Clause 1: rent is due on the 1st.{separator}Clause 2: no pets.")])
    extracted = await extract(contract, "contract.docx")
    assert "Clause 2: no pets." in extracted.sections[0].text
    sheet = document_files.xlsx({"Prices": [["item", "price"], [f"tea{separator}green", "3"]]})
    assert "green | 3" in (await extract(sheet, "prices.xlsx")).sections[0].text


async def test_a_worker_that_stops_is_told_in_a_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys\nsys.stdin.buffer.read()\nsys.exit('killed by the kernel')\n")
    monkeypatch.setattr(documents, "WORKER", script)
    with pytest.raises(DocumentError, match="a file the reader stopped on .killed by the kernel"):
        await extract(document_files.docx([("paragraph", "hello")]), "notes.docx")


def _odd_version_docx() -> bytes:
    """A DOCX whose central directory says it needs ZIP version 25.5 (zipfile: NotImplementedError)."""
    data = bytearray(document_files.docx([("paragraph", "hello")]))
    struct.pack_into("<H", data, bytes(data).find(b"PK\x01\x02") + 6, 255)
    return bytes(data)


async def test_a_zip_of_a_version_zipfile_does_not_know_is_a_document_error_naming_it() -> None:
    with pytest.raises(DocumentError) as caught:
        kind_of(_odd_version_docx(), "odd.docx")
    assert caught.value.name == "odd.docx" and caught.value.code == "corrupt"
    assert caught.value.detail.startswith("a Word document (DOCX) whose archive could not be read")
    with pytest.raises(DocumentError, match="odd.docx"):
        await extract(_odd_version_docx(), "odd.docx")


def test_mutated_docx_files_only_ever_raise_document_errors() -> None:
    """The attacker's fuzzing (3,000 mutations found 7 NotImplementedErrors out of the sniffer)."""
    base = document_files.docx([("paragraph", "hello")])
    chance = random.Random(1)
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(chance.randint(1, 20)):
            data[chance.randrange(len(data))] = chance.randrange(256)
        if chance.random() < 0.3:
            data = data[:chance.randrange(len(data))]
        try:
            if kind_of(bytes(data), "a.docx") == "docx":
                extract_here(bytes(data), "a.docx")
        except DocumentError as error:
            assert error.name == "a.docx"


@pytest.mark.parametrize("name", ["notes.md", "notes.txt"])
def test_a_text_that_mentions_the_pdf_header_is_text(name: str) -> None:
    text = b"# How PDFs start\n\nEvery PDF begins with the bytes %PDF-1.7 and a binary comment.\n"
    assert sniff(text) is None
    assert "%PDF-1.7" in extract_here(text, name).sections[0].text


@pytest.mark.parametrize("lead", [b"", b"\xef\xbb\xbf", b"\r\n\r\n", b"junk\n"])
def test_a_pdf_header_after_a_few_bytes_is_a_pdf(lead: bytes) -> None:
    assert sniff(lead + document_files.pdf([["a"]])) == "pdf"


@pytest.mark.parametrize("name", ["empty.txt", "empty.md", "empty.csv", "empty.html"])
def test_an_empty_text_file_is_not_told_about_scanned_pdfs(name: str) -> None:
    with pytest.raises(DocumentError) as caught:
        extract_here(b"  \n\n", name)
    assert caught.value.code == "no_text" and "PDF" not in caught.value.detail


def test_a_docx_of_too_many_parts_names_the_parts_limit() -> None:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
        for number in range(MAX_PARTS):
            archive.writestr(f"p{number}", "")
    with pytest.raises(DocumentError) as caught:
        extract_here(buffer.getvalue(), "parts.docx")
    assert caught.value.code == "zip_bomb"
    assert f"{MAX_PARTS + 1} parts, over the limit of {MAX_PARTS}" in caught.value.detail
    assert "MB" not in caught.value.detail



class _Slow(QuietHandler):
    """Answers each GET once `release` is set (at once when it is set already), counting the
    requests in flight at once; `pause` is how long each waits while it is not set."""

    lock: threading.Lock
    running: int
    most: int
    seen: int
    release: threading.Event
    pause: float

    def do_GET(self) -> None:  # http.server's name
        cls = type(self)
        with cls.lock:
            cls.running += 1
            cls.seen += 1
            cls.most = max(cls.most, cls.running)
        cls.release.wait(cls.pause)
        with cls.lock:
            cls.running -= 1
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"file")


@pytest.fixture
def slow_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, type[_Slow]]]:
    monkeypatch.setattr(download, "_slots", weakref.WeakKeyDictionary())
    handler = type("Slow", (_Slow,), {"lock": threading.Lock(), "running": 0, "most": 0, "seen": 0,
                                      "release": threading.Event(), "pause": 0.2})
    server = serve(handler)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        handler.release.set()
        shut(server)


async def test_at_most_four_downloads_run_at_once(slow_server: tuple[str, type[_Slow]]) -> None:
    url, handler = slow_server
    bodies = await asyncio.gather(*(download.download_file(f"{url}/f{number}", max_bytes=100, timeout=30,
                                                           guarded=False) for number in range(10)))
    assert bodies == [b"file"] * 10
    assert handler.seen == 10 and handler.most == download.DOWNLOADS_AT_ONCE == 4


async def test_a_download_whose_turn_does_not_come_in_time_is_told_the_bot_is_busy(
        slow_server: tuple[str, type[_Slow]], monkeypatch: pytest.MonkeyPatch) -> None:
    url, handler = slow_server
    handler.pause = 30
    monkeypatch.setattr(download, "DOWNLOADS_AT_ONCE", 1)
    first = asyncio.ensure_future(download.download_file(f"{url}/first", max_bytes=100, timeout=30, guarded=False))
    while handler.seen == 0:
        await asyncio.sleep(0.05)
    with pytest.raises(download.DownloadError, match="busy downloading other files") as caught:
        await download.download_file(f"{url}/second", max_bytes=100, timeout=0.5, guarded=False)
    assert caught.value.kind == "timeout" and handler.seen == 1
    handler.release.set()
    assert await first == b"file"


def test_markdown_past_the_character_limit_stops_building_sections_there() -> None:
    from nonebot_plugin_marsho.agent.documents.formats import _markdown

    data = b"# h\n" * 200_000
    extracted = extract_here(data, "headings.md", Limits(max_chars=1000))
    assert extracted.cut and extracted.chars == 1000
    built, _ = _markdown(data, "headings.md", Limits(max_chars=1000))  # before the cut: 200,000 once
    assert len(built) <= 1002


def test_markdown_whose_spaces_take_it_past_the_limit_is_kept_whole() -> None:
    text = "##   Title   ##\n" + "".join(f"word{number}{' ' * 60}\n\n\n\n" for number in range(100))
    whole = extract_here(text.encode(), "spaced.md")
    limits = Limits(max_chars=whole.chars)
    assert len(text) > 5 * whole.chars
    kept = extract_here(text.encode(), "spaced.md", limits)
    assert not kept.cut and kept.sections == whole.sections
