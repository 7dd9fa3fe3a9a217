"""The knowledge base's retrieval and costs (issue 29), in process, on SQLite in a temporary folder.

1. Recall@5: a corpus this script makes (Chinese and English handbooks, each fact a sentence
   among look-alikes that share its words), one question per fact whose answer is known; a hit is
   the passage holding the answer among the first five found. Full-text search alone, then fused
   with vectors (the fake endpoint's deterministic embeddings, tests/fake_openai.py: hashed words,
   no meaning, so fusion here shows the machinery works, not what a real model adds).
2. The time to add a 100-page PDF (written by tests/document_files.pdf), without and with
   embeddings.
3. The question overhead: `KnowledgeBase.note` (what a turn adds) in a chat with 200 documents,
   and in a chat without any (what every other chat pays), median over BENCH_QUESTIONS questions.

Prints its figures and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from nonebot_plugin_marsho.agent.embeddings import Embedder  # noqa: E402
from nonebot_plugin_marsho.agent.knowledge import KnowledgeBase  # noqa: E402
from nonebot_plugin_marsho.store.knowledge import KnowledgeStore  # noqa: E402
from nonebot_plugin_marsho.store.sql import SqlStore  # noqa: E402
from nonebot_plugin_marsho.tools.model import ToolContext  # noqa: E402
from tests import document_files  # noqa: E402
from tests.fake_openai import FakeOpenAI  # noqa: E402

QUESTIONS = int(os.environ.get("BENCH_QUESTIONS", "200"))
CHAT = "OneBot V11:group:1"

EN_PLACES = ["Harbor", "Maple", "Cedar", "Granite", "Willow", "Summit", "Lantern", "Orchid", "Falcon",
             "Riverside"]
EN_THINGS = [("When does the {site} office open?", "opens at {v}"),
             ("Who runs the {site} office?", "is managed by {v}"),
             ("Which phone extension reaches the {site} office?", "answers on extension {v}"),
             ("Where do people of the {site} office park?", "parks on level {v}"),
             ("Which budget code does the {site} office use?", "bills to code {v}")]
ZH_PLACES = ["东湖", "西山", "南塘", "北港", "青石", "白沙", "红桥", "金川", "云溪", "松林"]
ZH_THINGS = [("{site}办公室几点开门？", "每天{v}开门"), ("{site}办公室归谁管？", "由{v}负责"),
             ("打哪个分机能找到{site}办公室？", "分机号是{v}"), ("{site}办公室的车停在哪层？", "车停在{v}层"),
             ("{site}办公室用哪个预算编号？", "预算编号为{v}")]
"""Each fact's question is worded apart from the sentence that answers it (only some words shared)."""
FILLER_EN = ("Staff should read this section before their first week. Questions go to the front desk, "
             "and updates are posted on the notice board every Monday.")
FILLER_ZH = "新同事入职第一周前请先阅读本节。有问题请联系前台，每周一会在公告栏张贴更新。"


def corpus(documents: int, rng: random.Random) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
    """(documents as (name, Markdown bytes), questions as (question, the answer's unique text))."""
    files: list[tuple[str, bytes]] = []
    questions: list[tuple[str, str]] = []
    for number in range(documents):
        chinese = number % 2 == 1
        places, things = (ZH_PLACES, ZH_THINGS) if chinese else (EN_PLACES, EN_THINGS)
        lines = [f"# {'办公室手册' if chinese else 'Office handbook'} {number}"]
        for place in places:
            # numbered from 10: a one-character word is not searched by (store/fulltext.query_terms)
            site = f"{place}{number + 10}" if chinese else f"{place} {number + 10}"
            lines.append(f"## {site}{'办公室' if chinese else ' office'}")
            for thing, sentence in things:
                value = f"{rng.randrange(10_000, 99_999)}"
                said = sentence.format(v=value)
                lines.append((f"{site}办公室{said}。" if chinese else f"The {site} office {said}.")
                             + (FILLER_ZH if chinese else FILLER_EN))
                questions.append((thing.format(site=site), value))
            lines.append("")
        files.append((f"handbook-{number}.md", "\n\n".join(lines).encode()))
    return files, questions


async def recall_at_5(kb: KnowledgeBase, questions: list[tuple[str, str]]) -> float:
    hits = 0
    for question, answer in questions:
        found = await kb.search(CHAT, question, limit=5)
        hits += any(answer in hit.text for hit in found)
    return hits / len(questions)


async def fresh_kb(folder: Path, name: str, fake: FakeOpenAI | None = None) -> tuple[SqlStore, KnowledgeBase]:
    store = SqlStore(f"sqlite+aiosqlite:///{folder / name}")
    await store.start()
    embedder = Embedder("fake-embed", base_url=fake.base_url) if fake is not None else None
    return store, KnowledgeBase(KnowledgeStore(store), embedder=embedder, max_documents=1000)


async def main() -> None:
    rng = random.Random(29)
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as fake:
        folder = Path(tmp)
        files, questions = corpus(40, rng)
        sample = rng.sample(questions, min(QUESTIONS, len(questions)))
        print(f"corpus: {len(files)} handbooks (half Chinese), {len(questions)} facts; "
              f"{len(sample)} questions")
        for label, endpoint in (("full-text alone", None), ("fused (fake embeddings)", fake)):
            store, kb = await fresh_kb(folder, f"recall-{endpoint is not None}.db", endpoint)
            for name, data in files:
                await kb.add(CHAT, name, data, added_by="bench")
            print(f"recall@5, {label}: {await recall_at_5(kb, sample):.3f}")
            await kb.close()
            await store.close()

        pages = [[f"Page {p} line {line}: the quarterly figures for region {p % 7} are listed here."
                  for line in range(40)] for p in range(100)]
        pdf = document_files.pdf(pages)
        for label, endpoint in (("without embeddings", None), ("with embeddings (fake endpoint)", fake)):
            store, kb = await fresh_kb(folder, f"pdf-{endpoint is not None}.db", endpoint)
            started = time.perf_counter()
            added = await kb.add(CHAT, "hundred.pdf", pdf, added_by="bench")
            took = time.perf_counter() - started
            print(f"add a 100-page PDF ({len(pdf) / 1e6:.2f} MB, {added.document.passages} passages), "
                  f"{label}: {took:.2f} s")
            await kb.close()
            await store.close()

        for label, endpoint in (("full-text", None), ("fused, fake endpoint on loopback", fake)):
            store, kb = await fresh_kb(folder, f"overhead-{endpoint is not None}.db", endpoint)
            many, asked = corpus(200, rng)
            for name, data in many:
                await kb.add(CHAT, name, data, added_by="bench")
            context = ToolContext(platform="OneBot V11", chat_key=CHAT, user_id="1", group_id="1")
            elsewhere = ToolContext(platform="OneBot V11", chat_key="OneBot V11:group:2", user_id="1",
                                    group_id="2")
            await kb.note(context, "warm up")
            with_kb, without = [], []
            for question, _ in rng.sample(asked, QUESTIONS):
                started = time.perf_counter()
                await kb.note(context, question)
                with_kb.append(time.perf_counter() - started)
                started = time.perf_counter()
                await kb.note(elsewhere, question)
                without.append(time.perf_counter() - started)
            passages = sum(d.passages for d in await kb.documents(CHAT))
            print(f"question overhead, {label}, 200 documents ({passages} passages): median "
                  f"{statistics.median(with_kb) * 1000:.2f} ms, p90 "
                  f"{statistics.quantiles(with_kb, n=10)[-1] * 1000:.2f} ms; a chat without documents: "
                  f"{statistics.median(without) * 1000:.3f} ms")
            await kb.close()
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
