"""Reminders (issue 27) at the time they fire, after the attacks on them: a scheduled question
stopped once its heading was said is never said or asked again; a group reminder whose asker
has left the group is paused, not posted; a paused reminder shows in its asker's private
listing, does not count toward their bound, and can be resumed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from nonebot_plugin_marsho.agent.reminders import ReminderBook
from nonebot_plugin_marsho.chat import reminders as firing
from nonebot_plugin_marsho.chat.reminders import Scheduler, saying
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.reminders import Reminder, ReminderStore
from nonebot_plugin_marsho.store.sql import SqlStore

PLATFORM = "OneBot V11"
GROUP = f"{PLATFORM}:group:80001"
ALICE = "10501"
NOW = 1_800_000_000.0
"""Friday 15 January 2027, 08:00 UTC."""
UTC = timezone.utc


def _reminder(due: float, *, every: str = "", what: str = "prompt") -> Reminder:
    return Reminder(id=0, chat_key=GROUP, platform=PLATFORM, kind="group", chat_id="80001", user_id=ALICE,
                    asker=f"{PLATFORM}:{ALICE}", what=what, body="the weather?", due_at=due,  # type: ignore[arg-type]
                    scheduled_at=due, every=every, zone="UTC")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ReminderStore]:
    sql = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}")
    await sql.start()
    yield ReminderStore(sql)
    await sql.close()


# claim, send, mark


async def _stopped_while_firing(store: ReminderStore, monkeypatch: pytest.MonkeyPatch, *,
                                said_first: bool) -> list[int]:
    """Fire the due reminders with a courier that never finishes (the model still answering),
    stop the scheduler, then start another: which reminders the second one fires."""
    monkeypatch.setattr(firing, "STOP_WAIT", 0.0)
    began = asyncio.Event()

    async def answering(reminder: Reminder, what: str, now: float) -> None:
        if said_first:
            saying()  # the heading goes out
        began.set()
        await asyncio.Event().wait()  # the model's answer, still on its way

    first = Scheduler(store, answering, grace=1e9, texts=Texts("en"), clock=lambda: NOW)
    await first.round()
    await asyncio.wait_for(began.wait(), 10)
    await first.stop()
    fired: list[int] = []

    async def after_restart(reminder: Reminder, what: str, now: float) -> None:
        fired.append(reminder.id)

    second = Scheduler(store, after_restart, grace=1e9, texts=Texts("en"), clock=lambda: NOW + 1)
    await second.round()
    await second.settled()
    return fired


async def test_a_scheduled_question_stopped_after_its_heading_is_never_asked_again(
        store: ReminderStore, monkeypatch: pytest.MonkeyPatch) -> None:
    added = await store.add(_reminder(NOW))
    assert await _stopped_while_firing(store, monkeypatch, said_first=True) == []
    assert await store.get(added.id) is None  # done: a single one is gone


async def test_a_repeat_stopped_after_its_heading_goes_on_to_its_next_time(
        store: ReminderStore, monkeypatch: pytest.MonkeyPatch) -> None:
    added = await store.add(_reminder(NOW, every="P1D"))
    assert await _stopped_while_firing(store, monkeypatch, said_first=True) == []
    kept = await store.get(added.id)
    assert kept is not None and kept.state == "active" and kept.due_at == NOW + 86400


async def test_one_stopped_before_anything_was_said_is_given_back_and_sent_after_the_restart(
        store: ReminderStore, monkeypatch: pytest.MonkeyPatch) -> None:
    added = await store.add(_reminder(NOW))
    assert await _stopped_while_firing(store, monkeypatch, said_first=False) == [added.id]


# the asker left the group


class MemberBot:
    """A OneBot v11 bot whose get_group_member_info knows `members` of group 80001 (the bot
    itself included), fails for anyone else as an implementation does, or times out."""

    self_id = "2233"

    class adapter:  # noqa: N801 - as Bot.adapter reads
        @staticmethod
        def get_name() -> str:
            return "OneBot V11"

    def __init__(self, members: set[str], *, timing_out: bool = False) -> None:
        self.members = members | {self.self_id}
        self.timing_out = timing_out
        self.asked: list[str] = []

    async def call_api(self, api: str, **params: object) -> object:
        assert api == "get_group_member_info"
        self.asked.append(str(params["user_id"]))
        if self.timing_out:
            raise asyncio.TimeoutError
        if str(params["user_id"]) not in self.members:
            from nonebot.adapters.onebot.v11 import ActionFailed

            raise ActionFailed(status="failed", retcode=100, message="群员不存在")
        return {"user_id": params["user_id"], "role": "member", "card": "Alice"}


class Targets:
    def __init__(self, bot: MemberBot) -> None:
        self.bot = bot
        self.sent: list[str] = []

    async def destination(self, chat_key: str) -> tuple[MemberBot, object]:
        return self.bot, object()

    async def send_to(self, chat_key: str, message: object) -> None:
        self.sent.append(str(message))


class App:
    """As much of Marsho as a text reminder's courier reads."""

    def __init__(self, bot: MemberBot) -> None:
        self.texts = Texts("en")
        self.services = self
        self.targets = Targets(bot)

    def built(self) -> App:
        return self


async def _fired_as_a_text(store: ReminderStore, bot: MemberBot, *, what: str = "text",
                           every: str = "") -> tuple[Reminder | None, list[str]]:
    from nonebot_plugin_marsho.chat.reminders import Courier

    added = await store.add(_reminder(NOW, every=every, what=what))
    app = App(bot)
    scheduler = Scheduler(store, Courier(app), grace=1e9, texts=Texts("en"),  # type: ignore[arg-type]
                          clock=lambda: NOW)
    await scheduler.round()
    await scheduler.settled()
    return await store.get(added.id), app.targets.sent


@pytest.mark.parametrize("what", ["text", "prompt"])
async def test_a_reminder_whose_asker_left_the_group_is_paused_saying_why_not_posted(
        store: ReminderStore, what: str) -> None:
    kept, sent = await _fired_as_a_text(store, MemberBot(set()), what=what, every="P1D")
    assert sent == []
    assert kept is not None and kept.state == "paused"
    assert kept.problem == "its asker is no longer a member of this group (the platform says so)"


async def test_a_reminder_whose_asker_is_still_a_member_is_posted(store: ReminderStore) -> None:
    bot = MemberBot({ALICE})
    kept, sent = await _fired_as_a_text(store, bot)
    assert len(sent) == 1 and "the weather?" in sent[0] and kept is None
    assert bot.asked == [ALICE]


async def test_a_platform_that_does_not_answer_is_no_reason_to_pause(store: ReminderStore) -> None:
    kept, sent = await _fired_as_a_text(store, MemberBot(set(), timing_out=True))
    assert len(sent) == 1 and kept is None


async def test_a_bot_that_left_the_group_itself_does_not_blame_the_asker(store: ReminderStore) -> None:
    bot = MemberBot(set())
    bot.members.clear()  # the bot is not a member either: the send is what tells
    kept, sent = await _fired_as_a_text(store, bot)
    assert len(sent) == 1 and kept is None  # this fake's send works; a real one refuses


# paused reminders: where they show, what they count, resuming them


PRIVATE = f"{PLATFORM}:private:{ALICE}"
BOB, ADMIN = "10502", "10503"


def book_on(store: ReminderStore, per_user: int = 10) -> tuple[ReminderBook, list[Reminder]]:
    woken: list[Reminder] = []
    return ReminderBook(store, zone=UTC, per_user=per_user, clock=lambda: NOW, added=woken.append), woken


async def _paused(store: ReminderStore, reminder: Reminder) -> Reminder:
    """Keep `reminder` and pause it as a chat the bot was removed from does."""
    added = await store.add(reminder)
    [claimed] = [one for one in await store.claim(reminder.due_at, "test") if one.id == added.id]
    await store.failed(claimed, problem="the chat refused the message (has the bot left it?)", retry_at=None)
    kept = await store.get(added.id)
    assert kept is not None and kept.state == "paused"
    return kept


async def command(book: ReminderBook, said: str, *, user: str = ALICE, group: str | None = None,
                  role: str = "member") -> str:
    from nonebot_plugin_marsho.chat.commands.reminders import reminders_command
    from nonebot_plugin_marsho.chat.where import Where

    where = Where(platform=PLATFORM, kind="group" if group else "private", chat_id=group or user,
                  user_id=user, role="member" if role == "superuser" else role)  # type: ignore[arg-type]
    context = SimpleNamespace(t=Texts("en"), name="marsho", text=said, where=where, role=role, key="",
                              services=SimpleNamespace(reminders=SimpleNamespace(book=book)))
    return await reminders_command(context)  # type: ignore[arg-type]


async def test_a_paused_group_reminder_shows_in_its_askers_private_listing_with_its_chat(
        store: ReminderStore) -> None:
    book, _ = book_on(store)
    paused = await _paused(store, _reminder(NOW - 60, what="text"))
    await store.add(_reminder(NOW + 3600, what="text"))  # active, in the group: listed there only
    await _paused(store, replace(_reminder(NOW - 60, what="text"), user_id=BOB, asker=f"{PLATFORM}:{BOB}"))
    privately = await command(book, "")
    lines = privately.splitlines()
    [line] = [line for line in lines if line.startswith("#")]
    assert line.startswith(f"#{paused.id} ") and "[paused: the chat refused the message" in line
    assert f"(in {GROUP})" in line
    assert "marsho.reminders resume <number>" in privately
    listed = (await book.list_text(SimpleNamespace(  # the model's list, in the same private chat
        platform=PLATFORM, user_id=ALICE, chat_key=PRIVATE, role="member", session_key=PRIVATE))).content  # type: ignore[arg-type]
    assert f"#{paused.id}" in listed and f"(in {GROUP})" in listed and "paused" in listed
    assert f"#{paused.id} " not in await command(book, "", user=BOB)


async def test_paused_reminders_do_not_count_toward_the_per_person_bound(store: ReminderStore) -> None:
    book, _ = book_on(store, per_user=1)
    await _paused(store, _reminder(NOW - 60, what="text"))
    context = SimpleNamespace(platform=PLATFORM, user_id=ALICE, chat_key=GROUP, role="member",
                              session_key=GROUP, personal=True)
    added = await book.add(context, "PT1H", text="a new one")  # type: ignore[arg-type]
    assert added.status == "success", added.content
    refused = await book.add(context, "PT2H", text="one more")  # type: ignore[arg-type]
    assert "1 reminders already (paused ones not counted)" in refused.content


async def test_the_asker_resumes_a_paused_reminder_from_their_private_chat(store: ReminderStore) -> None:
    book, woken = book_on(store)
    once = await _paused(store, _reminder(NOW - 600, what="text"))
    daily = await _paused(store, _reminder(NOW - 600, what="text", every="P1D"))
    assert await command(book, f"resume {once.id}") == (
        f"Resumed #{once.id}: next at 2027-01-15 08:00 (Friday).")
    again = await store.get(once.id)
    assert again is not None and (again.state, again.due_at, again.attempts, again.problem) == ("active", NOW, 0, "")
    assert "Resumed" in await command(book, f"resume #{daily.id}")
    daily_again = await store.get(daily.id)
    assert daily_again is not None and daily_again.due_at == NOW - 600 + 86400  # its next time, not now
    assert [reminder.id for reminder in woken] == [once.id, daily.id]  # the loop looks at once
    assert await command(book, f"resume {once.id}") == f"Reminder #{once.id} is not paused."


async def test_only_the_asker_the_groups_admins_and_superusers_resume_a_reminder(store: ReminderStore) -> None:
    book, _ = book_on(store)
    paused = await _paused(store, _reminder(NOW - 60, what="text"))
    chat = GROUP.rsplit(":", 1)[1]
    assert "There is no reminder" in await command(book, f"resume {paused.id}", user=BOB)
    assert "There is no reminder" in await command(book, f"resume {paused.id}", user=BOB, group=chat)
    assert "Resumed" in await command(book, f"resume {paused.id}", user=ADMIN, group=chat, role="admin")
    await store.delete(paused.id)
    other = await _paused(store, _reminder(NOW - 60, what="text"))
    assert "Resumed" in await command(book, f"resume {other.id}", user="10099", role="superuser")
    assert "Which one?" in await command(book, "resume twelve")


async def test_resuming_is_refused_when_the_asker_is_at_their_bound(store: ReminderStore) -> None:
    book, _ = book_on(store, per_user=1)
    paused = await _paused(store, _reminder(NOW - 60, what="text"))
    await store.add(_reminder(NOW + 3600, what="text"))
    said = await command(book, f"resume {paused.id}")
    assert said.startswith("Not resumed: you have 1 reminders that are not paused")
    kept = await store.get(paused.id)
    assert kept is not None and kept.state == "paused"
