"""What the per-turn cuts of the chat layer (issue 30) keep as it was: a value kept between turns
follows everything it is built from, and a faster path finds what the slow one found."""

from __future__ import annotations

from nonebot_plugin_marsho.chat.incoming import sees_pictures
from nonebot_plugin_marsho.redaction import REDACTED, Secrets

SECRET = "short-key"
"""Hidden whole and in any case, but not piece by piece (under PIECE_SECRET characters)."""


def test_a_secret_split_by_a_line_break_is_hidden_where_it_stands_after_other_breaks() -> None:
    secrets = Secrets([SECRET])
    text = "first line\nsecond\r\n  third\\nfourth<br>\n" + "sho" + "\r\n" + "rt-key" + " stays\nend"
    assert secrets(text) == "first line\nsecond\r\n  third\\nfourth<br>\n" + REDACTED + " stays\nend"


def test_a_text_with_line_breaks_and_no_secret_is_left_as_it_is() -> None:
    secrets = Secrets([SECRET])
    text = "a\r\nb\rc\nd\\ne<br/>f\n\n  g\r"
    assert secrets(text) == text


def test_a_lone_carriage_return_does_not_join_a_secret() -> None:
    assert Secrets([SECRET])("short-\rkey") == "short-\rkey"


def test_whether_a_model_sees_pictures_follows_the_model_and_the_list() -> None:
    patterns = ["my-vl-*"]
    assert sees_pictures("My-VL-7B", patterns)
    assert not sees_pictures("other-7b", patterns)
    patterns.append("other-*")  # the list changed (a reloaded config): asked again
    assert sees_pictures("other-7b", patterns)
    assert not sees_pictures("other-7b", ["my-vl-*"])
