"""Who Marsho is: the persona and the additional prompt, the date and time of each turn (with
the lunar date in Chinese), the people Marsho likes (praises.json) and nicknames."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from lunar_python import Solar
from nonebot.adapters.onebot.v11 import GroupMessageEvent, PrivateMessageEvent
from nonebug import App
from pydantic import ValidationError

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.persona import (
    NicknameError,
    Nicknames,
    Prompt,
    base_prompt,
    check_nickname,
    clock,
    time_line,
    zone_name,
)
from nonebot_plugin_marsho.agent.praises import Liked, PraisesError, PraisesFile, read_praises
from nonebot_plugin_marsho.chat.app import Marsho, running
from nonebot_plugin_marsho.config import Config, describe_validation_error
from nonebot_plugin_marsho.i18n import EN, ZH
from nonebot_plugin_marsho.store.session import session_key
from nonebot_plugin_marsho.store.sql import SqlStore
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, text
from tests.onebot import group_message, onebot_bot, private_message, reply_call
from tests.speakers import label

PLATFORM = "OneBot V11"
ALICE_KEY = f"{PLATFORM}:10001"
SHANGHAI = ZoneInfo("Asia/Shanghai")
SPRING_FESTIVAL = datetime(2026, 2, 17, 9, 5, 42, tzinfo=SHANGHAI)
"""A Tuesday, the first day of the lunar year 丙午 (the test checks it with lunar-python)."""
NICKNAME_UNSET = "You have no nickname yet. Tell me one: marsho.nickname <name>"
NICKNAME_INVALID = ("A nickname is one line of plain text, without @, colons, double quotes (\" “ ” 「 」…) "
                    "or the brackets [ ] < > { } 【 】; single quotes and round brackets are fine.")

Event = GroupMessageEvent | PrivateMessageEvent


@pytest.fixture(autouse=True)
def steady(tmp_path: Path) -> Iterator[Marsho]:
    """Handlers use a bot of the test's own: a fixed clock, and no praises file unless the test
    writes one (the `marsho` fixture is this bot)."""
    with configured(marsho_time_prompt=True) as marsho:
        marsho.prompt.now = lambda: SPRING_FESTIVAL
        marsho.prompt.praises = PraisesFile(tmp_path / "praises.json", lambda _: None)
        yield marsho


@contextmanager
def settings(**values: object) -> Iterator[Marsho]:
    """Handlers use a bot with these MARSHO_* settings (`system_prompt=...`) until the block
    ends, with the clock and praises file of the bot it stands in for."""
    before = running.get().prompt
    with configured(**{f"marsho_{name}": value for name, value in values.items()}) as marsho:
        marsho.prompt.now, marsho.prompt.praises = before.now, before.praises
        yield marsho


@pytest.fixture
def chinese(steady: Marsho) -> Iterator[Marsho]:
    """Handlers use a bot speaking zh-CN (MARSHO_LANG) for this test."""
    with settings(lang="zh-CN") as marsho:
        yield marsho


async def exchange(app: App, *steps: tuple[Event, str]) -> None:
    """Send each event and expect marsho to answer it with the text."""
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        for number, (event, answer) in enumerate(steps):
            ctx.receive_event(bot, event)
            ctx.should_call_api(*reply_call(event, answer), result={"message_id": number})


async def ask(app: App, fake: FakeOpenAI, event: Event | None = None) -> dict:
    """Ask marsho something; the request the model got."""
    fake.push(text("answer"))
    await exchange(app, (event or private_message("marsho hi"), "answer"))
    return fake.requests[-1]


def system(body: dict) -> str:
    """The request's system message ("" when it has none)."""
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else ""


def user_messages(body: dict) -> list[str]:
    """The user messages' words, without the note the running turn's question carries."""
    return [split_note(m["content"])[0] for m in body["messages"] if m["role"] == "user"]


def split_note(content: str) -> tuple[str, str]:
    """A user message's words and the turn's note after them ("" when it has none)."""
    start = EN["prompt.turn_note"].split("{")[0]
    words, _, note = content.partition(f"\n\n{start}")
    return words, f"{start}{note}" if note else ""


def note(body: dict) -> str:
    """The running turn's note: the facts after its question (the time, the nickname)."""
    return split_note(body["messages"][-1]["content"])[1]


def facts(note_text: str) -> str:
    """What a note says, without its label."""
    start, end = EN["prompt.turn_note"].split("{facts}")
    assert note_text.startswith(start) and note_text.endswith(end), note_text
    return note_text[len(start):-len(end)]


# --- persona and additional prompt ------------------------------------------------------------


async def test_the_english_persona_is_the_default_system_prompt_with_lang_en(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, marsho: Marsho
) -> None:
    assert marsho.config.marsho_system_prompt is None and marsho.config.marsho_lang == "en"
    prompt = system(await ask(app, fake))
    assert prompt.startswith(EN["persona"])
    assert "Marsho" in prompt and ZH["persona"] not in prompt


async def test_the_chinese_persona_is_the_default_in_zh_cn(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, chinese: Marsho
) -> None:
    fake.push(text("answer"))
    event = private_message("marsho 你好")
    await exchange(app, (event, "answer"))
    prompt = system(fake.requests[-1])
    assert prompt.startswith(ZH["persona"]) and EN["persona"] not in prompt


def test_the_persona_is_in_the_prompts_language() -> None:
    assert base_prompt(None, language="zh-CN") == ZH["persona"]
    assert base_prompt(None, language="en") == EN["persona"]
    assert base_prompt(None) == ZH["persona"]  # zh-CN, MARSHO_LANG's default
    assert base_prompt("", "Be kind.", [Liked("Alice")], language="zh-CN") == (
        "Be kind.\n\n" + ZH["prompt.likes"] + "\n- Alice")
    assert Prompt(language="zh-CN", time_prompt=False).system() == ZH["persona"]


async def test_marsho_system_prompt_replaces_the_persona(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    with settings(system_prompt="  You are a terse pirate.  "):
        prompt = system(await ask(app, fake))
    assert prompt == "You are a terse pirate."


async def test_an_empty_system_prompt_removes_the_persona_but_keeps_the_time(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    with settings(system_prompt="", time_prompt=True):
        body = await ask(app, fake)
        assert system(body) == ""  # no system message: the time comes with the question
        assert facts(note(body)) == "It is now 2026-02-17 09:05 (Tuesday, time zone CST, UTC+08:00)."
    with settings(system_prompt="", time_prompt=False):
        body = await ask(app, fake)
        assert system(body) == "" and body["messages"][-1] == {"role": "user", "content": "hi"}  # no note


async def test_the_additional_prompt_is_appended_after_the_persona(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    with settings(additional_prompt="House rule: no spoilers."):
        prompt = system(await ask(app, fake))
        assert prompt == EN["persona"] + "\n\nHouse rule: no spoilers."
        with settings(system_prompt="Be brief."):
            assert system(await ask(app, fake)) == "Be brief.\n\nHouse rule: no spoilers."


# --- the time line ------------------------------------------------------------------------------


async def test_the_time_line_gives_date_time_to_the_minute_weekday_and_zone(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    body = await ask(app, fake)
    said = facts(note(body))
    assert said == "It is now 2026-02-17 09:05 (Tuesday, time zone CST, UTC+08:00)."
    assert "09:05:42" not in said and "lunar" not in said  # no seconds; no lunar date in English
    assert "2026" not in system(body)  # the system prompt stays the same from minute to minute


async def test_the_chinese_time_line_adds_the_lunar_date(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, chinese: Marsho
) -> None:
    lunar = Solar.fromYmdHms(2026, 2, 17, 9, 5, 0).getLunar()  # what lunar-python itself says
    assert (lunar.getYearInGanZhi(), lunar.getMonthInChinese(), lunar.getDayInChinese()) == ("丙午", "正", "初一")
    assert lunar.getYearInChinese() == "二〇二六"
    body = await ask(app, fake, private_message("marsho 今天是什么日子"))
    assert body["messages"][-1]["content"] == "今天是什么日子\n\n" + ZH["prompt.turn_note"].format(
        facts="现在是 2026-02-17 09:05（星期二，时区 CST, UTC+08:00）。农历：二〇二六年正月初一。")


async def test_the_lunar_date_follows_the_clock_the_day_before_is_the_old_year(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, chinese: Marsho
) -> None:
    new_years_eve = datetime(2026, 2, 16, 23, 59, tzinfo=SHANGHAI)
    chinese.prompt.now = lambda: new_years_eve
    lunar = Solar.fromYmdHms(2026, 2, 16, 23, 59, 0).getLunar()
    assert (lunar.getMonthInChinese(), lunar.getDayInChinese()) == ("腊", "廿九")
    assert (await ask(app, fake))["messages"][-1]["content"].endswith("农历：二〇二五年腊月廿九。]")
    assert Prompt(persona="", language="zh-CN", now=lambda: new_years_eve).note() == ZH["prompt.turn_note"].format(
        facts="现在是 2026-02-16 23:59（星期一，时区 CST, UTC+08:00）。农历：二〇二五年腊月廿九。")


def test_the_lunar_date_is_in_the_chinese_time_line_only() -> None:
    assert time_line(SPRING_FESTIVAL, "zh-CN").endswith("农历：二〇二六年正月初一。")
    assert time_line(SPRING_FESTIVAL, "en") == "It is now 2026-02-17 09:05 (Tuesday, time zone CST, UTC+08:00)."
    english = Prompt(persona="", language="en", now=lambda: SPRING_FESTIVAL)
    assert english.system() == "" and facts(english.note()) == time_line(SPRING_FESTIVAL, "en")


async def test_marsho_time_prompt_false_leaves_the_time_out(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    with settings(time_prompt=False):
        prompt = system(await ask(app, fake))
    assert prompt == EN["persona"]
    assert "2026" not in prompt and "It is now" not in prompt


def test_a_bad_marsho_timezone_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError) as caught:
        Config(marsho_timezone="Mars/Olympus_Mons")
    assert "Mars/Olympus_Mons" in str(caught.value)
    assert "MARSHO_TIMEZONE='Mars/Olympus_Mons'" in describe_validation_error(caught.value)
    with pytest.raises(ValidationError, match="not an IANA time zone"):
        Config(marsho_timezone="../etc/passwd")
    assert Config(marsho_timezone=" Asia/Shanghai ").marsho_timezone == "Asia/Shanghai"
    assert Config().marsho_timezone == ""


def test_the_zone_is_given_with_its_utc_offset_an_abbreviation_alone_is_ambiguous() -> None:
    def zone(name: str) -> str:
        return zone_name(datetime(2026, 2, 17, 9, 5, tzinfo=ZoneInfo(name)))

    assert zone("Asia/Shanghai") == "CST, UTC+08:00"
    assert zone("America/Chicago") == "CST, UTC-06:00"  # the other CST
    assert zone("Asia/Kolkata") == "IST, UTC+05:30"
    assert zone("Asia/Dubai") == "UTC+04:00"  # no abbreviation, only "+04"
    assert zone("UTC") == "UTC+00:00"


def test_the_clock_tells_the_time_in_marsho_timezone() -> None:
    offset = clock("Asia/Shanghai")().utcoffset()
    assert offset is not None and offset.total_seconds() == 8 * 3600
    assert clock("")().tzinfo is not None  # the machine's zone, still aware (tzname for the prompt)


# --- the people Marsho likes (praises.json) ------------------------------------------------------


def write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


async def test_the_people_marsho_likes_are_in_the_system_prompt(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, marsho: Marsho, tmp_path: Path
) -> None:
    path = write(tmp_path / "likes.json", {"like": [
        {"name": "Asankilp", "advantages": "wrote Marsho's first home"},
        {"name": " 神羽 ", "advantages": ""},
        {"name": "Kiri"},
    ]})
    marsho.prompt.praises = PraisesFile(path, lambda _: None)
    prompt = system(await ask(app, fake))
    assert prompt.endswith("\n\nPeople you like, and why:\n- Asankilp: wrote Marsho's first home\n- 神羽\n- Kiri")
    assert prompt.startswith(EN["persona"])


def test_a_bare_list_of_people_is_read_too(tmp_path: Path) -> None:
    path = write(tmp_path / "praises.json", [{"name": "Alice", "advantages": "kind"}, {"name": "Bob"}])
    assert read_praises(path) == [Liked("Alice", "kind"), Liked("Bob", "")]
    bom = tmp_path / "bom.json"  # Windows Notepad's UTF-8 with a BOM
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"like": [{"name": "Alice"}]}).encode())
    assert read_praises(bom) == [Liked("Alice")]


def test_a_json_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "praises.json",
                 '{\n  "like": [\n    {"name": "Alice" "advantages": "kind"}\n  ]\n}\n')
    with pytest.raises(PraisesError) as caught:
        read_praises(path)
    assert str(caught.value) == f"{path}: invalid JSON at line 3, column 22: Expecting ',' delimiter"


def test_an_entry_without_a_name_is_named_by_its_index(tmp_path: Path) -> None:
    path = write(tmp_path / "praises.json", {"like": [{"name": "Alice"}, {"advantages": "nameless"}]})
    with pytest.raises(PraisesError) as caught:
        read_praises(path)
    assert str(caught.value) == f"{path}: like[1]: 'name' is missing"
    write(path, {"like": [{"name": "   "}]})
    with pytest.raises(PraisesError, match=r"like\[0\]: 'name' must not be empty"):
        read_praises(path)
    write(path, {"like": ["Alice"]})
    with pytest.raises(PraisesError, match=r"like\[0\]: must be a JSON object, not a string"):
        read_praises(path)
    write(path, {"like": [{"name": "Alice", "advantages": ["kind"]}]})
    with pytest.raises(PraisesError, match=r"'advantages' must be a string, not a list"):
        read_praises(path)
    write(path, {"likes": []})
    with pytest.raises(PraisesError, match='expected {"like"'):
        read_praises(path)


def test_an_edited_praises_file_is_read_again_without_a_restart(tmp_path: Path) -> None:
    path = write(tmp_path / "praises.json", {"like": [{"name": "Alice"}]})
    praises = PraisesFile(path, lambda problem: pytest.fail(problem))
    assert praises.people() == [Liked("Alice")]
    write(path, {"like": [{"name": "Alice"}, {"name": "Bob", "advantages": "brings snacks"}]})
    assert praises.people() == [Liked("Alice"), Liked("Bob", "brings snacks")]


def test_a_same_size_edit_with_an_unchanged_timestamp_is_still_read(tmp_path: Path) -> None:
    """Filesystems with coarse timestamps (FAT: 2 s, many kernels: one tick) can give two quick
    writes the same mtime; a same-size edit must not go unnoticed."""
    path = write(tmp_path / "praises.json", {"like": [{"name": "Alice"}]})
    praises = PraisesFile(path, lambda problem: pytest.fail(problem))
    assert praises.people() == [Liked("Alice")]
    stamp = path.stat().st_mtime_ns
    write(path, {"like": [{"name": "Alfie"}]})  # same size
    os.utime(path, ns=(stamp, stamp))  # and the same mtime, as a coarse clock would give
    assert praises.people() == [Liked("Alfie")]


def test_a_broken_edit_keeps_the_last_good_list_and_is_logged_once(tmp_path: Path) -> None:
    path = write(tmp_path / "praises.json", {"like": [{"name": "Alice"}]})
    problems: list[str] = []
    praises = PraisesFile(path, problems.append)
    assert praises.people() == [Liked("Alice")]
    write(path, '{"like": [{"name": "Alice"},]}')
    for _ in range(3):
        assert praises.people() == [Liked("Alice")]
    assert len(problems) == 1
    assert str(path) in problems[0] and "line 1, column" in problems[0]
    assert "keeping the 1 people read before" in problems[0]
    write(path, {"like": [{"name": "Bob"}]})  # fixed: read, nothing more logged
    assert praises.people() == [Liked("Bob")]
    assert len(problems) == 1


def test_a_missing_praises_file_means_nobody(tmp_path: Path) -> None:
    path = tmp_path / "praises.json"
    praises = PraisesFile(path, lambda problem: pytest.fail(problem))
    assert praises.people() == []
    write(path, {"like": [{"name": "Alice"}]})
    assert praises.people() == [Liked("Alice")]
    path.unlink()  # removed: nobody any more
    assert praises.people() == []


# --- marsho.nickname -------------------------------------------------------------------------


async def test_marsho_nickname_sets_shows_and_resets_the_nickname(
    app: App, plugin_engine: Engine
) -> None:
    await exchange(
        app,
        (private_message("marsho.nickname"), NICKNAME_UNSET),
        (private_message("marsho.nickname   Alice  "), "Got it, I'll call you Alice!"),
        (group_message("marsho.nickname"), "I call you Alice. Change it with marsho.nickname <name>."),
        (group_message("marsho.nickname reset"), "Done: I forgot your nickname."),
        (private_message("marsho.nickname"), NICKNAME_UNSET),
    )
    assert await plugin_engine.history.get_nickname(ALICE_KEY) is None


async def test_each_person_has_their_own_nickname(app: App, plugin_engine: Engine) -> None:
    await exchange(
        app,
        (group_message("marsho.nickname Alice", user_id=10001), "Got it, I'll call you Alice!"),
        (group_message("marsho.nickname", user_id=10002), NICKNAME_UNSET),
    )
    assert await plugin_engine.history.get_nickname(ALICE_KEY) == "Alice"
    assert await plugin_engine.history.get_nickname(f"{PLATFORM}:10002") is None


async def test_a_nickname_over_the_limit_is_refused(
    app: App, plugin_engine: Engine, marsho: Marsho
) -> None:
    limit = marsho.config.marsho_nickname_limit
    await exchange(
        app,
        (private_message("marsho.nickname " + "A" * (limit + 1)),
         f"That nickname is too long: at most {limit} characters, please."),
        (private_message("marsho.nickname " + "A" * limit), f"Got it, I'll call you {'A' * limit}!"),
    )
    with settings(nickname_limit=3):
        await exchange(app, (private_message("marsho.nickname Alice"),
                             "That nickname is too long: at most 3 characters, please."))
    assert await plugin_engine.history.get_nickname(ALICE_KEY) == "A" * limit  # unchanged


@pytest.mark.parametrize("nickname", ["Al\nice", "@Alice", "[Alice]", "<b>Alice</b>", "{Alice}", "Al\tice",
                                      "Bob: ok. Alice", "群主：", '"Alice"', "「Alice」"])
async def test_an_invalid_nickname_is_refused(app: App, plugin_engine: Engine, nickname: str) -> None:
    await exchange(app, (private_message(f"marsho.nickname {nickname}"), NICKNAME_INVALID))
    assert await plugin_engine.history.get_nickname(ALICE_KEY) is None


def test_check_nickname_keeps_one_line_of_plain_text() -> None:
    assert check_nickname("  Big   Cat  ", 16) == "Big Cat"
    assert check_nickname("小棉的朋友", 5) == "小棉的朋友"  # characters, not bytes
    for bad in ("a\u200bb", "a\x00b", "a\rb", "@a"):
        with pytest.raises(NicknameError) as caught:
            check_nickname(bad, 16)
        assert caught.value.code == "nickname.invalid"
    with pytest.raises(NicknameError) as caught:
        check_nickname("小棉的朋友们", 5)
    assert (caught.value.code, caught.value.params) == ("nickname.too_long", {"limit": 5})
    assert str(caught.value) == "That nickname is too long: at most 5 characters, please."  # logs: English
    # nobody may speak as Marsho in a shared group
    for reserved in ("Marsho", "MARSHO", "小棉"):
        with pytest.raises(NicknameError) as caught:
            check_nickname(reserved, 16, ["marsho", "小棉"])
        assert caught.value.code == "nickname.reserved"


async def test_a_member_cannot_take_marshos_own_name(app: App, plugin_engine: Engine) -> None:
    await exchange(app, (private_message("marsho.nickname 小棉"), "That name is mine! Pick another one."))
    assert await plugin_engine.history.get_nickname(ALICE_KEY) is None


async def test_a_nickname_is_kept_in_the_database_across_restarts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'marsho.db'}"
    store = SqlStore(url)
    await Nicknames(store).set(ALICE_KEY, "Alice")
    await store.close()
    store = SqlStore(url)  # a new process on the same file
    try:
        assert await Nicknames(store).get(ALICE_KEY) == "Alice"
        assert await store.get_nickname(f"{PLATFORM}:10002") is None
        await store.set_nickname(ALICE_KEY, "Ali")  # set again: replaced, not duplicated
        assert await store.get_nickname(ALICE_KEY) == "Ali"
        await store.set_nickname(ALICE_KEY, None)
    finally:
        await store.close()
    store = SqlStore(url)
    try:
        assert await store.get_nickname(ALICE_KEY) is None
    finally:
        await store.close()


class CountingStore:
    """A store wrapper counting nickname reads."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.reads = 0

    async def get_nickname(self, user_key: str) -> str | None:
        self.reads += 1
        return await self.store.get_nickname(user_key)

    async def set_nickname(self, user_key: str, nickname: str | None) -> None:
        await self.store.set_nickname(user_key, nickname)


async def test_the_nickname_cache_reads_the_database_once_within_its_ttl() -> None:
    store = SqlStore("sqlite://")
    try:
        await store.set_nickname(ALICE_KEY, "Alice")
        counting = CountingStore(store)
        nicknames = Nicknames(counting, ttl=60)  # type: ignore[arg-type]
        assert [await nicknames.get(ALICE_KEY) for _ in range(3)] == ["Alice"] * 3
        assert counting.reads == 1
        assert await nicknames.get(f"{PLATFORM}:10002") is None  # another person: their own read
        assert await nicknames.get(f"{PLATFORM}:10002") is None  # "no nickname" is cached too
        assert counting.reads == 2
        await nicknames.set(ALICE_KEY, "Ali")  # a change through the cache shows at once
        assert await nicknames.get(ALICE_KEY) == "Ali" and counting.reads == 2
        expired = Nicknames(counting, ttl=0)  # type: ignore[arg-type]
        await expired.get(ALICE_KEY)
        await expired.get(ALICE_KEY)
        assert counting.reads == 4
    finally:
        await store.close()


# --- the nickname reaches the model ------------------------------------------------------------


async def test_in_a_private_chat_the_question_comes_with_the_nickname_to_use(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    fake.push(text("Hi Alice"))
    chat = private_message("marsho hi")
    await exchange(app, (private_message("marsho.nickname Alice"), "Got it, I'll call you Alice!"),
                   (chat, "Hi Alice"))
    body = fake.requests[-1]
    assert facts(note(body)).endswith(
        " The person talking to you asked to be called \"Alice\" (a name, nothing more); call them that.")
    assert "Alice" not in system(body)  # the system prompt is the same whoever asks
    assert user_messages(body) == ["hi"]  # one speaker: no name before the text


async def test_in_a_shared_group_conversation_the_speaker_is_named_by_their_nickname(
    app: App, fake: FakeOpenAI, plugin_engine: Engine
) -> None:
    alice = group_message("marsho hi all", user_id=10001)
    alice.sender.card = "Card of Alice"  # the nickname she chose wins over her group card
    bob = group_message("marsho hello", user_id=10002)
    bob.sender.card = "Bobby"
    fake.push(text("Hi Alice"), text("Hi Bobby"))
    with settings(session_scope="group"):
        await exchange(
            app, (group_message("marsho.nickname Alice", user_id=10001), "Got it, I'll call you Alice!"),
            (alice, "Hi Alice"), (bob, "Hi Bobby"))
    first, second = fake.requests[-2:]
    assert user_messages(first) == [f"{label('Alice', 10001)}: hi all"]
    # Bob: his card, not Alice's name
    assert user_messages(second) == [f"{label('Alice', 10001)}: hi all", f"{label('Bobby', 10002)}: hello"]
    for body in (first, second):
        prompt = system(body)
        assert prompt.endswith("\n\n" + EN["prompt.speaker_names"])
        assert "call them that" not in prompt and "Alice" not in prompt
        assert "call them that" not in note(body)  # the speaker's name is before their words


async def test_another_persons_nickname_is_not_used(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, marsho: Marsho
) -> None:
    await marsho.nicknames.set(ALICE_KEY, "Alice")  # type: ignore[union-attr]
    body = await ask(app, fake, private_message("marsho hi", user_id=10002))
    assert "Alice" not in json.dumps(body) and "call them that" not in note(body)
    with settings(session_scope="user_in_group"):  # each their own: the note names them
        body = await ask(app, fake, group_message("marsho hi", user_id=10001))
        assert note(body).endswith("asked to be called \"Alice\" (a name, nothing more); call them that.]")
        body = await ask(app, fake, group_message("marsho hi", user_id=10002))
    assert "Alice" not in json.dumps(body) and user_messages(body) == ["hi"]


# --- a prompt whose start stays still (issue 16: providers bill a repeated start at a fraction) ---


def start_of(body: dict) -> str:
    """The request up to the end of its history: the tools and every message but the running
    question, exactly as sent."""
    return json.dumps([body.get("tools"), body["messages"][:-1]], ensure_ascii=False)


async def test_each_request_repeats_the_previous_one_byte_for_byte_across_a_minute_boundary(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, marsho: Marsho
) -> None:
    minutes = iter([datetime(2026, 2, 17, 9, 5, 50, tzinfo=SHANGHAI),
                    datetime(2026, 2, 17, 9, 6, 10, tzinfo=SHANGHAI),
                    datetime(2026, 2, 17, 10, 0, 0, tzinfo=SHANGHAI)])
    marsho.prompt.now = lambda: next(minutes)
    alice, bob = group_message("marsho hi all", user_id=10001), group_message("marsho hello", user_id=10002)
    again = group_message("marsho and now?", user_id=10001)
    fake.push(text("Hi Alice"), text("Hi Bob"), text("Now this"))
    with settings(session_scope="group", group_persona=True):
        await exchange(app, (alice, "Hi Alice"), (bob, "Hi Bob"), (again, "Now this"))
    bodies = fake.requests[-3:]
    for before, after in zip(bodies, bodies[1:], strict=False):
        # everything before the running question is what the next request starts with...
        assert start_of(after).startswith(start_of(before)[:-2])
        # ...followed by that question's words (its note went with it only) and the answer
        asked = len(before["messages"]) - 1
        assert after["messages"][asked] == {"role": "user", "content": split_note(before["messages"][-1]["content"])[0]}
        assert after["messages"][asked + 1]["role"] == "assistant"
    notes = [facts(note(body)) for body in bodies]
    assert [n[:len("It is now 2026-02-17 09:05")] for n in notes] == [
        "It is now 2026-02-17 09:05", "It is now 2026-02-17 09:06", "It is now 2026-02-17 10:00"]


async def test_the_time_and_nickname_reach_the_model_beside_the_question_and_are_not_stored(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, marsho: Marsho
) -> None:
    await marsho.nicknames.set(ALICE_KEY, "Ally")  # type: ignore[union-attr]
    fake.push(text("first"), text("second"))
    await exchange(app, (private_message("marsho what time is it?"), "first"),
                   (private_message("marsho and my name?"), "second"))
    first, second = fake.requests[-2:]
    assert first["messages"][-1]["content"] == "what time is it?\n\n" + EN["prompt.turn_note"].format(
        facts="It is now 2026-02-17 09:05 (Tuesday, time zone CST, UTC+08:00). The person talking to "
              "you asked to be called \"Ally\" (a name, nothing more); call them that.")
    assert "Ally" not in system(first) and "2026" not in system(first)
    assert second["messages"][-3:-1] == [{"role": "user", "content": "what time is it?"},
                                         {"role": "assistant", "content": "first"}]
    # history keeps the words only: the notes would change every later request's bytes
    turns = await plugin_engine.history.recent_turns(
        session_key(PLATFORM, group_id=None, user_id="10001"), max_messages=100, max_tokens=10**6)
    assert [t.messages for t in turns][-2:] == [
        [{"role": "user", "content": "what time is it?"}, {"role": "assistant", "content": "first"}],
        [{"role": "user", "content": "and my name?"}, {"role": "assistant", "content": "second"}]]
