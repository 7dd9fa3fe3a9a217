"""Chats on every adapter Marsho supports, for nonebug tests: message events built by each
adapter's own parsing from payloads shaped like the platform's, and a bot per adapter that
records every API call and answers the ones NoneBot, nonebot-plugin-uninfo and
nonebot-plugin-alconna make (who is speaking and their role, a quoted message, a picture given
by file id, sending the reply).

    chat = PLATFORMS["Telegram"]()
    event = chat.group_event("marsho hi", role="admin")
    await chat.bot.handle_event(event)     # the adapter's own preprocessing, then the matchers
    chat.sent_texts()                      # what the bot sent, as text

Each `Chat` keeps the ids its events use (`group_id`, `channel_id`, `guild_id`, `user_id`) and
the session keys the plugin is expected to use for them (`group_key()`...).
"""

from __future__ import annotations

import base64
import inspect
import itertools
import json
import time
import typing
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, ClassVar

from nonebot import get_adapter
from nonebot.adapters import Bot as BaseBot
from nonebot.adapters import Event
from nonebot.compat import type_validate_python
from pydantic import TypeAdapter

from tests.loopback import LoopbackServer, QuietHandler, serve, shut

_ids = itertools.count(7_000_001)
ROLES = ("owner", "admin", "member")
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
"""A valid one-pixel PNG: the picture every platform's fake serves."""
BIG = PNG + bytes(20_000)
"""A picture over a 10 000-byte cap (the least MARSHO_IMAGE_MAX_BYTES): "pic_big" serves it."""


def picture_bytes(file_id: str) -> bytes:
    return BIG if "big" in file_id else PNG


def next_id() -> str:
    return str(next(_ids))


def iso_now() -> str:
    return datetime.now(timezone.utc).isoformat()


# --- a loopback host for the pictures (and Telegram's file API) ------------------------------


class FileServer(LoopbackServer):
    files: dict[str, bytes]
    hits: list[str]


class FileHandler(QuietHandler):
    server: FileServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.hits.append(path)
        body = self.server.files.get(path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "image/png" if body is not None else "text/plain")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")


class Files:
    """Pictures served on 127.0.0.1 (the adapters fetch them with their own HTTP client)."""

    def __init__(self) -> None:
        self.server: FileServer = serve(FileHandler, server_class=FileServer)  # type: ignore[assignment]
        self.server.files, self.server.hits = {}, []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, path: str, data: bytes = PNG) -> str:
        """Serve `data` at `path`; returns its URL."""
        self.server.files[path] = data
        return self.base + path

    @property
    def hits(self) -> list[str]:
        return self.server.hits

    def close(self) -> None:
        shut(self.server)


# --- the recording bot --------------------------------------------------------------------------


class Recorder(BaseBot):
    """Mixed in before an adapter's Bot: every `call_api` is recorded in `calls` and answered by
    `answer` (the JSON the platform would return), turned into what the adapter's own method
    returns (its model) by `typed`."""

    chat: Chat

    async def call_api(self, api: str, **data: Any) -> Any:  # type: ignore[override]
        self.chat.calls.append((api, data))
        raw = self.chat.answer(api, data)
        if isinstance(raw, Exception):
            raise raw
        return self.chat.typed(api, raw)


def _return_type(function: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(function).get("return")
    except Exception:
        return inspect.signature(function).return_annotation


def validated(tp: Any, raw: Any) -> Any:
    if tp in (None, inspect.Signature.empty, Any) or raw is None:
        return raw
    return TypeAdapter(tp).validate_python(raw)


class Chat:
    """One bot on one platform, its users and their roles, and the calls it made."""

    adapter_name: ClassVar[str]
    self_id: ClassVar[str] = "90001"
    roles_from_platform: ClassVar[tuple[str, ...]] = ("owner", "admin")
    """The group roles uninfo reads on this platform (the rest are members to it)."""
    group_id: str = "30001"
    guild_id: str = "40001"
    channel_id: str = "50001"
    user_id: str = "10001"

    def __init__(self, files: Files | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.roles: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        """Messages the platform can return by id (quoted messages)."""
        self.files = files
        self.bot = self.make_bot()
        self.bot.chat = self

    # what each platform defines
    def make_bot(self) -> Any:
        raise NotImplementedError

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    def typed(self, api: str, raw: Any) -> Any:
        return raw

    def group_event(self, text: str, **options: Any) -> Event:
        raise NotImplementedError

    def private_event(self, text: str, **options: Any) -> Event:
        raise NotImplementedError

    def channel_event(self, text: str, **options: Any) -> Event:
        raise NotImplementedError(f"{self.adapter_name} has no guild channels")

    sends: ClassVar[tuple[str, ...]] = ()
    """The API calls that send a message."""
    wheres: ClassVar[tuple[str, ...]] = ("group", "private")
    """The scenes of the platform: "group", "channel" (a guild channel), "private", and QQ's
    "dms" (a guild's direct message)."""

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        raise NotImplementedError

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        """Where a send call went ("chat:<id>"...), to compare with `expected_target`."""
        raise NotImplementedError

    def expected_target(self, where: str, event: Any) -> str:
        """Where the answer to `event` (said in a `where`) should go."""
        raise NotImplementedError

    # shared
    @property
    def key_prefix(self) -> str:
        """What session keys start with: the adapter's name (`bot.adapter.get_name()`)."""
        return self.adapter_name

    def remember(self, user_id: str, name: str | None, role: str) -> str:
        assert role in ROLES, role
        self.roles[user_id] = role
        self.names[user_id] = name or f"user{user_id}"
        return self.names[user_id]

    def sent_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The calls that sent a message, in order."""
        return [(api, data) for api, data in self.calls if api in self.sends]

    def sent_texts(self) -> list[str]:
        """The text of every message the bot sent, in order."""
        return [self.text_of(api, data) for api, data in self.sent_calls()]

    def sent_targets(self) -> list[str]:
        """Where every message the bot sent went, in order."""
        return [self.target_of(api, data) for api, data in self.sent_calls()]

    def expected_key(self, where: str, event: Event, scope: str = "group") -> str:
        """The session key of the contract (MARSHO_SESSION_SCOPE `scope`) for `event`, said in a
        `where`: `<adapter>:group:<group>`, `<adapter>:channel:<guild>/<channel>`,
        `<adapter>:private:<user>`; `:user:<user>` appended (user_in_group), or
        `<adapter>:user:<user>` in groups and channels (user)."""
        user_id = event.get_user_id()
        if where in ("private", "dms"):
            return f"{self.key_prefix}:private:{user_id}"
        if scope == "user":
            return f"{self.key_prefix}:user:{user_id}"
        key = self.group_key() if where == "group" else self.channel_key()
        return f"{key}:user:{user_id}" if scope == "user_in_group" else key

    def group_key(self, group_id: str | None = None) -> str:
        return f"{self.key_prefix}:group:{group_id or self.group_id}"

    def channel_key(self, guild_id: str | None = None, channel_id: str | None = None) -> str:
        return f"{self.key_prefix}:channel:{guild_id or self.guild_id}/{channel_id or self.channel_id}"

    def event(self, where: str, text: str, **options: Any) -> Event:
        """A message said in a `where` (one of `wheres`)."""
        return getattr(self, f"{where}_event")(text, **options)


# --- Telegram -------------------------------------------------------------------------------------


class TelegramChat(Chat):
    adapter_name = "Telegram"
    self_id = "777000111"
    username = "MarshoTestBot"
    group_id = "-1001234567890"
    user_id = "5550001"
    roles_from_platform = ("owner", "admin")
    sends = ("send_message", "send_photo", "send_media_group", "send_document")
    STATUS: ClassVar[dict[str, str]] = {"owner": "creator", "admin": "administrator", "member": "member"}

    def make_bot(self) -> Any:
        from nonebot.adapters.telegram import Adapter, Bot
        from nonebot.adapters.telegram.config import BotConfig

        class TelegramBot(Recorder, Bot):
            pass

        api_server = (self.files.base + "/") if self.files else "https://api.telegram.org/"
        bot = TelegramBot(get_adapter(Adapter), self.self_id,
                          config=BotConfig(token=f"{self.self_id}:TESTTOKEN", api_server=api_server))
        bot.username = self.username
        return bot

    def typed(self, api: str, raw: Any) -> Any:
        from nonebot.adapters.telegram.api import API

        function = getattr(API, api, None)
        return validated(inspect.signature(function).return_annotation, raw) if function else raw

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id == self.self_id:
            return {"id": int(user_id), "is_bot": True, "first_name": "Marsho", "username": self.username}
        return {"id": int(user_id), "is_bot": False, "first_name": self.names.get(user_id, f"user{user_id}"),
                "username": f"u{user_id}"}

    def _group(self) -> dict[str, Any]:
        return {"id": int(self.group_id), "title": "Test group", "type": "supergroup"}

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "get_chat_member":
            user_id = str(data["user_id"])
            status = self.STATUS[self.roles.get(user_id, "member")]
            member: dict[str, Any] = {"status": status, "user": self._user(user_id)}
            if status == "administrator":
                member |= {"can_be_edited": False, "is_anonymous": False, "can_manage_chat": True,
                           "can_delete_messages": True, "can_manage_video_chats": True,
                           "can_restrict_members": True, "can_promote_members": False,
                           "can_change_info": True, "can_invite_users": True,
                           "can_post_stories": False, "can_edit_stories": False,
                           "can_delete_stories": False}
            elif status == "creator":
                member |= {"is_anonymous": False}
            return member
        if api == "get_chat":
            chat_id = str(data["chat_id"])
            if chat_id == self.group_id:
                return {**self._group(), "accent_color_id": 0, "max_reaction_count": 11}
            return {"id": int(chat_id), "type": "private", "first_name": self.names.get(chat_id, "x"),
                    "accent_color_id": 0, "max_reaction_count": 11}
        if api == "get_me":
            return self._user(self.self_id)
        if api == "get_user_profile_photos":
            return {"total_count": 0, "photos": []}
        if api == "get_file":
            return {"file_id": data["file_id"], "file_unique_id": "u" + data["file_id"],
                    "file_size": len(PNG), "file_path": f"photos/{data['file_id']}.png"}
        if api in self.sends:
            chat_id = str(data.get("chat_id"))
            chat = self._group() if chat_id == self.group_id else {
                "id": int(chat_id), "type": "private", "first_name": "x"}
            message = {"message_id": int(next_id()), "date": int(time.time()), "chat": chat,
                       "from": self._user(self.self_id)}
            if api == "send_message":
                message["text"] = data.get("text") or ""
            else:
                message["photo"] = [{"file_id": "sent", "file_unique_id": "sent", "width": 1,
                                     "height": 1}]
            return [message] if api == "send_media_group" else message
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        return f"chat:{data['chat_id']}"

    def expected_target(self, where: str, event: Any) -> str:
        return f"chat:{event.chat.id}"

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        if api == "send_message":
            return data["text"]
        if api == "send_media_group":
            return "".join(item.caption or "" for item in data.get("media") or [])
        return data.get("caption") or ""

    def picture_file(self, file_id: str) -> None:
        """Serve a picture for `file_id` where the Bot API's file download would be."""
        assert self.files is not None
        self.files.add(f"/file/bot{self.bot.bot_config.token}/photos/{file_id}.png", picture_bytes(file_id))

    def _update(self, text: str, chat: dict[str, Any], *, user_id: str | None, name: str | None,
                role: str, quote: str | None = None, quote_picture: str | None = None,
                picture_id: str | None = None, picture_url: str | None = None,
                quote_from_bot: bool = False) -> Event:
        from nonebot.adapters.telegram.event import Event as TelegramEvent

        assert picture_url is None, "Telegram gives pictures by file id only"
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        message: dict[str, Any] = {"message_id": int(next_id()), "date": int(time.time()), "chat": chat,
                                   "from": self._user(user_id)}
        if picture_id:
            self.picture_file(picture_id)
            message |= {"photo": [{"file_id": picture_id, "file_unique_id": "u" + picture_id,
                                   "width": 1, "height": 1, "file_size": len(PNG)}],
                        "caption": text}
        else:
            message["text"] = text
            if text.startswith("/"):
                command = text.split()[0]
                message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        if quote is not None or quote_picture:
            author = self.self_id if quote_from_bot else "5559999"
            if not quote_from_bot:
                self.remember(author, "Quoted Person", self.roles.get(author, "member"))
            quoted: dict[str, Any] = {"message_id": int(next_id()), "date": int(time.time()) - 60,
                                      "chat": chat, "from": self._user(author)}
            if quote_picture:
                self.picture_file(quote_picture)
                quoted |= {"photo": [{"file_id": quote_picture, "file_unique_id": "u" + quote_picture,
                                      "width": 1, "height": 1}], "caption": quote or ""}
            else:
                quoted["text"] = quote
            message["reply_to_message"] = quoted
        return TelegramEvent.parse_event({"update_id": int(next_id()), "message": message})

    def group_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                    role: str = "member", **options: Any) -> Event:
        return self._update(text, self._group(), user_id=user_id, name=name, role=role, **options)

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        user_id = user_id or self.user_id
        chat = {"id": int(user_id), "type": "private", "first_name": name or f"user{user_id}"}
        return self._update(text, chat, user_id=user_id, name=name, role="member", **options)


# --- QQ official API --------------------------------------------------------------------------------


class QQChat(Chat):
    adapter_name = "QQ"
    wheres = ("group", "private", "channel", "dms")
    self_id = "102000001"
    group_id = "C9F778FE6ADF9D1D1DBE395BF744A33A"
    user_id = "E4F4AEA33253A2797FB897C50B81D7ED"
    """The member's id in the group (member_openid)."""
    c2c_id = "0B9FBB3F2D7D4E5C8A3E6F1A2B3C4D5E"
    """The same person in a C2C chat (user_openid): QQ gives each scene its own openid."""
    guild_id = "5237615478283154023"
    channel_id = "1234567"
    guild_user_id = "144115218677563300"
    dms_guild_id = "9876543210987654321"
    """The guild QQ makes for a direct message session."""
    sends = ("post_group_messages", "post_c2c_messages", "post_messages", "post_dms_messages")
    GUILD_ROLE: ClassVar[dict[str, str]] = {"owner": "4", "admin": "2", "member": "1"}

    def make_bot(self) -> Any:
        from nonebot.adapters.qq import Adapter, Bot
        from nonebot.adapters.qq.config import BotInfo
        from nonebot.adapters.qq.models import User

        class QQBot(Recorder, Bot):
            pass

        bot = QQBot(get_adapter(Adapter), self.self_id,
                    BotInfo(id=self.self_id, token="token", secret="secret"))
        bot._self_info = User(id="1122334455667788990", username="Marsho-测试中", bot=True)
        return bot

    def typed(self, api: str, raw: Any) -> Any:
        from nonebot.adapters.qq import Bot

        handler = getattr(Bot, api, None)
        return validated(_return_type(handler.func), raw) if handler is not None else raw

    def _guild_user(self, user_id: str) -> dict[str, Any]:
        return {"id": user_id, "username": self.names.get(user_id, f"user{user_id}"), "avatar": "",
                "bot": user_id == self.bot._self_info.id}

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "me":
            return {"id": self.bot._self_info.id, "username": "Marsho-测试中", "avatar": ""}
        if api == "get_guild":
            return {"id": data["guild_id"], "name": "Test guild", "icon": "", "owner_id": "1",
                    "owner": False, "member_count": 3, "max_members": 100, "description": "",
                    "joined_at": "2024-01-01T00:00:00+08:00"}
        if api == "get_channel":
            return {"id": data["channel_id"], "guild_id": self.guild_id, "name": "general", "type": 0,
                    "sub_type": 0, "position": 1}
        if api == "get_member":
            user_id = data["user_id"]
            return {"user": self._guild_user(user_id), "nick": self.names.get(user_id),
                    "roles": [self.GUILD_ROLE[self.roles.get(user_id, "member")]],
                    "joined_at": "2024-01-01T00:00:00+08:00"}
        if api == "get_guild_roles":
            return {"guild_id": data["guild_id"], "role_num_limit": 30, "roles": [
                {"id": "4", "name": "创建者", "color": 0, "hoist": 1, "number": 1, "member_limit": 1},
                {"id": "2", "name": "超级管理员", "color": 0, "hoist": 1, "number": 1, "member_limit": 50},
                {"id": "1", "name": "普通成员", "color": 0, "hoist": 0, "number": 3, "member_limit": 1000},
            ]}
        if api == "get_channel_roles_permissions":
            return {"channel_id": data["channel_id"], "role_id": data["role_id"], "permissions": "1"}
        if api == "get_message_of_id":
            return self.messages[data["message_id"]]
        if api in ("post_group_messages", "post_c2c_messages"):
            return {"id": next_id(), "timestamp": iso_now()}
        if api in ("post_group_files", "post_c2c_files"):
            return {"file_uuid": next_id(), "file_info": "info", "ttl": 0}
        if api in ("post_messages", "post_dms_messages"):
            return {"id": next_id(), "channel_id": data.get("channel_id") or self.channel_id,
                    "guild_id": data.get("guild_id") or self.guild_id, "content": data.get("content"),
                    "timestamp": iso_now(), "author": self._guild_user(self.bot._self_info.id)}
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        where = {"post_group_messages": "group_openid", "post_c2c_messages": "openid",
                 "post_messages": "channel_id", "post_dms_messages": "guild_id"}[api]
        return f"{api}:{data[where]}"

    def expected_target(self, where: str, event: Any) -> str:
        return {"group": f"post_group_messages:{self.group_id}",
                "private": f"post_c2c_messages:{event.author.id}",
                "channel": f"post_messages:{self.channel_id}",
                "dms": f"post_dms_messages:{self.dms_guild_id}"}[where]

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        return data.get("content") or ""

    def _attachments(self, picture_url: str | None) -> list[dict[str, Any]] | None:
        if not picture_url:
            return None
        return [{"content_type": "image/png", "filename": "p.png", "height": 1, "width": 1,
                 "size": len(PNG), "url": picture_url}]

    def _qq_message(self, text: str, *, quote: str | None, quote_picture: str | None,
                    picture_url: str | None, picture_id: str | None, author: dict[str, Any]) -> dict[str, Any]:
        assert picture_id is None, "QQ gives pictures by URL"
        message: dict[str, Any] = {"id": f"ROBOT1.0_{next_id()}", "content": text, "timestamp": iso_now(),
                                   "attachments": self._attachments(picture_url), "message_type": 0}
        own_idx = f"REFIDX_{next_id()}"
        if quote is not None or quote_picture:
            ref_idx = f"REFIDX_{next_id()}"
            message |= {"message_type": 103,
                        "message_scene": {"source": "default", "ext": [f"msg_idx={own_idx}",
                                                                       f"ref_msg_idx={ref_idx}"]},
                        "msg_elements": [{"content": quote or "", "msg_idx": ref_idx, "message_type": 0,
                                          "attachments": self._attachments(quote_picture)}]}
        else:
            message["message_scene"] = {"source": "default", "ext": [f"msg_idx={own_idx}"]}
        message["author"] = author
        return message

    def group_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                    role: str = "member", quote: str | None = None, quote_picture: str | None = None,
                    picture_url: str | None = None, picture_id: str | None = None) -> Event:
        """A group message: QQ delivers only @-messages to a bot in a group, without the mention
        (`GROUP_AT_MESSAGE_CREATE`, the text after the @ with its leading space)."""
        from nonebot.adapters.qq import Adapter
        from nonebot.adapters.qq.models import Dispatch

        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        author = {"id": user_id, "member_openid": user_id, "union_openid": user_id, "bot": False,
                  "member_role": role}
        d = self._qq_message(" " + text, quote=quote, quote_picture=quote_picture,
                             picture_url=picture_url, picture_id=picture_id, author=author)
        d |= {"group_id": self.group_id, "group_openid": self.group_id}
        return Adapter.payload_to_event(Dispatch(op=0, s=int(next_id()), t="GROUP_AT_MESSAGE_CREATE",
                                                 id=f"GROUP_AT_MESSAGE_CREATE:{next_id()}", d=d))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      quote: str | None = None, quote_picture: str | None = None,
                      picture_url: str | None = None, picture_id: str | None = None) -> Event:
        """A C2C (friend) message: the person's user_openid differs from their member_openid."""
        from nonebot.adapters.qq import Adapter
        from nonebot.adapters.qq.models import Dispatch

        user_id = user_id or self.c2c_id
        self.remember(user_id, name, "member")
        author = {"id": user_id, "user_openid": user_id, "union_openid": user_id}
        d = self._qq_message(text, quote=quote, quote_picture=quote_picture, picture_url=picture_url,
                             picture_id=picture_id, author=author)
        return Adapter.payload_to_event(Dispatch(op=0, s=int(next_id()), t="C2C_MESSAGE_CREATE",
                                                 id=f"C2C_MESSAGE_CREATE:{next_id()}", d=d))

    def _guild_message(self, text: str, *, user_id: str, channel_id: str, guild_id: str, role: str,
                       quote: str | None, quote_picture: str | None, picture_url: str | None,
                       picture_id: str | None, dms: bool) -> dict[str, Any]:
        assert picture_id is None, "QQ gives pictures by URL"
        d: dict[str, Any] = {
            "id": f"08{next_id()}", "channel_id": channel_id, "guild_id": guild_id, "content": text,
            "timestamp": iso_now(), "author": self._guild_user(user_id),
            "member": {"nick": self.names[user_id], "roles": [self.GUILD_ROLE[role]],
                       "joined_at": "2024-01-01T00:00:00+08:00"},
            "seq": int(next_id()), "seq_in_channel": next_id(),
        }
        if picture_url:
            d["attachments"] = [{"url": picture_url}]
        if quote is not None or quote_picture:
            quoted_id = f"08{next_id()}"
            quoted = {"id": quoted_id, "channel_id": channel_id, "guild_id": guild_id, "content": quote or "",
                      "timestamp": iso_now(), "author": self._guild_user("144115218677500000"),
                      "seq": 1, "seq_in_channel": "1"}
            if quote_picture:
                quoted["attachments"] = [{"url": quote_picture}]
            self.names.setdefault("144115218677500000", "Quoted Person")
            self.messages[quoted_id] = quoted
            d["message_reference"] = {"message_id": quoted_id}
        if dms:
            d["src_guild_id"] = self.guild_id
        return d

    def channel_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      role: str = "member", **options: Any) -> Event:
        """A guild channel message that @s the bot (AT_MESSAGE_CREATE: the mention is in the
        content, as <@!bot id>)."""
        from nonebot.adapters.qq import Adapter
        from nonebot.adapters.qq.models import Dispatch

        user_id = user_id or self.guild_user_id
        self.remember(user_id, name, role)
        content = f"<@!{self.bot._self_info.id}> {text}"
        d = self._guild_message(content, user_id=user_id, channel_id=self.channel_id, guild_id=self.guild_id,
                                role=role, dms=False, **{k: options.get(k) for k in (
                                    "quote", "quote_picture", "picture_url", "picture_id")})
        d["mentions"] = [self._guild_user(self.bot._self_info.id)]
        return Adapter.payload_to_event(Dispatch(op=0, s=int(next_id()), t="AT_MESSAGE_CREATE",
                                                 id=f"AT_MESSAGE_CREATE:{next_id()}", d=d))

    def dms_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                  **options: Any) -> Event:
        """A guild direct message (DIRECT_MESSAGE_CREATE): the guild id is the DM session's."""
        from nonebot.adapters.qq import Adapter
        from nonebot.adapters.qq.models import Dispatch

        user_id = user_id or self.guild_user_id
        self.remember(user_id, name, "member")
        d = self._guild_message(text, user_id=user_id, channel_id="88880001", guild_id=self.dms_guild_id,
                                role="member", dms=True, **{k: options.get(k) for k in (
                                    "quote", "quote_picture", "picture_url", "picture_id")})
        return Adapter.payload_to_event(Dispatch(op=0, s=int(next_id()), t="DIRECT_MESSAGE_CREATE",
                                                 id=f"DIRECT_MESSAGE_CREATE:{next_id()}", d=d))


# --- Discord ------------------------------------------------------------------------------------


class DiscordChat(Chat):
    adapter_name = "Discord"
    wheres = ("channel", "private")
    self_id = "1100000000000000001"
    guild_id = "1200000000000000001"
    channel_id = "1300000000000000001"
    dm_channel_id = "1300000000000000999"
    user_id = "1400000000000000001"
    sends = ("create_message",)
    ROLE_IDS: ClassVar[dict[str, list[str]]] = {
        "owner": ["1500000000000000004"], "admin": ["1500000000000000002"], "member": []}

    def make_bot(self) -> Any:
        from nonebot.adapters.discord import Adapter, Bot
        from nonebot.adapters.discord.api import User
        from nonebot.adapters.discord.config import BotInfo

        class DiscordBot(Recorder, Bot):
            pass

        bot = DiscordBot(get_adapter(Adapter), self.self_id, BotInfo(token="token"))
        bot._self_info = type_validate_python(User, self._user(self.self_id))
        return bot

    def typed(self, api: str, raw: Any) -> Any:
        from nonebot.adapters.discord import Adapter

        handler = getattr(Adapter, f"_api_{api}", None)
        return validated(_return_type(handler), raw) if handler is not None else raw

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id == self.self_id:
            return {"id": user_id, "username": "Marsho", "discriminator": "0", "global_name": "Marsho",
                    "avatar": None, "bot": True}
        name = self.names.get(user_id, f"user{user_id}")
        return {"id": user_id, "username": name.lower().replace(" ", "_"), "discriminator": "0",
                "global_name": name, "avatar": None}

    def _member(self, user_id: str) -> dict[str, Any]:
        return {"roles": self.ROLE_IDS[self.roles.get(user_id, "member")], "nick": self.names.get(user_id),
                "joined_at": "2024-01-01T00:00:00+00:00", "deaf": False, "mute": False, "flags": 0}

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "get_guild":
            return {"id": str(data["guild_id"]), "name": "Test guild", "icon": None, "splash": None,
                    "discovery_splash": None, "owner_id": "1", "afk_channel_id": None, "afk_timeout": 0,
                    "verification_level": 0, "default_message_notifications": 0,
                    "explicit_content_filter": 0, "roles": [], "emojis": [], "features": [],
                    "mfa_level": 0, "application_id": None, "system_channel_id": None,
                    "system_channel_flags": 0, "rules_channel_id": None, "vanity_url_code": None,
                    "description": None, "banner": None, "premium_tier": 0,
                    "preferred_locale": "en-US", "public_updates_channel_id": None,
                    "nsfw_level": 0, "premium_progress_bar_enabled": False,
                    "safety_alerts_channel_id": None, "max_presences": None,
                    "max_members": 500000, "premium_subscription_count": 0}
        if api == "get_channel":
            channel_id = str(data["channel_id"])
            if channel_id == self.dm_channel_id:
                return {"id": channel_id, "type": 1, "recipients": [self._user(self.user_id)]}
            return {"id": channel_id, "type": 0, "guild_id": self.guild_id, "name": "general",
                    "position": 0}
        if api == "get_guild_member":
            user_id = str(data["user_id"])
            return {"user": self._user(user_id), **self._member(user_id)}
        if api == "get_guild_roles":
            def role(role_id: str, name: str, permissions: int) -> dict[str, Any]:
                return {"id": role_id, "name": name, "color": 0, "hoist": False, "position": 1,
                        "permissions": str(permissions), "managed": False, "mentionable": False,
                        "flags": 0}
            return [role(self.guild_id, "@everyone", 0),
                    role("1500000000000000004", "Owner", (1 << 3) | (1 << 5)),
                    role("1500000000000000002", "Admin", 1 << 3)]
        if api == "get_user":
            return self._user(str(data["user_id"]))
        if api == "get_current_user":
            return self._user(self.self_id)
        if api == "get_channel_message":
            return self.messages[str(data["message_id"])]
        if api == "create_message":
            return {"id": next_id(), "channel_id": str(data["channel_id"]), "author": self._user(self.self_id),
                    "content": data.get("content") or "", "timestamp": iso_now(), "edited_timestamp": None,
                    "tts": False, "mention_everyone": False, "mentions": [], "mention_roles": [],
                    "attachments": [], "embeds": [], "pinned": False, "type": 0}
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        return f"channel:{data['channel_id']}"

    def expected_target(self, where: str, event: Any) -> str:
        return f"channel:{self.dm_channel_id if where == 'private' else self.channel_id}"

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        return data.get("content") or ""

    def _message(self, text: str, *, channel_id: str, guild_id: str | None, user_id: str,
                 quote: str | None, quote_picture: str | None, picture_url: str | None,
                 picture_id: str | None) -> dict[str, Any]:
        assert picture_id is None, "Discord gives pictures by URL"

        def attachments(url: str | None) -> list[dict[str, Any]]:
            return [{"id": next_id(), "filename": "p.png", "size": len(PNG), "url": url, "proxy_url": url,
                     "content_type": "image/png", "width": 1, "height": 1}] if url else []

        message: dict[str, Any] = {
            "id": next_id(), "channel_id": channel_id, "author": self._user(user_id), "content": text,
            "timestamp": iso_now(), "edited_timestamp": None, "tts": False, "mention_everyone": False,
            "mentions": [], "mention_roles": [], "attachments": attachments(picture_url), "embeds": [],
            "pinned": False, "type": 0,
        }
        if guild_id:
            message["guild_id"] = guild_id
            message["member"] = self._member(user_id)
        if quote is not None or quote_picture:
            quoted_author = "1400000000000000999"
            self.names.setdefault(quoted_author, "Quoted Person")
            quoted = {**message, "id": next_id(), "author": self._user(quoted_author), "content": quote or "",
                      "attachments": attachments(quote_picture)}
            quoted.pop("member", None)
            quoted.pop("guild_id", None)
            self.messages[quoted["id"]] = quoted
            message |= {"type": 19, "referenced_message": quoted,
                        "message_reference": {"type": 0, "message_id": quoted["id"],
                                              "channel_id": channel_id,
                                              **({"guild_id": guild_id} if guild_id else {})}}
        return message

    def _parse(self, message: dict[str, Any]) -> Event:
        from nonebot.adapters.discord import Adapter
        from nonebot.adapters.discord.payload import Dispatch

        return Adapter.payload_to_event(type_validate_python(Dispatch, {
            "op": 0, "s": int(next_id()), "t": "MESSAGE_CREATE", "d": message}))

    def channel_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      role: str = "member", **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._parse(self._message(text, channel_id=self.channel_id, guild_id=self.guild_id,
                                         user_id=user_id, **_media(options)))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return self._parse(self._message(text, channel_id=self.dm_channel_id, guild_id=None, user_id=user_id,
                                         **_media(options)))


def _media(options: dict[str, Any]) -> dict[str, Any]:
    """The quote and picture options a factory takes (unknown ones are a test's mistake)."""
    known = ("quote", "quote_picture", "picture_url", "picture_id")
    unknown = set(options) - set(known)
    assert not unknown, f"unknown options {unknown}"
    return {k: options.get(k) for k in known}


# --- Kook (kaiheila) ----------------------------------------------------------------------------


class KookChat(Chat):
    adapter_name = "Kaiheila"
    wheres = ("channel", "private")
    self_id = "3300001"
    guild_id = "6600000000000001"
    channel_id = "7700000000000001"
    user_id = "2200001"
    sends = ("message_create", "directMessage_create")
    ROLE_IDS: ClassVar[dict[str, list[int]]] = {"owner": [41], "admin": [42], "member": []}

    def make_bot(self) -> Any:
        from nonebot.adapters.kaiheila import Adapter, Bot

        class KookBot(Recorder, Bot):
            pass

        return KookBot(get_adapter(Adapter), self.self_id, "Marsho", "token")

    def typed(self, api: str, raw: Any) -> Any:
        import re

        from nonebot.adapters.kaiheila.api.handle import get_api_restype

        path = re.sub(r"[A-Z]", lambda m: "-" + m.group(0).lower(), api).replace("_", "/")
        result_type = get_api_restype(path)
        return type_validate_python(result_type, raw) if result_type and raw is not None else raw

    def _user(self, user_id: str, guild: bool = False) -> dict[str, Any]:
        name = self.names.get(user_id, "Marsho" if user_id == self.self_id else f"user{user_id}")
        user: dict[str, Any] = {"id": user_id, "username": name, "nickname": name, "identify_num": "0001",
                                "online": True, "bot": user_id == self.self_id, "status": 0,
                                "avatar": "https://img.kookapp.cn/avatars/a.png", "vip_avatar": "",
                                "mobile_verified": True}
        if guild:
            user |= {"roles": self.ROLE_IDS[self.roles.get(user_id, "member")], "joined_at": 1700000000000,
                     "active_time": 1700000000000}
        return user

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "user_view":
            return self._user(data["user_id"], guild="guild_id" in data)
        if api == "user_me":
            return self._user(self.self_id)
        if api == "channel_view":
            return {"id": data["target_id"], "name": "general", "user_id": "1", "guild_id": self.guild_id,
                    "topic": "", "is_category": False, "parent_id": "", "level": 0, "slow_mode": 0,
                    "type": 1, "permission_overwrites": [], "permission_users": [], "permission_sync": 1,
                    "has_password": False}
        if api == "guild_view":
            return {"id": data["guild_id"], "name": "Test guild", "topic": "", "user_id": "1",
                    "icon": "", "notify_type": 0, "region": "", "enable_open": False, "open_id": "0",
                    "default_channel_id": self.channel_id, "welcome_channel_id": "0", "roles": [],
                    "channels": []}
        if api == "guildRole_list":
            return {"items": [
                {"role_id": 41, "name": "Owner", "color": 0, "position": 1, "hoist": 0, "mentionable": 0,
                 "permissions": 3},
                {"role_id": 42, "name": "Admin", "color": 0, "position": 2, "hoist": 0, "mentionable": 0,
                 "permissions": 1},
            ], "meta": {"page": 1, "page_total": 1, "page_size": 50, "total": 2}, "sort": {}}
        if api in ("message_view", "directMessage_view"):
            return self.messages.get(data["msg_id"], {"id": data["msg_id"]})
        if api in self.sends:
            return {"msg_id": next_id(), "msg_timestamp": int(time.time() * 1000), "nonce": ""}
        if api == "asset_create":
            return {"url": "https://img.kookapp.cn/assets/sent.png"}
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        return f"{api}:{data['target_id']}"

    def expected_target(self, where: str, event: Any) -> str:
        if where == "private":
            return f"directMessage_create:{event.user_id}"
        return f"message_create:{self.channel_id}"

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        return data.get("content") or ""

    def _payload(self, text: str, *, channel_type: str, target_id: str, user_id: str,
                 quote: str | None, quote_picture: str | None, picture_url: str | None,
                 picture_id: str | None, guild: bool) -> Event:
        from nonebot.adapters.kaiheila import Adapter

        assert picture_id is None, "Kook gives pictures by URL"
        assert not (picture_url and text), "a Kook picture message (type 2) has no text: quote it instead"
        author = self._user(user_id, guild=guild)
        extra: dict[str, Any] = {"type": 9, "code": "", "author": author, "mention": [], "mention_all": False,
                                 "mention_roles": [], "mention_here": False, "kmarkdown": {
                                     "raw_content": text, "mention_part": [], "mention_role_part": []}}
        if guild:
            extra |= {"guild_id": self.guild_id, "channel_name": "general"}
        content, type_ = text, 9
        if picture_url:
            # a picture alone is a type-2 message whose content is its URL; with text, a card
            content, type_ = picture_url, 2
            extra = {"type": 2, "code": "", "author": author, "attachments": {
                "type": "image", "url": picture_url, "name": "p.png", "size": len(PNG)},
                **({"guild_id": self.guild_id, "channel_name": "general"} if guild else {})}
        assert not (quote and quote_picture), "a Kook picture message (type 2) has no text"
        if quote is not None or quote_picture:
            quoted_author = "2200999"
            self.names.setdefault(quoted_author, "Quoted Person")
            extra["quote"] = {"id": next_id(), "rong_id": next_id(), "type": 2 if quote_picture else 9,
                              "content": quote_picture or quote or "", "create_at": 1700000000000,
                              "author": self._user(quoted_author)}
        msg_id = next_id()
        # what message/view (direct-message/view) answers for this message: alconna reads the
        # quote from there
        self.messages[msg_id] = {"id": msg_id, "type": type_, "content": content, "quote": extra.get("quote"),
                                 "author": author, "create_at": int(time.time() * 1000)}
        payload = {"s": 0, "sn": int(next_id()), "d": {
            "channel_type": channel_type, "type": type_, "target_id": target_id, "author_id": user_id,
            "content": content, "msg_id": msg_id, "msg_timestamp": int(time.time() * 1000),
            "nonce": "", "extra": extra}}
        event = Adapter.json_to_event(payload, self.self_id, kaiheila_config=get_adapter(Adapter).kaiheila_config)
        assert event is not None
        return event  # type: ignore[return-value]

    def channel_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      role: str = "member", **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, channel_type="GROUP", target_id=self.channel_id, user_id=user_id,
                             guild=True, **_media(options))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        """A direct message: Kook's target_id is the bot's id (so the adapter's group_id is the
        bot's id for every DM)."""
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return self._payload(text, channel_type="PERSON", target_id=self.self_id, user_id=user_id,
                             guild=False, **_media(options))


# --- Feishu -------------------------------------------------------------------------------------


class FeishuChat(Chat):
    adapter_name = "Feishu"
    self_id = "cli_a1b2c3d4e5f6"
    bot_open_id = "ou_bot0000000000000000000000000001"
    group_id = "oc_5ad11d72b830411d72b836c20"
    user_id = "ou_7d8a6e6df7621556ce0d21922b676706"
    owner_id = "ou_owner000000000000000000000000009"
    roles_from_platform = ("owner",)
    sends = ("im/v1/messages", "reply")
    pictures: dict[str, bytes]

    def make_bot(self) -> Any:
        from nonebot.adapters.feishu import Adapter, Bot
        from nonebot.adapters.feishu.config import BotConfig
        from nonebot.adapters.feishu.models import BotInfo

        class FeishuBot(Recorder, Bot):
            pass

        self.pictures = {}
        return FeishuBot(get_adapter(Adapter), self.self_id,
                         bot_config=BotConfig(app_id=self.self_id, app_secret="secret",
                                              verification_token="token"),
                         bot_info=BotInfo(activate_status=2, app_name="Marsho",
                                          avatar_url="https://example.com/a.png", ip_white_list=[],
                                          open_id=self.bot_open_id))

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        ok = {"code": 0, "msg": "success"}
        if api.startswith("contact/v3/users/"):
            user_id = api.rsplit("/", 1)[1]
            if user_id == self.owner_id or (user_id == "owner_user_id"):
                user_id = next((u for u, r in self.roles.items() if r == "owner"), self.owner_id)
            return ok | {"data": {"user": {"open_id": user_id, "union_id": "on_" + user_id,
                                           "user_id": user_id, "name": self.names.get(user_id, "x"),
                                           "nickname": self.names.get(user_id, "x"),
                                           "avatar": {"avatar_origin": "https://example.com/a.png"}}}}
        if api.startswith("im/v1/chats/"):
            return ok | {"data": {"name": "Test group", "avatar": "https://example.com/g.png",
                                  "owner_id": "owner_user_id", "owner_id_type": "user_id",
                                  "chat_mode": "group", "chat_type": "private"}}
        if "/resources/" in api:
            return self.pictures[api.rsplit("/", 1)[1]]
        if api.startswith("im/v1/messages/") and api.endswith("/reply"):
            return ok | {"data": self._sent(data)}
        if api.startswith("im/v1/messages/"):
            return ok | {"data": {"items": [self.messages[api.rsplit("/", 1)[1]]]}}
        if api == "im/v1/messages":
            return ok | {"data": self._sent(data)}
        if api == "im/v1/images":
            return ok | {"data": {"image_key": "img_v3_sent"}}
        return ok | {"data": {}}

    def _sent(self, data: dict[str, Any]) -> dict[str, Any]:
        body = data.get("json") or {}
        return {"message_id": "om_" + next_id(), "msg_type": body.get("msg_type", "text"),
                "create_time": str(int(time.time() * 1000)), "update_time": str(int(time.time() * 1000)),
                "deleted": False, "updated": False, "chat_id": self.group_id,
                "sender": {"id": self.self_id, "id_type": "app_id", "sender_type": "app", "tenant_key": "t"},
                "body": {"content": body.get("content", "")}}

    def sent_calls(self) -> list[tuple[str, dict[str, Any]]]:
        """The calls that sent a message, in order."""
        return [(api, data) for api, data in self.calls if data.get("method") == "POST" and (
            api == "im/v1/messages" or (api.startswith("im/v1/messages/") and api.endswith("/reply")))]

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        if api.endswith("/reply"):
            return "reply:" + api.split("/")[3]
        return f"{data['params']['receive_id_type']}:{data['json']['receive_id']}"

    def expected_target(self, where: str, event: Any) -> str:
        return "reply:" + event.event.message.message_id

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        body = data["json"]
        content = json.loads(body["content"])
        if body["msg_type"] == "text":
            return content["text"]
        if body["msg_type"] == "post":
            post = content.get("zh_cn") or content.get("en_us") or content
            return "".join(item.get("text", "") for line in post.get("content", []) for item in line)
        return ""

    def _payload(self, text: str, *, chat_type: str, user_id: str, quote: str | None,
                 quote_picture: str | None, picture_url: str | None, picture_id: str | None,
                 at_bot: bool = False) -> Event:
        from nonebot.adapters.feishu import Adapter

        assert picture_url is None, "Feishu gives pictures by image key"
        message_id = "om_" + next_id()
        mentions = None
        if picture_id or at_bot:
            items: list[dict[str, Any]] = []
            if at_bot:
                items.append({"tag": "at", "user_id": "@_user_1", "user_name": "Marsho"})
            items.append({"tag": "text", "text": (" " if at_bot else "") + text})
            rows = [items]
            if picture_id:
                self.pictures[picture_id] = picture_bytes(picture_id)
                rows.append([{"tag": "img", "image_key": picture_id}])
            message_type, content = "post", {"title": "", "content": rows}
            if at_bot:
                mentions = [{"key": "@_user_1", "id": {"union_id": "on_bot", "user_id": "",
                                                       "open_id": self.bot_open_id},
                             "name": "Marsho", "tenant_key": "t"}]
        else:
            message_type, content = "text", {"text": text}
        message: dict[str, Any] = {"message_id": message_id, "create_time": str(int(time.time() * 1000)),
                                   "chat_id": self.group_id if chat_type == "group" else "oc_p2p" + user_id[3:],
                                   "chat_type": chat_type, "message_type": message_type,
                                   "content": json.dumps(content, ensure_ascii=False)}
        if mentions:
            message["mentions"] = mentions
        if quote is not None or quote_picture:
            quoted_id = "om_" + next_id()
            if quote_picture:
                self.pictures[quote_picture] = PNG
                body = {"title": "", "content": [[{"tag": "text", "text": quote or ""}],
                                                 [{"tag": "img", "image_key": quote_picture}]]}
                msg_type = "post"
            else:
                body, msg_type = {"text": quote}, "text"
            self.messages[quoted_id] = {
                "message_id": quoted_id, "msg_type": msg_type, "create_time": "1700000000000",
                "update_time": "1700000000000", "deleted": False, "updated": False,
                "chat_id": message["chat_id"],
                "sender": {"id": "ou_quoted", "id_type": "open_id", "sender_type": "user", "tenant_key": "t"},
                "body": {"content": json.dumps(body, ensure_ascii=False)}}
            message |= {"parent_id": quoted_id, "root_id": quoted_id}
        payload = {"schema": "2.0", "header": {
            "event_id": next_id(), "event_type": "im.message.receive_v1",
            "create_time": str(int(time.time() * 1000)), "token": "", "app_id": self.self_id,
            "tenant_key": "t"},
            "event": {"sender": {"sender_id": {"union_id": "on_" + user_id[3:], "user_id": user_id[3:11],
                                               "open_id": user_id}, "sender_type": "user", "tenant_key": "t"},
                      "message": message}}
        event = Adapter.json_to_event(payload)
        assert event is not None
        return event

    def group_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                    role: str = "member", at_bot: bool = False, **options: Any) -> Event:
        assert role != "admin", "Feishu (through uninfo) knows the group owner only"
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, chat_type="group", user_id=user_id, at_bot=at_bot, **_media(options))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return self._payload(text, chat_type="p2p", user_id=user_id, **_media(options))


# --- Satori -------------------------------------------------------------------------------------


class SatoriChat(Chat):
    adapter_name = "Satori"
    wheres = ("group", "channel", "private")
    self_id = "3000000001"
    platform = "chronocat"
    features: ClassVar[tuple[str, ...]] = ()
    """What the server announces of itself (Chronocat and LLOneBot: "guild.plain")."""

    @property
    def key_prefix(self) -> str:
        """A Satori server fronts several platforms: their ids never meet (Satori/<platform>)."""
        return f"Satori/{self.platform}"
    group_id = "123456789"
    """On QQ through Satori a group is a guild whose one channel has the group's id."""
    guild_id = "555000"
    channel_id = "987654"
    """A channel of a guild (Discord, Kook... through Satori): its id differs from the guild's."""
    user_id = "10001"
    sends = ("message_create",)
    ROLE_IDS: ClassVar[dict[str, str]] = {"owner": "OWNER", "admin": "ADMINISTRATOR", "member": "MEMBER"}

    def make_bot(self) -> Any:
        from nonebot.adapters.satori import Adapter, Bot
        from nonebot.adapters.satori.config import ClientInfo
        from nonebot.adapters.satori.models import Login

        class SatoriBot(Recorder, Bot):
            pass

        login = type_validate_python(Login, {
            "sn": 1, "status": 1, "adapter": "chronocat", "platform": self.platform,
            "user": {"id": self.self_id, "name": "Marsho", "is_bot": True}, "features": list(self.features)})
        return SatoriBot(get_adapter(Adapter), self.self_id, login, ClientInfo(port=5500), [])

    def typed(self, api: str, raw: Any) -> Any:
        from nonebot.adapters.satori import Bot

        handler = getattr(Bot, api, None)
        func = getattr(handler, "func", None)
        return validated(_return_type(func), raw) if func is not None else raw

    def _user(self, user_id: str) -> dict[str, Any]:
        return {"id": user_id, "name": self.names.get(user_id, f"user{user_id}"), "avatar": None}

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "user_get":
            return self._user(data["user_id"])
        if api == "guild_get":
            return {"id": data["guild_id"], "name": "Test group"}
        if api == "channel_get":
            return {"id": data["channel_id"], "type": 0, "name": "Test group"}
        if api == "guild_member_get":
            user_id = data["user_id"]
            return {"user": self._user(user_id), "nick": self.names.get(user_id),
                    "roles": [{"id": self.ROLE_IDS[self.roles.get(user_id, "member")]}]}
        if api == "message_get":
            return self.messages[data["message_id"]]
        if api == "message_create":
            return [{"id": next_id(), "content": data["content"]}]
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        return f"channel:{data['channel_id']}"

    def expected_target(self, where: str, event: Any) -> str:
        return f"channel:{event.channel.id}"

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        """The text of the sent elements (a quote of the question, pictures... left out)."""
        import html
        import re

        return html.unescape(re.sub(r"<[^>]*>", "", data["content"]))

    def _payload(self, text: str, *, channel: dict[str, Any], guild: dict[str, Any] | None, user_id: str,
                 role: str | None, quote: str | None, quote_picture: str | None, picture_url: str | None,
                 picture_id: str | None) -> Event:
        from nonebot.adapters.satori import Adapter, MessageEvent
        from nonebot.adapters.satori.element import escape
        from nonebot.adapters.satori.models import Event as SatoriEvent

        assert picture_id is None, "Satori gives pictures by URL"
        content = escape(text)
        if picture_url:
            content += f'<img src="{escape(picture_url)}"/>'
        if quote is not None or quote_picture:
            quoted_id = next_id()
            inner = escape(quote or "") + (f'<img src="{escape(quote_picture)}"/>' if quote_picture else "")
            self.names.setdefault("10999", "Quoted Person")
            content = (f'<quote id="{quoted_id}"><author id="10999" name="Quoted Person"/>{inner}</quote>'
                       + content)
            self.messages[quoted_id] = {"id": quoted_id, "content": inner, "user": self._user("10999")}
        payload: dict[str, Any] = {
            "sn": int(next_id()), "type": "message-created", "timestamp": int(time.time() * 1000),
            "login": {"sn": 1, "status": 1, "adapter": "chronocat", "platform": self.platform,
                      "user": {"id": self.self_id, "name": "Marsho", "is_bot": True}},
            "channel": channel, "user": self._user(user_id),
            "message": {"id": next_id(), "content": content},
        }
        if guild is not None:
            payload["guild"] = guild
            payload["member"] = {"nick": self.names[user_id],
                                 "roles": [{"id": self.ROLE_IDS[role or "member"], "name": role}]}
        event = Adapter.payload_to_event(type_validate_python(SatoriEvent, payload))
        # the adapter makes a message a private or a public one before handling it (its
        # receive loop calls convert())
        return event.convert() if isinstance(event, MessageEvent) else event

    def group_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                    role: str = "member", **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, channel={"id": self.group_id, "type": 0, "name": "Test group"},
                             guild={"id": self.group_id, "name": "Test group"}, user_id=user_id, role=role,
                             **_media(options))

    def channel_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      role: str = "member", **options: Any) -> Event:
        """A channel of a guild (Discord, Kook... through Satori): its id differs from the guild's."""
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, channel={"id": self.channel_id, "type": 0, "name": "general"},
                             guild={"id": self.guild_id, "name": "Test guild"}, user_id=user_id, role=role,
                             **_media(options))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return self._payload(text, channel={"id": f"private:{user_id}", "type": 1}, guild=None,
                             user_id=user_id, role=None, **_media(options))


# --- OneBot v12 ---------------------------------------------------------------------------------


class OneBotV12Chat(Chat):
    adapter_name = "OneBot V12"
    wheres = ("group", "channel", "private")
    self_id = "90012"
    roles_from_platform = ()
    """OneBot v12 has no roles (uninfo reads none)."""
    group_id = "30012"
    guild_id = "40012"
    channel_id = "50012"
    user_id = "10012"
    sends = ("send_message",)
    pictures: dict[str, bytes]

    def make_bot(self) -> Any:
        from nonebot.adapters.onebot.v12 import Adapter, Bot

        class OneBotV12Bot(Recorder, Bot):
            pass

        self.pictures = {}
        return OneBotV12Bot(get_adapter(Adapter), self.self_id, impl="walle-q", platform="qq")

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "get_user_info":
            user_id = data["user_id"]
            return {"user_id": user_id, "user_name": self.names.get(user_id, "x"), "user_displayname": "",
                    "user_remark": ""}
        if api == "get_group_info":
            return {"group_id": data["group_id"], "group_name": "Test group"}
        if api == "get_group_member_info":
            return {"user_id": data["user_id"], "user_name": self.names.get(data["user_id"], "x"),
                    "user_displayname": self.names.get(data["user_id"], "x")}
        if api in ("get_guild_info",):
            return {"guild_id": data["guild_id"], "guild_name": "Test guild"}
        if api == "get_channel_info":
            return {"channel_id": data["channel_id"], "channel_name": "general"}
        if api in ("get_guild_member_info", "get_channel_member_info"):
            return {"user_id": data["user_id"], "user_name": self.names.get(data["user_id"], "x"),
                    "user_displayname": self.names.get(data["user_id"], "x")}
        if api == "get_self_info":
            return {"user_id": self.self_id, "user_name": "Marsho", "user_displayname": ""}
        if api == "get_file":
            data_ = self.pictures[data["file_id"]]
            return {"name": "p.png", "data": base64.b64encode(data_).decode(), "sha256": None}
        if api == "send_message":
            return {"message_id": next_id(), "time": time.time()}
        if api == "upload_file":
            return {"file_id": "uploaded-" + next_id()}
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        names = {"group": ("group_id",), "channel": ("guild_id", "channel_id"), "private": ("user_id",)}
        ids = [f"{k}={data[k]}" for k in names[data["detail_type"]]]
        return f"{data['detail_type']}:{','.join(ids)}"

    def expected_target(self, where: str, event: Any) -> str:
        return {"group": f"group:group_id={self.group_id}",
                "channel": f"channel:guild_id={self.guild_id},channel_id={self.channel_id}",
                "private": f"private:user_id={event.user_id}"}[where]

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        message = data["message"]
        return "".join(seg.data.get("text", "") for seg in message if seg.type == "text")

    def _payload(self, text: str, *, detail: str, user_id: str, extra: dict[str, Any], quote: str | None,
                 quote_picture: str | None, picture_url: str | None, picture_id: str | None) -> Event:
        from nonebot.adapters.onebot.v12 import Adapter

        assert picture_url is None, "OneBot v12 gives pictures by file id"
        segments: list[dict[str, Any]] = []
        if quote is not None or quote_picture:
            # v12's reply segment names the message only: its content is not delivered
            segments.append({"type": "reply", "data": {"message_id": next_id(), "user_id": "10999"}})
        segments.append({"type": "text", "data": {"text": text}})
        if picture_id:
            self.pictures[picture_id] = picture_bytes(picture_id)
            segments.append({"type": "image", "data": {"file_id": picture_id}})
        payload = {"id": next_id(), "time": time.time(), "type": "message", "detail_type": detail,
                   "sub_type": "", "message_id": next_id(), "message": segments, "alt_message": text,
                   "user_id": user_id, "self": {"platform": "qq", "user_id": self.self_id}, **extra}
        event = Adapter.json_to_event(payload)
        assert event is not None
        return event

    def group_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                    role: str = "member", **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, detail="group", user_id=user_id, extra={"group_id": self.group_id},
                             **_media(options))

    def channel_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      role: str = "member", **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, detail="channel", user_id=user_id,
                             extra={"guild_id": self.guild_id, "channel_id": self.channel_id}, **_media(options))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return self._payload(text, detail="private", user_id=user_id, extra={}, **_media(options))


# --- OneBot v11 ---------------------------------------------------------------------------------


class OneBotV11Chat(Chat):
    adapter_name = "OneBot V11"
    self_id = "42"
    group_id = "20001"
    user_id = "10001"
    sends = ("send_msg",)

    def make_bot(self) -> Any:
        from nonebot.adapters.onebot.v11 import Adapter, Bot

        class OneBotV11Bot(Recorder, Bot):
            pass

        return OneBotV11Bot(get_adapter(Adapter), self.self_id)

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "get_group_member_info":
            user_id = str(data["user_id"])
            return {"group_id": int(data["group_id"]), "user_id": int(user_id),
                    "nickname": self.names.get(user_id, "x"), "card": "", "role": self.roles.get(user_id, "member")}
        if api == "get_group_info":
            return {"group_id": int(data["group_id"]), "group_name": "Test group", "member_count": 3}
        if api == "get_stranger_info":
            return {"user_id": int(data["user_id"]), "nickname": self.names.get(str(data["user_id"]), "x")}
        if api == "get_msg":
            return self.messages[str(data["message_id"])]
        if api in ("send_msg", "send_group_msg", "send_private_msg"):
            return {"message_id": int(next_id())}
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        if data.get("message_type") == "group" or data.get("group_id"):
            return f"group:{data['group_id']}"
        return f"private:{data['user_id']}"

    def expected_target(self, where: str, event: Any) -> str:
        return f"group:{self.group_id}" if where == "group" else f"private:{event.user_id}"

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        return data["message"].extract_plain_text()

    def _payload(self, text: str, *, message_type: str, user_id: str, role: str, quote: str | None,
                 quote_picture: str | None, picture_url: str | None, picture_id: str | None) -> Event:
        from nonebot.adapters.onebot.v11 import Adapter

        assert picture_id is None, "OneBot v11 gives a picture's URL"
        segments: list[dict[str, Any]] = []
        if quote is not None or quote_picture:
            quoted_id = next_id()
            quoted_segments: list[dict[str, Any]] = [{"type": "text", "data": {"text": quote or ""}}]
            if quote_picture:
                quoted_segments.append({"type": "image", "data": {"file": "q.image", "url": quote_picture}})
            self.messages[quoted_id] = {"time": int(time.time()), "message_type": message_type,
                                        "message_id": int(quoted_id), "real_id": int(quoted_id),
                                        "sender": {"user_id": 10999, "nickname": "Quoted Person"},
                                        "message": quoted_segments}
            segments.append({"type": "reply", "data": {"id": quoted_id}})
        segments.append({"type": "text", "data": {"text": text}})
        if picture_url:
            segments.append({"type": "image", "data": {"file": "p.image", "url": picture_url}})
        payload: dict[str, Any] = {
            "time": int(time.time()), "self_id": int(self.self_id), "post_type": "message",
            "message_type": message_type, "sub_type": "normal" if message_type == "group" else "friend",
            "message_id": int(next_id()), "user_id": int(user_id), "message": segments,
            "raw_message": text, "font": 0,
            "sender": {"user_id": int(user_id), "nickname": self.names[user_id],
                       **({"role": role, "card": ""} if message_type == "group" else {})}}
        if message_type == "group":
            payload["group_id"] = int(self.group_id)
        event = Adapter.json_to_event(payload)
        assert event is not None
        return event

    def group_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                    role: str = "member", **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, role)
        return self._payload(text, message_type="group", user_id=user_id, role=role, **_media(options))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return self._payload(text, message_type="private", user_id=user_id, role="member", **_media(options))


# --- Console ------------------------------------------------------------------------------------


class ConsoleChat(Chat):
    adapter_name = "Console"
    wheres = ("private",)
    self_id = "robot"
    user_id = "console-user"
    roles_from_platform = ()
    sends = ("send_msg",)

    def make_bot(self) -> Any:
        from nonebot.adapters.console import Adapter, Bot
        from nonechat.model import Robot

        class ConsoleBot(Recorder, Bot):
            pass

        return ConsoleBot(get_adapter(Adapter), Robot(self.self_id, nickname="Marsho"))

    def _user(self, user_id: str) -> Any:
        from nonechat.model import User

        return User(user_id, nickname=self.names.get(user_id, "User"))

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        from nonechat.model import DIRECT

        if api == "get_user":
            return self._user(data["user_id"])
        if api == "current_user":
            return self._user(self.user_id)
        if api == "current_channel":
            return DIRECT
        if api == "get_channel":
            return DIRECT
        if api == "send_msg":
            return next_id()
        return None

    def target_of(self, api: str, data: dict[str, Any]) -> str:
        return f"user:{data['channel'].id}"

    def expected_target(self, where: str, event: Any) -> str:
        return "user:_direct"

    def text_of(self, api: str, data: dict[str, Any]) -> str:
        from nonechat.message import Text

        return "".join(element.text for element in data["content"] if isinstance(element, Text))

    def private_event(self, text: str, *, user_id: str | None = None, name: str | None = None,
                      **options: Any) -> Event:
        from nonebot.adapters.console import Message, MessageEvent
        from nonechat.model import DIRECT

        assert not any(options.values()), "the console has no quotes or pictures"
        user_id = user_id or self.user_id
        self.remember(user_id, name, "member")
        return MessageEvent(time=datetime.now(), self_id=self.self_id, message=Message(text),
                            original_message=Message(text), user=self._user(user_id), channel=DIRECT,
                            message_id=next_id())

    def group_event(self, text: str, **options: Any) -> Event:
        raise NotImplementedError("the console is a private chat")


PLATFORMS: dict[str, type[Chat]] = {
    chat.adapter_name: chat for chat in (
        QQChat, TelegramChat, DiscordChat, KookChat, FeishuChat, SatoriChat, OneBotV11Chat, OneBotV12Chat,
        ConsoleChat)
}



def forget_uninfo_sessions() -> None:
    """Empty nonebot-plugin-uninfo's caches: it keeps a session for 5 minutes by the event's
    `get_session_id()` alone (no bot, no adapter), so a test's users and roles would otherwise
    be what an earlier test's were."""
    from nonebot_plugin_uninfo.adapters import INFO_FETCHER_MAPPING

    from nonebot_plugin_marsho.chat.where import remembered

    for fetcher in INFO_FETCHER_MAPPING.values():
        fetcher.clean()
    remembered.clear()  # marsho's own cache of who-and-where, too


def carries_png(value: Any, depth: int = 0) -> bool:
    """Whether an API call's data holds a PNG: bytes, base64 text, or inside a model, a list, a
    tuple (Telegram's (name, bytes)), a dict or a message segment."""
    if depth > 8:
        return False
    if isinstance(value, (bytes, bytearray)):
        return b"\x89PNG" in value
    if isinstance(value, str):
        return "iVBORw0KGgo" in value
    if isinstance(value, dict):
        return any(carries_png(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(carries_png(v, depth + 1) for v in value)
    if hasattr(value, "model_dump"):
        try:
            return carries_png(dict(value), depth + 1)
        except Exception:
            return carries_png(value.model_dump(), depth + 1)
    if hasattr(value, "data") and isinstance(value.data, dict):  # a message segment
        return carries_png(value.data, depth + 1)
    if hasattr(value, "__dict__"):
        return carries_png(vars(value), depth + 1)
    return False


# --- the guild roles the group tools ask for (issue 28) --------------------------------------------
# Each chat below answers, beside what its base answers, the member, role and permission calls of
# chat/group_platforms.py from `roles` (owner, admin, member) and the extras a test sets, and the
# calls that act (mute, kick, recall) with what the platform returns for them.

DISCORD_MODERATE, DISCORD_KICK, DISCORD_MANAGE_MESSAGES = 1 << 40, 1 << 1, 1 << 13
DISCORD_ADMINISTRATOR = 1 << 3


class DiscordGuildChat(DiscordChat):
    """Discord with a guild owner (`owner_id` of the one whose role is "owner"), and a moderator
    role for admins: Moderate, Kick and Manage Messages, not Administrator (`administrators`
    have that role too). `positions` sets a member's highest role's position (default: 5 for
    admins, 0 for members); `overwrites` the channel's permission overwrites."""

    MOD_ROLE = "1500000000000000002"
    ADMINISTRATOR_ROLE = "1500000000000000003"

    def __init__(self, files: Files | None = None) -> None:
        super().__init__(files)
        self.positions: dict[str, int] = {}
        self.administrators: set[str] = set()
        self.overwrites: list[dict[str, Any]] = []

    def _own_roles(self, user_id: str) -> list[str]:
        role = self.roles.get(user_id, "member")
        if role != "admin":
            return []
        own = f"16{user_id[-17:]}"  # a role of their own, at their position
        return [self.MOD_ROLE, own] + ([self.ADMINISTRATOR_ROLE] if user_id in self.administrators else [])

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "get_guild":
            owner = next((u for u, r in self.roles.items() if r == "owner"), "1")
            return super().answer(api, data) | {"owner_id": owner}
        if api == "get_guild_member":
            user_id = str(data["user_id"])
            if user_id not in self.roles and user_id != self.self_id:
                return RuntimeError("404: Unknown Member")
            return {"user": self._user(user_id), **self._member(user_id), "roles": self._own_roles(user_id)}
        if api == "get_guild_roles":
            def role(role_id: str, name: str, permissions: int, position: int) -> dict[str, Any]:
                return {"id": role_id, "name": name, "color": 0, "hoist": False, "position": position,
                        "permissions": str(permissions), "managed": False, "mentionable": False, "flags": 0}
            own = [role(f"16{u[-17:]}", f"of {u}", 0, self.positions.get(u, 5))
                   for u, r in self.roles.items() if r == "admin"]
            return [role(self.guild_id, "@everyone", 0, 0),
                    role(self.MOD_ROLE, "Moderator", DISCORD_MODERATE | DISCORD_KICK | DISCORD_MANAGE_MESSAGES, 1),
                    role(self.ADMINISTRATOR_ROLE, "Administrator", DISCORD_ADMINISTRATOR, 1), *own]
        if api == "get_channel" and str(data["channel_id"]) == self.channel_id:
            return super().answer(api, data) | {"permission_overwrites": self.overwrites}
        if api in ("modify_guild_member", "remove_guild_member", "delete_message"):
            return None
        return super().answer(api, data)


class QQGuildChat(QQChat):
    """QQ guild channels with `channel_admins` (role 5) who manage this channel."""

    def __init__(self, files: Files | None = None) -> None:
        super().__init__(files)
        self.channel_admins: set[str] = set()

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "get_member" and data["user_id"] in self.channel_admins:
            return super().answer(api, data) | {"roles": ["5"]}
        if api == "get_channel_permissions":
            manages = data["user_id"] in self.channel_admins and data["channel_id"] == self.channel_id
            return {"channel_id": data["channel_id"], "user_id": data["user_id"],
                    "permissions": "7" if manages else "5"}
        if api in ("patch_guild_member_mute", "delete_member", "delete_message"):
            return None
        return super().answer(api, data)


KOOK_KICK, KOOK_MANAGE_MESSAGES = 1 << 6, 1 << 13


class KookGuildChat(KookChat):
    """Kook with a guild master (the one whose role is "owner") and an admin role that may kick
    and manage messages (not the administrator bit)."""

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        if api == "guild_view":
            owner = next((u for u, r in self.roles.items() if r == "owner"), "1")
            return super().answer(api, data) | {"user_id": owner, "master_id": owner}
        if api == "guildRole_list":
            listed = super().answer(api, data)
            listed["items"][1]["permissions"] = KOOK_KICK | KOOK_MANAGE_MESSAGES
            return listed
        if api in ("guild_kickout", "message_delete"):
            return None
        return super().answer(api, data)


class FeishuManagedChat(FeishuChat):
    """Feishu group chats whose owner is the one whose role is "owner" and whose managers are
    those whose role is "admin" (the bot's app id among the bot managers when it is one)."""

    def answer(self, api: str, data: dict[str, Any]) -> Any:
        method = data.get("method")
        if method == "DELETE":
            return {"code": 0, "msg": "success", "data": {}}
        if api == f"im/v1/chats/{self.group_id}" and (data.get("query") or {}).get("user_id_type") == "open_id":
            answer = super().answer(api, data)
            owner = next((u for u, r in self.roles.items() if r == "owner"), self.owner_id)
            admins = [u for u, r in self.roles.items() if r == "admin" and u != self.bot_open_id]
            bots = [self.self_id] if self.roles.get(self.bot_open_id) == "admin" else []
            answer["data"] |= {"owner_id": owner, "owner_id_type": "open_id",
                               "user_manager_id_list": admins, "bot_manager_id_list": bots}
            return answer
        return super().answer(api, data)


GUILD_ROLE_CHATS: dict[str, type[Chat]] = {
    chat.adapter_name: chat for chat in (DiscordGuildChat, QQGuildChat, KookGuildChat, FeishuManagedChat)}
"""The chats of the adapters whose group tools are in chat/group_platforms.py."""
