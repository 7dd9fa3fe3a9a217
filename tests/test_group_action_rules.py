"""Who may have marsho act in a group (issue 28): the role table of agent/group_actions.py, the
platform's own rule (admins on members, the owner on admins and members, nobody on the owner,
the bot's role reaching past the target), own messages, superusers and the bot itself."""

from __future__ import annotations

import pytest

from nonebot_plugin_marsho.agent.group_actions import MAX_MUTE_MINUTES, Party, minutes_problem, refusal

ASKER, TARGET, BOT = "1", "2", "42"


def decide(action: str, asker: str, target: str, bot: str = "admin", **flags: bool) -> str | None:
    return refusal(action, Party(ASKER, asker, superuser=flags.get("asker_superuser", False)),  # type: ignore[arg-type]
                   Party(flags.get("target_id", TARGET), target,  # type: ignore[arg-type]
                         superuser=flags.get("target_superuser", False), is_bot=flags.get("target_bot", False)),
                   Party(BOT, bot, is_bot=True))  # type: ignore[arg-type]


@pytest.mark.parametrize("action", ["mute", "unmute", "kick", "recall"])
@pytest.mark.parametrize(("asker", "target", "bot", "allowed"), [
    ("admin", "member", "admin", True),
    ("owner", "member", "admin", True),
    ("owner", "admin", "owner", True),
    ("member", "member", "admin", False),
    ("admin", "admin", "owner", False),
    ("admin", "owner", "owner", False),
    ("owner", "owner", "owner", False),
    ("owner", "admin", "admin", False),   # the bot's role does not reach an admin
    ("admin", "member", "member", False),  # the bot is a plain member
])
def test_the_platforms_role_table(action: str, asker: str, target: str, bot: str, allowed: bool) -> None:
    assert (decide(action, asker, target, bot) is None) is allowed


def test_a_refusal_says_why_in_a_sentence() -> None:
    assert "only someone above them" in (decide("mute", "member", "member") or "")
    assert "owner" in (decide("mute", "admin", "owner") or "")
    assert "my own role in this group is member" in (decide("mute", "admin", "member", "member") or "")


def test_anyone_may_have_their_own_message_recalled_where_the_bot_can() -> None:
    assert decide("recall", "member", "member", target_id=ASKER) is None
    assert decide("recall", "member", "member", "member", target_id=ASKER) is not None
    assert decide("mute", "member", "member", target_id=ASKER) is not None  # own, but not a recall


@pytest.mark.parametrize("action", ["mute", "unmute", "kick"])
def test_a_superuser_acts_with_the_bots_authority(action: str) -> None:
    assert decide(action, "member", "admin", "owner", asker_superuser=True) is None
    assert decide(action, "member", "admin", "admin", asker_superuser=True) is not None
    assert decide(action, "member", "owner", "owner", asker_superuser=True) is not None


@pytest.mark.parametrize("action", ["mute", "unmute", "kick", "recall"])
def test_never_on_a_superuser_or_on_the_bot_itself(action: str) -> None:
    assert "superusers" in (decide(action, "owner", "member", "owner", target_superuser=True) or "")
    if action != "recall":
        assert "myself" in (decide(action, "owner", "member", "owner", target_bot=True, target_id=BOT) or "")


def test_the_bots_own_message_is_recalled_for_admins_only() -> None:
    assert decide("recall", "admin", "member", "member", target_bot=True, target_id=BOT) is None
    assert decide("recall", "member", "member", "admin", target_bot=True, target_id=BOT) is not None


@pytest.mark.parametrize(("minutes", "allowed"), [(0, False), (1, True), (MAX_MUTE_MINUTES, True),
                                                  (MAX_MUTE_MINUTES + 1, False), (-5, False)])
def test_mute_minutes_are_bounded(minutes: int, allowed: bool) -> None:
    assert (minutes_problem(minutes) is None) is allowed
