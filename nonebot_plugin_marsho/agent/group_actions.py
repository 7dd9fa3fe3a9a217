"""Who may have marsho act in a group (issue 28): mute, unmute, kick and recall, decided from the
platform's roles of the asker, the target and the bot itself, never from what anyone wrote.

NoneBot-free: chat/group_actions.py asks the platform for the roles and makes the calls; this
module only says whether an action may run and, when it may not, why, in a sentence the model can
pass on. The rule is the platform's own: an admin acts on members, the owner on admins and
members, nobody on the owner; anyone may have their own message recalled; the bot's own role
must reach past the target too (the platform would refuse otherwise); the bot's superusers act
with the bot's authority; nobody acts on the bot itself or on a superuser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TOOLKIT = "group"
GROUP_TOOLS = (f"{TOOLKIT}__mute", f"{TOOLKIT}__unmute", f"{TOOLKIT}__kick", f"{TOOLKIT}__recall")
MAX_MUTE_MINUTES = 43200
"""The longest mute, in minutes: QQ's 30 days (set_group_ban takes at most 2,592,000 seconds)."""

Action = Literal["mute", "unmute", "kick", "recall"]
GroupRole = Literal["owner", "admin", "member"]
ROLE_RANK: dict[str, int] = {"member": 0, "admin": 1, "owner": 2}
"""The platform's roles, lowest first: one acts only on those strictly below."""


@dataclass(frozen=True)
class Party:
    """Someone an action involves, as the platform and the bot's settings know them."""

    user_id: str
    role: GroupRole = "member"
    """Their role in the group, as the platform reports it."""
    superuser: bool = False
    """One of the bot's SUPERUSERS."""
    is_bot: bool = False
    """The bot's own account."""
    rank: int | None = None
    """Where the platform orders its members by more than the three roles (Discord's highest
    role's position): between two with a rank who are neither the owner nor a member, the
    higher rank decides instead of the roles."""


def minutes_problem(minutes: int, *, most: int = MAX_MUTE_MINUTES, limit: str = "") -> str | None:
    """Why a mute of `minutes` cannot be asked for, None when it can; `most` and `limit` (in
    words, "Discord's longest timeout, 28 days") where the platform's bound is lower."""
    if not 1 <= minutes <= most:
        span = limit or "30 days"
        return (f"A mute lasts 1 to {most} minutes ({span}), not {minutes}: nothing was "
                "done. Ask how long, within that, or use group__unmute to lift one.")
    return None


def target_problem(action: Action, target: Party) -> str | None:
    """Why nobody may have `action` done to `target`, whoever asks; None when someone may."""
    if target.is_bot:
        if action == "recall":
            return None  # the bot's own message: decided by the asker's role (`refusal`)
        return f"I cannot {action} myself: nothing was done."
    if target.superuser:
        return f"{target.user_id} is one of my superusers: I never {action} them. Nothing was done."
    return None


def refusal(action: Action, asker: Party, target: Party, bot: Party) -> str | None:
    """Why `asker` may not have marsho `action` `target` (for a recall: the quoted message's
    sender) here, in a sentence for the model; None when the action may run."""
    own = action == "recall" and target.user_id == asker.user_id and not target.is_bot
    problem = None if own else target_problem(action, target)
    if problem is not None:
        return problem
    what = _described(action, target)
    if not own and not asker.superuser:
        if target.is_bot:
            # the bot may always delete its own message; only a group's admins may ask for it
            if ROLE_RANK[asker.role] < ROLE_RANK["admin"]:
                return (f"Only the group's admins may have my own messages recalled; the person asking "
                        f"is a {asker.role}. Nothing was done.")
            return None
        if target.role == "owner":
            return f"Nobody can {what}: they are the group's owner. Nothing was done."
        if _ranked(asker, target):
            if not _outranks(asker, target):
                return (f"The highest role of the person asking is not above {target.user_id}'s, so "
                        f"they cannot {what} on this platform. Nothing was done.")
        elif ROLE_RANK[asker.role] <= ROLE_RANK[target.role]:
            return (f"The person asking is a {asker.role} of this group and {target.user_id} is "
                    f"a{'n' if target.role != 'member' else ''} {target.role}: only someone above them "
                    f"(an admin for a member, the owner for an admin) can {what}. Nothing was done.")
    if target.is_bot:
        return None
    return _bot_refusal(what, target, bot)


def _bot_refusal(what: str, target: Party, bot: Party) -> str | None:
    """Why the bot's own standing does not reach `target`, None when it does."""
    if _ranked(bot, target):
        if not _outranks(bot, target):
            return (f"I cannot {what}: my highest role here is not above theirs. Nothing was done; "
                    "a group admin can do it, or move my role above theirs.")
        return None
    if ROLE_RANK[bot.role] <= ROLE_RANK[target.role]:
        need = "the group's owner" if target.role == "admin" else "an admin of the group"
        return (f"I cannot {what}: my own role in this group is {bot.role}, and it takes {need}. "
                "Nothing was done; a group admin can do it, or make me an admin.")
    return None


def _ranked(actor: Party, target: Party) -> bool:
    """Whether the platform's ranks decide between `actor` and `target`: both have one, the
    actor has the authority at all (not a member) and is not the owner, who is above all."""
    return (actor.rank is not None and target.rank is not None and actor.role == "admin"
            and target.role != "owner")


def _outranks(actor: Party, target: Party) -> bool:
    return actor.rank is not None and target.rank is not None and actor.rank > target.rank


def _described(action: Action, target: Party) -> str:
    if action == "recall":
        return f"recall a message of {target.user_id}"
    return f"{action} {target.user_id}"
