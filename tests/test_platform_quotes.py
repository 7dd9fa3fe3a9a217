"""Quoted messages on every adapter (issue 29): the quote's text, its sender and its files reach
the model, whichever way the platform hands the quoted message over. On Discord a quote read
empty (`[Quoted message]` then `[End of quote]`) when the event did not carry the quoted message
(`referenced_message` left out: the adapter fetched it into `event.reply` instead), when it was
a bot's embed, or forwarded; tests/platforms.py builds each adapter's real events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from nonebot import require

from nonebot_plugin_marsho.chat.incoming import discord_quoted
from tests.conftest import configured
from tests.fake_openai import FakeOpenAI, text
from tests.platforms import PLATFORMS, Files, next_id
from tests.test_platforms import QUOTE_CELLS, last_question, question_text, say

require("nonebot_plugin_uninfo")


@pytest.fixture
def files() -> Iterator[Files]:
    served = Files()
    yield served
    served.close()


SENDER_CELLS = [cell for cell in QUOTE_CELLS if cell.values not in (("QQ", "group"), ("QQ", "private"))]
"""QQ's official API gives a group or private message's quoted elements without their sender."""


@pytest.mark.parametrize(("name", "where"), SENDER_CELLS)
async def test_a_quote_comes_with_who_sent_it(app, fake: FakeOpenAI, plugin_engine, name: str, where: str) -> None:
    chat = PLATFORMS[name]()
    fake.push(text("It means pi"))
    await say(chat, chat.event(where, "marsho what does this mean?", quote="the quoted words 3141"))
    question = question_text(last_question(fake))
    assert "[Quoted message from " in question and "the quoted words 3141" in question, question


def _discord(quote: str, **change: Any) -> tuple[Any, Any]:
    """A Discord chat and the payload of a channel message quoting `quote`, changed by `change`."""
    chat = PLATFORMS["Discord"]()
    chat.remember(chat.user_id, None, "member")
    message = chat._message("marsho what does it say?", channel_id=chat.channel_id, guild_id=chat.guild_id,
                            user_id=chat.user_id, quote=quote, quote_picture=None, picture_url=None,
                            picture_id=None)
    quoted = message["referenced_message"]
    for key, value in change.items():
        if value is None:
            message.pop(key, None)
        else:
            quoted[key] = value
    return chat, message


async def test_a_discord_quote_the_event_does_not_carry_is_read_from_the_adapters_lookup(
        app, fake: FakeOpenAI, plugin_engine) -> None:
    chat, message = _discord("the fetched words 2718", referenced_message=None)
    fake.push(text("e"))
    await say(chat, chat._parse(message))
    looked_up = [{k: str(v) for k, v in data.items()} for api, data in chat.calls if api == "get_channel_message"]
    assert looked_up == [{"channel_id": chat.channel_id, "message_id": message["message_reference"]["message_id"]}]
    question = question_text(last_question(fake))
    assert "[Quoted message from " in question and "the fetched words 2718" in question, question


async def test_a_quoted_discord_embed_reads_as_its_text(app, fake: FakeOpenAI, plugin_engine) -> None:
    embed = {"title": "Weather", "description": "Rain at 5 pm", "fields": [{"name": "Wind", "value": "NW 3"}],
             "footer": {"text": "by WeatherBot"}}
    chat, message = _discord("", embeds=[embed])
    fake.push(text("Rain."))
    await say(chat, chat._parse(message))
    question = question_text(last_question(fake))
    assert "Weather\n┆ Rain at 5 pm\n┆ Wind: NW 3\n┆ by WeatherBot" in question, question


def test_a_forwarded_discord_message_is_read_from_its_snapshot() -> None:
    chat, message = _discord("", referenced_message=None)
    message["message_reference"]["type"] = 1
    message["message_snapshots"] = [{"message": {"type": 0, "content": "forwarded words", "embeds": [],
                                                 "attachments": [], "timestamp": message["timestamp"],
                                                 "edited_timestamp": None, "flags": 0, "mentions": [],
                                                 "mention_roles": []}}]
    assert discord_quoted(chat._parse(message)).content == "forwarded words"


async def test_a_file_attached_to_a_quoted_discord_message_is_read(
        app, fake: FakeOpenAI, plugin_engine, files: Files) -> None:
    url = files.add("/notes.txt", b"The locker code is 7712.")
    attachment = {"id": next_id(), "filename": "notes.txt", "size": 24, "url": url, "proxy_url": url,
                  "content_type": "text/plain; charset=utf-8"}
    chat, message = _discord("see the file", attachments=[attachment])
    fake.push(text("7712."))
    with configured(marsho_image_allow_private=True):
        await say(chat, chat._parse(message))
    question = question_text(last_question(fake))
    assert "[file notes.txt, read for this question]" in question and "The locker code is 7712." in question
    assert files.hits == ["/notes.txt"]


async def test_a_document_quoted_on_telegram_is_fetched_through_the_adapter_and_read(
        app, fake: FakeOpenAI, plugin_engine, files: Files) -> None:
    from nonebot.adapters.telegram.event import Event as TelegramEvent

    chat = PLATFORMS["Telegram"](files)
    chat.remember(chat.user_id, None, "member")
    # the fake Bot API names every file photos/<id>.png; the document's own name says what it is
    files.add(f"/file/bot{chat.bot.bot_config.token}/photos/doc1.png", b"The locker code is 7712.")
    group = chat._group()
    quoted = {"message_id": int(next_id()), "date": 1700000000, "chat": group, "from": chat._user("5559999"),
              "document": {"file_id": "doc1", "file_unique_id": "udoc1", "file_name": "notes.txt",
                           "file_size": 24}}
    message = {"message_id": int(next_id()), "date": 1700000060, "chat": group, "from": chat._user(chat.user_id),
               "text": "marsho what is the code?", "reply_to_message": quoted}
    fake.push(text("7712."))
    await say(chat, TelegramEvent.parse_event({"update_id": int(next_id()), "message": message}))
    question = question_text(last_question(fake))
    # (the Telegram adapter drops a document's name: it is read by what its bytes are)
    assert "[file document, read for this question]" in question and "The locker code is 7712." in question
    assert any(api == "get_file" and data["file_id"] == "doc1" for api, data in chat.calls)


async def test_a_file_quoted_on_feishu_is_fetched_by_its_message_and_read(
        app, fake: FakeOpenAI, plugin_engine) -> None:
    chat = PLATFORMS["Feishu"]()
    event = chat.event("group", "marsho what is the code?", quote="placeholder")
    quoted_id = event.event.message.parent_id
    chat.messages[quoted_id] |= {"msg_type": "file", "body": {"content": json.dumps(
        {"file_key": "file_v3_notes", "file_name": "notes.txt"})}}
    chat.pictures["file_v3_notes"] = b"The locker code is 7712."  # what the fake's resources answer
    fake.push(text("7712."))
    await say(chat, event)
    question = question_text(last_question(fake))
    assert "[file notes.txt, read for this question]" in question and "The locker code is 7712." in question
    fetched = [(api, data) for api, data in chat.calls if "/resources/" in api]
    assert fetched == [(f"im/v1/messages/{quoted_id}/resources/file_v3_notes",
                        {"method": "GET", "params": {"type": "file"}})]
