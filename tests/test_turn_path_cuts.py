"""What the per-turn cuts of the chat layer (issue 30) keep as it was: a value kept between turns
follows everything it is built from, and a faster path finds what the slow one found."""

from __future__ import annotations

from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import Message, MessageSegment
from nonebot.matcher import current_bot, current_event
from nonebot_plugin_alconna.uniseg import At, Text, UniMessage
from nonebug import App

from nonebot_plugin_marsho.chat import outgoing
from nonebot_plugin_marsho.chat.incoming import sees_pictures
from nonebot_plugin_marsho.redaction import REDACTED, Secrets
from tests.onebot import group_message, onebot_bot, private_message

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


def _send_msg(event: Any, text: str, *, quote: bool) -> tuple[str, dict[str, Any]]:
    message = Message([MessageSegment.reply(event.message_id), MessageSegment.text(text)] if quote
                      else [MessageSegment.text(text)])
    data: dict[str, Any] = {"message_type": event.message_type, "user_id": event.user_id, "message": message}
    if event.message_type == "group":
        data["group_id"] = event.group_id
    return "send_msg", data


@pytest.mark.parametrize("quote", [True, False])
@pytest.mark.parametrize("make", [group_message, private_message])
async def test_a_plain_answer_to_a_onebot_v11_event_is_the_send_msg_alconna_sends(app: App, make: Any,
                                                                                 quote: bool) -> None:
    async with app.test_api() as ctx:
        bot, event = onebot_bot(ctx), make("marsho hi")
        said = "Hello **there**\n\nsecond line [CQ:at,qq=1] & co"
        ctx.should_call_api(*_send_msg(event, said, quote=quote), result={"message_id": 1})  # alconna's
        ctx.should_call_api(*_send_msg(event, said, quote=quote), result={"message_id": 2})  # ours
        bot_token, event_token = current_bot.set(bot), current_event.set(event)
        try:
            await UniMessage([Text(said)]).send(reply_to=quote)
            assert await outgoing._sent_plainly(UniMessage([Text(said)]), reply=quote)
        finally:
            current_bot.reset(bot_token)
            current_event.reset(event_token)


async def test_a_message_with_more_than_a_text_goes_through_alconna(app: App) -> None:
    async with app.test_api() as ctx:
        bot, event = onebot_bot(ctx), group_message("marsho hi")
        bot_token, event_token = current_bot.set(bot), current_event.set(event)
        try:
            assert not await outgoing._sent_plainly(UniMessage([Text("a"), At("user", "10002")]), reply=True)
        finally:
            current_bot.reset(bot_token)
            current_event.reset(event_token)


def test_rich_parts_are_found_between_and_after_code_blocks_and_not_inside() -> None:
    from nonebot_plugin_marsho.chat.richtext import FormulaPart, ImageLinkPart, TextPart, find_rich

    text = ("plain words " * 20 + "\n\n$$a+b$$\n\n```py\nx = '$$c$$'\n```\n\n~~~\n![no](https://e.com/n.png)\n~~~\n"
            "then `$$d$$` and ![yes](https://e.com/y.png) ok! \\[e\\]")
    parts = find_rich(text)
    assert "".join(part.raw for part in parts) == text
    assert [(type(p), p.raw) for p in parts if not isinstance(p, TextPart)] == [
        (FormulaPart, "$$a+b$$"), (ImageLinkPart, "![yes](https://e.com/y.png)"), (FormulaPart, "\\[e\\]")]


def test_an_echo_is_judged_by_the_matcher_s_own_ratios_whatever_the_lengths() -> None:
    import difflib

    from nonebot_plugin_marsho.chat.loops import ECHO_RATIO, _repeats

    answer = "the weather in hangzhou is sunny today with a high of twenty five degrees"
    for message in ["short", answer[5:], answer[::-1], answer + " and more words said after it", answer * 2,
                    "x" * len(answer), answer[: int(len(answer) * 0.7)]]:
        matcher = difflib.SequenceMatcher(None, message, answer, autojunk=False)
        expected = answer[:120] in message or (matcher.real_quick_ratio() >= ECHO_RATIO
                                               and matcher.quick_ratio() >= ECHO_RATIO
                                               and matcher.ratio() >= ECHO_RATIO)
        assert _repeats(message, answer) is expected, message


def test_an_event_s_attribute_is_what_getattr_gives_for_every_kind_of_name() -> None:
    from pydantic import BaseModel, ConfigDict, PrivateAttr

    from nonebot_plugin_marsho.chat.lookup import attribute

    class Event(BaseModel):
        model_config = ConfigDict(extra="allow")
        group_id: int = 7
        sender: str | None = None
        _secret: str = PrivateAttr(default="p")

        @property
        def channel(self) -> str:
            return "from a property"

        @property
        def broken(self) -> str:
            raise AttributeError("not here")

        def method(self) -> str:
            return "m"

    class Odd:
        def __getattr__(self, name: str) -> str:
            return f"odd {name}"

    with_extra = Event(guild={"id": 3}, author=None)
    for obj in (Event(), with_extra, Odd(), 5, None):
        for name in ("group_id", "sender", "channel", "broken", "method", "guild", "author", "missing",
                     "_secret", "__class__"):
            assert attribute(obj, name) == getattr(obj, name, None), (obj, name)
    assert attribute(with_extra, "guild") == {"id": 3} and attribute(Event(), "guild") is None


def test_how_answers_go_out_follows_every_setting_it_is_made_of(tmp_path) -> None:
    from nonebot_plugin_marsho.chat.app import Marsho
    from nonebot_plugin_marsho.config import Config

    app = Marsho(Config(marsho_name="marsho", marsho_split_chars=800), tmp_path)
    first = app.delivery()
    assert app.delivery() == first and first.split_chars == 800
    app.config.marsho_split_chars = 120  # a setting changed in place
    assert app.delivery().split_chars == 120
    app.config.marsho_long_answer = "forward"
    assert app.delivery().long_answer == "forward"
    changed = app.with_config(marsho_name="小棉", marsho_render_latex=False)  # `marsho.*` commands, tests
    assert (changed.delivery().name, changed.delivery().render_latex) == ("小棉", False)
    assert app.delivery().name == "marsho" and app.delivery().split_chars == 120


def test_the_default_quotas_follow_the_settings() -> None:
    from nonebot_plugin_marsho.chat.bill import limits_of
    from nonebot_plugin_marsho.config import Config

    config = Config(marsho_user_daily_tokens=1000)
    assert (limits_of(config).user, limits_of(config).group, limits_of(config).all) == (1000, 0, 0)
    config.marsho_group_daily_tokens, config.marsho_daily_tokens = 5000, 9000  # `marsho.quota`, in place
    assert (limits_of(config).user, limits_of(config).group, limits_of(config).all) == (1000, 5000, 9000)


def test_overlapping_matches_are_all_found_as_a_lookahead_finds_them() -> None:
    import re

    from nonebot_plugin_marsho.redaction import _overlapping, _trie

    words = ["aba", "bab", "ab", "secret", "cre"]
    text = "abababa secret secrecret xab"
    lookahead = [(m.start(), m.group(1)) for m in re.finditer(f"(?=({_trie(words)}))", text)]
    searched = [(m.start(), m.group(1)) for m in _overlapping(re.compile(f"({_trie(words, alone=True)})"), text)]
    assert searched == lookahead and len(lookahead) > text.count("ab")


def test_a_long_secret_is_hidden_in_its_pieces_and_its_masked_form() -> None:
    key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdEFGH"
    secrets = Secrets([key, "onebot-access-token-xyz"])
    said = f"first {key[:26]} then {key[26:]}, masked sk-proj-****EFGH, token ONEBOT-ACCESS-TOKEN-XYZ."
    assert secrets(said) == f"first {REDACTED} then {REDACTED}, masked {REDACTED}, token {REDACTED}."


def test_a_text_calls_a_marsho_by_this_bot_s_names_and_the_default_ones() -> None:
    from nonebot_plugin_marsho.chat.loops import calls_a_marsho

    assert calls_a_marsho("  ...Ｍａｒｓｈｏ, hi", [])  # a default name, full-width, after punctuation
    assert calls_a_marsho("小棉你好", ["bob"]) and calls_a_marsho("BOB: hi", ["bob"])
    assert not calls_a_marsho("bob: hi", []) and not calls_a_marsho("ok", ["bob", ""])
    assert not calls_a_marsho("", ["bob"]) and not calls_a_marsho("...", [""])


def test_the_longest_trigger_word_and_command_start_are_tried_first() -> None:
    from nonebot_plugin_marsho.chat.matchers import Request, parse_request

    # "marshomallow" is a name of its own, tried before "marsho"; "!!" before "!"
    assert parse_request("marshomallow hi", ["marsho", "marshomallow"], ["!"]) == Request("chat", "hi")
    assert parse_request("!!marsho hi", ["marsho"], ["!", "!!"]) == Request("chat", "hi")
    assert parse_request("!!marsho hi", ["marsho"], ["!!", "!"]) == Request("chat", "hi")
    assert parse_request("marshomallow hi", ["marsho"], ["!"]) is None
