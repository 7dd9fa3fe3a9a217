"""How much of each prompt providers can bill as cached: the share of prompt characters that
repeat the start of an earlier request (issue 16, "The owner's bill").

Providers (OpenAI, DeepSeek, Qwen...) bill the part of a prompt that repeats, byte for byte, the
start of an earlier request at a fraction of the price. Through a real `bot.py` and the OneBot
v11 simulator: two people take turns asking in one group (one shared conversation) for
BENCH_TURNS questions (default 80: the history fills MARSHO_MAX_HISTORY=40 messages and is
trimmed several times), while the clock the prompt reads steps BENCH_CLOCK_STEP seconds (25) per
reading (bench/_stepping_clock_bot.py), so the conversation crosses a minute boundary every
two or three questions.

Each request the fake endpoint recorded is laid out as providers render it, tools first, then the
messages (`json.dumps`, compact); its cached part is its longest common prefix with any earlier
request. Share = cached characters ÷ all prompt characters. The ideal beside it is the same
figure for an append-only layout that never trims (each request is the previous one plus the
answer and the new question, with one fixed system prompt). Target: share ÷ ideal >= 0.90.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import CHAT_TOOLSET, SELF_ID, UNPAUSED, FakeOpenAI, run  # noqa: E402
from nonebot_plugin_marsho.agent.summary import SUMMARY_PROMPT  # noqa: E402
from tests.fake_openai import Answer, text  # noqa: E402
from tests.onebot_sim import BotProcess  # noqa: E402

TURNS = int(os.environ.get("BENCH_TURNS", "80"))
CLOCK_STEP = os.environ.get("BENCH_CLOCK_STEP", "25")
TARGET = 0.90
GROUP = 20001
SPEAKERS = ((10001, "Alice"), (10002, "Bob"))
CLOCK_BOT = Path(__file__).resolve().parent / "_stepping_clock_bot.py"
TOPICS = ("the tides at Qingdao", "a bread recipe without yeast", "why the sky is blue",
          "the rules of go", "a train timetable to Hangzhou", "how tea is fermented",
          "the plot of a detective novel", "a birthday present for a cat")


def question(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    return f"question {turn}: tell me about {topic}" + ", and more" * (turn % 5)


def answer(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    return (f"Answer {turn}: about {topic}, here is what I know. " +
            "It depends on the season and on who you ask, but most people agree. " * (1 + turn % 4))


def layout(tools: list[Any], messages: list[Any]) -> str:
    """A request as a provider renders it for its prefix cache: the tools, then the messages."""
    return json.dumps({"tools": tools, "messages": messages}, ensure_ascii=False, separators=(",", ":"))


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (binary search over slice comparisons, done in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def cached_share(prompts: list[str]) -> tuple[int, int]:
    """(characters repeating an earlier request's start, all characters)."""
    cached = sum(max((common_prefix(p, earlier) for earlier in prompts[:i]), default=0)
                 for i, p in enumerate(prompts))
    return cached, sum(map(len, prompts))


def append_only(bodies: list[dict[str, Any]]) -> list[str]:
    """The same conversation laid out append-only, never trimmed: one system prompt (the first
    request's), the first request's tools, and every earlier question (as sent) and answer."""
    tools = bodies[0].get("tools") or []
    first = bodies[0]["messages"][0]
    system = [first] if first["role"] == "system" else []
    history: list[Any] = []
    prompts = []
    for turn, body in enumerate(bodies):
        asked = body["messages"][-1]
        prompts.append(layout(tools, [*system, *history, asked]))
        history += [asked, {"role": "assistant", "content": answer(turn)}]
    return prompts


def trims(bodies: list[dict[str, Any]]) -> int:
    """Requests whose history no longer starts where the previous request's did."""
    def start(body: dict[str, Any]) -> str:
        history = [m for m in body["messages"][:-1] if m["role"] != "system"]
        return json.dumps(history[0]) if history else ""
    return sum(1 for before, after in zip(bodies, bodies[1:], strict=False)
               if start(before) and start(after) != start(before))


def is_summary(body: dict[str, Any]) -> bool:
    """A request that folds trimmed turns into the conversation's summary (MARSHO_SUMMARY)."""
    messages = body.get("messages") or []
    return bool(messages) and str(messages[0].get("content", "")).startswith(SUMMARY_PROMPT.split(".")[0])


async def main() -> None:
    fake = FakeOpenAI().start()
    replies = iter(range(10**6))
    summaries = iter(range(1, 10**6))

    def respond(body: dict[str, Any]) -> Answer:
        if is_summary(body):  # its own answers: the questions' numbering stays the ideal's
            return text(f"Summary {next(summaries)}: Alice and Bob asked about tides, bread, the sky and go.")
        return text(answer(next(replies)))

    fake.responder = respond
    bot = BotProcess(base_url=fake.base_url, toolkit_dirs=[CHAT_TOOLSET], bot_py=CLOCK_BOT,
                     env={**UNPAUSED, "BENCH_CLOCK_STEP": CLOCK_STEP, "MARSHO_TIME_PROMPT": "true"})
    try:
        async with bot, bot.simulator(self_id=SELF_ID) as sim:
            for turn in range(TURNS):
                user_id, card = SPEAKERS[turn % len(SPEAKERS)]
                event = sim.group_event(f"marsho {question(turn)}", group_id=GROUP, user_id=user_id,
                                        card=card)
                await sim.push(event)
                await sim.reply_to(event, timeout=30)
    finally:
        fake.stop()
    everything = [body for body in fake.requests if body.get("messages")]
    # the summary requests are billed too, but are not the conversation's requests: reported apart
    folds = [body for body in everything if is_summary(body)]
    bodies = [body for body in everything if not is_summary(body)]
    assert len(bodies) == TURNS, f"{len(bodies)} requests for {TURNS} questions"
    cached, total = cached_share([layout(b.get("tools") or [], b["messages"]) for b in bodies])
    ideal_cached, ideal_total = cached_share(append_only(bodies))
    share, ideal = cached / total, ideal_cached / ideal_total
    ratio = share / ideal
    print(f"{TURNS} questions by {len(SPEAKERS)} people in one group, the clock stepping "
          f"{CLOCK_STEP} s per reading; {trims(bodies)} history trims")
    print(f"prompt characters repeating an earlier request's start: {cached} of {total} = {share:.1%}")
    print(f"append-only, never trimmed (ideal): {ideal_cached} of {ideal_total} = {ideal:.1%}")
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"share / ideal: {ratio:.3f}  (target >= {TARGET:g}: {verdict})")
    all_cached, all_total = cached_share([layout(b.get("tools") or [], b["messages"]) for b in everything])
    print(f"summary requests: {len(folds)}, {all_total - total} prompt characters; with them, in order: "
          f"{all_cached} of {all_total} = {all_cached / all_total:.1%} repeat an earlier start")


if __name__ == "__main__":
    run(main)
