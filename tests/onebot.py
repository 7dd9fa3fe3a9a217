"""Helpers for nonebug tests: OneBot v11 events and a bot whose API calls the test can assert."""

from __future__ import annotations

import itertools
import time

from nonebot import get_driver
from nonebot.adapters.onebot.v11 import (
    Adapter,
    Bot,
    GroupMessageEvent,
    Message,
    PrivateMessageEvent,
)
from nonebot.adapters.onebot.v11.event import Sender
from nonebug.mixin.call_api import ApiContext

SELF_ID = "42"
_message_ids = itertools.count(1000)


def onebot_bot(ctx: ApiContext) -> Bot:
    """A real OneBot v11 Bot on nonebug's fake adapter, still named "OneBot V11".

    nonebot-plugin-alconna picks its message exporter by adapter name and turns a quote into
    plain "[reply]" text for nonebug's "fake" adapter; keeping the real name lets tests assert
    the exact `send_msg` call with its reply segment.
    """
    fake_adapter = type(ctx.create_adapter(base=Adapter))

    class NamedFakeAdapter(fake_adapter):  # type: ignore[misc, valid-type]
        @classmethod
        def get_name(cls) -> str:
            return Adapter.get_name()

    return Bot(NamedFakeAdapter(get_driver()), SELF_ID)


def group_message(
    text: str | Message, *, user_id: int = 10001, group_id: int = 20001, to_me: bool = False,
    role: str = "member",
) -> GroupMessageEvent:
    """A group message event as the OneBot adapter would hand it over."""
    message = Message(text)
    return GroupMessageEvent(
        time=int(time.time()), self_id=int(SELF_ID), post_type="message", sub_type="normal",
        user_id=user_id, message_type="group", message_id=next(_message_ids), message=message,
        original_message=message, raw_message=str(message), font=0,
        sender=Sender(user_id=user_id, nickname=f"user{user_id}", role=role), group_id=group_id,
        to_me=to_me,
    )


def private_message(text: str, *, user_id: int = 10001) -> PrivateMessageEvent:
    """A private message event."""
    message = Message(text)
    return PrivateMessageEvent(
        time=int(time.time()), self_id=int(SELF_ID), post_type="message", sub_type="friend",
        user_id=user_id, message_type="private", message_id=next(_message_ids), message=message,
        original_message=message, raw_message=text, font=0,
        sender=Sender(user_id=user_id, nickname=f"user{user_id}"), to_me=True,
    )


def reply_call(event: GroupMessageEvent | PrivateMessageEvent, text: str) -> tuple[str, dict]:
    """The `send_msg` call that answers `event` with `text`, quoting it."""
    message = Message(f"[CQ:reply,id={event.message_id}]") + text
    if isinstance(event, GroupMessageEvent):
        return "send_msg", {
            "message_type": "group", "user_id": event.user_id, "group_id": event.group_id,
            "message": message,
        }
    return "send_msg", {"message_type": "private", "user_id": event.user_id, "message": message}
