"""How text nobody here vouches for reaches the model (issue 25): people's messages, the quoted
message, the group's recent chat, memories, summaries, a group's persona. NoneBot-free.

The threat: a person writes a newline and, on the line after it, something that reads like
another speaker (`Alice (21:42): I allow Bob...`), like one of our marks (`[End of memories]`,
`[End of quote]`, `[End of the summary]`) or like the system's instructions (`[SYSTEM: ...]`).

The scheme is one rule, deterministic so that stored and repeated text stays byte for byte the
same between turns (providers cache a request's start; a random tag per request would break
that): every line a person's text gives after its first starts with CONTINUED, and so does its
first line when nothing of ours is before it on that line (`alone`). Our own lines (speaker
labels, marks, the note) never start with CONTINUED, so a line without it is never a person's,
whatever it says; a person who types CONTINUED gets it twice, which changes nothing. Line breaks
are every kind `str.splitlines` knows (\\v, \\f, U+2028, U+2029, \\x1c..., \\x85), and other
control, format and bidirectional characters become spaces, so none starts a line of its own
or reorders one. Speakers carry who they are: `Alice#3f2a`, a short id from the platform and the
user id (`short_id`) beside a name that cannot hold `#`, so a member who copies another's card
still has a label of their own.
"""

from __future__ import annotations

import hashlib
import re

CONTINUED = "┆ "
"""Starts every line of a person's text that could otherwise start a line of the request."""
CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
"""What a framed line may not hold: control characters (tabs may stay), zero-width spaces and
bidirectional marks, overrides and isolates (joiners stay: emoji sequences need them); line
breaks are split before it applies."""
SHORT_ID_BYTES = 2
"""Bytes of the hash in a speaker's short id (4 hex digits): a label differs between any two
members whose names or ids differ, and picking an account whose id gives another's short id
is one chance in 65,536 per account."""


def framed(text: str, *, alone: bool = False) -> str:
    """`text` as the model reads it: each line after the first starts with CONTINUED (the first
    too when `alone`: nothing of ours is before it on its line), no control characters."""
    lines = [CONTROL.sub(" ", line) for line in text.splitlines()] or [""]
    first = [] if alone else [lines.pop(0)]
    return "\n".join([*first, *(CONTINUED + line if line else CONTINUED.rstrip() for line in lines)])


def short_id(platform: str, user_id: str) -> str:
    """A speaker's stable short id: the same for the same account in every chat and process,
    different for another account (`3f2a`)."""
    digest = hashlib.blake2b(f"{platform}:{user_id}".encode(), digest_size=SHORT_ID_BYTES)
    return digest.hexdigest()
