"""A small OneBot v11 implementation simulator, and a helper that runs `bot.py` as a process.

No installable OneBot implementation runs without a QQ account, so end-to-end tests and
benchmarks talk to a real `bot.py` through this simulator instead:

    with BotProcess(base_url=fake.base_url, toolkit_dirs=[...]) as bot:
        async with OneBotSim(bot.ws_url, self_id=42) as sim:
            event = await sim.group_message("marsho hi", group_id=20001)
            reply = await sim.reply_to(event)          # the send_msg quoting that event
            assert reply.reply_id == event["message_id"] and reply.text == "..."

The simulator connects to the bot's reverse WebSocket like go-cqhttp or NapCat would
(`X-Self-ID`, `X-Client-Role: Universal`, optional `Authorization: Bearer`), pushes `message`
events (text, @, `reply` and `image` segments...) and `poke` notices, answers every action the bot
calls with `{"status": "ok", "retcode": 0, "data": ..., "echo": ...}` (`get_msg` with a message
pushed or sent earlier, as the adapter asks for the message a `reply` segment quotes), and records
each action with the time it arrived. Forward messages (`send_group_forward_msg`...) count as
sends too: `Action.nodes` and `Action.node_texts` read their nodes.

Group roles (`sim.roles[group_id][user_id] = "admin"`; anyone else is a member) answer
`get_group_member_info`, and `set_group_ban`, `set_group_kick` and `delete_msg` are refused
(retcode != 0) as a real implementation refuses them when the bot's own role does not reach
past the target's: an admin bot acts on members, an owner bot on admins too, nobody on the owner.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

REPO_ROOT = Path(__file__).resolve().parent.parent
BOT_PY = REPO_ROOT / "bot.py"

Segment = dict[str, Any]
FORWARD_ACTIONS = frozenset({"send_group_forward_msg", "send_private_forward_msg"})
"""Actions that send a forward message (a list of `node` segments in `messages`)."""
SEND_ACTIONS = frozenset({"send_msg", "send_group_msg", "send_private_msg", *FORWARD_ACTIONS})
"""Actions that send a chat message; `wait_send` and `reply_to` look at these."""
GROUP_ACTIONS = frozenset({"set_group_ban", "set_group_kick", "delete_msg"})
"""Actions that act on a group's members or messages, refused where the bot's role does not allow."""
ROLE_RANK = {"member": 0, "admin": 1, "owner": 2}

WAIT = 60.0
"""Seconds a wait for the bot's next action lasts at most: only a failing test waits that long,
and a loaded machine (four busy processes on two cores) never makes a passing one late."""

_message_ids = itertools.count(int(time.time()) % 1_000_000 * 1000 + 1)


def segments(message: str | Segment | Iterable[Segment]) -> list[Segment]:
    """A message as OneBot's segment array: plain text becomes one `text` segment."""
    if isinstance(message, str):
        return [{"type": "text", "data": {"text": message}}]
    if isinstance(message, Mapping):
        return [dict(message)]
    return [dict(segment) for segment in message]


def at(qq: int | str) -> Segment:
    """An @-mention segment."""
    return {"type": "at", "data": {"qq": str(qq)}}


def text_segment(text: str) -> Segment:
    """A text segment."""
    return {"type": "text", "data": {"text": text}}


def reply_segment(message_id: int | str | Mapping[str, Any]) -> Segment:
    """A `reply` segment quoting a message (its id, or the event pushed earlier)."""
    if isinstance(message_id, Mapping):
        message_id = message_id["message_id"]
    return {"type": "reply", "data": {"id": str(message_id)}}


def image_segment(url: str, *, file: str | None = None, **data: Any) -> Segment:
    """An `image` segment as go-cqhttp / NapCat push it: a `file` name and the `url` to fetch."""
    name = file or url.rstrip("/").rsplit("/", 1)[-1] or "image.png"
    return {"type": "image", "data": {"file": name, "url": url, **data}}


def file_segment(name: str, *, file_id: str | None = None, file_size: int | None = None,
                 url: str | None = None, busid: int | None = None) -> Segment:
    """A `file` segment as NapCat / LLOneBot push it: the file's name, its id (what
    `get_group_file_url` / `get_file` take), its size, and a `url` only when the implementation
    gives one (fill `OneBotSim.files` for the others)."""
    data: dict[str, Any] = {"file": name, "file_id": file_id or f"/{name}"}
    if file_size is not None:
        data["file_size"] = str(file_size)
    if url is not None:
        data["url"] = url
    if busid is not None:
        data["busid"] = busid
    return {"type": "file", "data": data}


def _cq_escape(text: str, *, in_param: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("[", "&#91;").replace("]", "&#93;")
    return text.replace(",", "&#44;") if in_param else text


def raw_message(message: list[Segment]) -> str:
    """The CQ-code string OneBot puts in `raw_message`."""
    parts = []
    for segment in message:
        data = segment.get("data") or {}
        if segment["type"] == "text":
            parts.append(_cq_escape(str(data.get("text", ""))))
        else:
            params = "".join(f",{k}={_cq_escape(str(v), in_param=True)}" for k, v in data.items())
            parts.append(f"[CQ:{segment['type']}{params}]")
    return "".join(parts)


@dataclass
class Action:
    """One action the bot called, as received."""

    action: str
    params: dict[str, Any]
    echo: Any
    received: float
    """time.perf_counter() when the frame arrived (for latency measurements in this process)."""
    wall: float
    """time.time() when the frame arrived (comparable with timestamps taken in other processes)."""
    response: Any = None

    @property
    def message(self) -> list[Segment]:
        """The `message` parameter as segments (a CQ string is kept as one text segment)."""
        message = self.params.get("message", [])
        return segments(message) if isinstance(message, (str, Mapping)) else list(message)

    @property
    def text(self) -> str:
        """The text segments of the message, joined."""
        return "".join(
            str((s.get("data") or {}).get("text", "")) for s in self.message if s.get("type") == "text"
        )

    @property
    def is_forward(self) -> bool:
        """A forward message (send_group_forward_msg / send_private_forward_msg)."""
        return self.action in FORWARD_ACTIONS

    @property
    def nodes(self) -> list[Segment]:
        """The `node` segments of a forward message (`messages`), else []."""
        messages = self.params.get("messages") or []
        if isinstance(messages, Mapping):
            messages = [messages]
        return [dict(m) for m in messages if isinstance(m, Mapping) and m.get("type") == "node"]

    @property
    def node_texts(self) -> list[str]:
        """The text of each node of a forward message (its text segments joined)."""
        texts = []
        for node in self.nodes:
            content = (node.get("data") or {}).get("content", [])
            content = segments(content) if isinstance(content, (str, Mapping)) else list(content)
            texts.append("".join(str((s.get("data") or {}).get("text", ""))
                                 for s in content if s.get("type") == "text"))
        return texts

    @property
    def reply_id(self) -> int | None:
        """The message id quoted by the first segment, if it is a `reply` segment."""
        message = self.message
        if message and message[0].get("type") == "reply":
            return int(message[0]["data"]["id"])
        return None

    def __str__(self) -> str:
        return f"{self.action}({json.dumps(self.params, ensure_ascii=False)[:300]})"


ActionHandler = Callable[[dict[str, Any]], Any]
"""params → data; raising makes the simulator answer with `status: failed`."""


class OneBotSim:
    """A OneBot v11 implementation connected to the bot's reverse WebSocket (`async with`)."""

    def __init__(
        self,
        url: str,
        *,
        self_id: int = 42,
        access_token: str | None = None,
        nickname: str = "marsho-sim",
    ) -> None:
        self.url = url
        self.self_id = int(self_id)
        self.access_token = access_token
        self.nickname = nickname
        self.actions: list[Action] = []
        """Every action the bot called, in order of arrival."""
        self.events: dict[int, dict[str, Any]] = {}
        """Pushed events by message_id (what `get_msg` answers with)."""
        self.handlers: dict[str, ActionHandler] = {}
        """Custom answers per action name, overriding the built-in ones."""
        self.roles: dict[int, dict[int, str]] = {}
        """group id -> user id -> "owner" or "admin" (anyone else is a member), the bot's own too."""
        self.files: dict[str, dict[str, Any]] = {}
        """file id -> what `get_file` answers (`url`, `base64`, `file`: a local path...);
        `get_group_file_url` answers its `url`."""
        self._sent_messages: dict[int, dict[str, Any]] = {}
        self._unclaimed: list[Action] = []
        self._changed: asyncio.Condition | None = None
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closed_reason: str | None = None

    # connection ------------------------------------------------------------------------------

    async def connect(self, timeout: float = 20.0) -> OneBotSim:
        """Connect, retrying while the bot is not up yet (or still drops an earlier connection)."""
        headers = {"X-Self-ID": str(self.self_id), "X-Client-Role": "Universal"}
        if self.access_token:
            headers["Authorization"] = f"Bearer {self.access_token}"
        self._changed = asyncio.Condition()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._ws = await connect(
                    self.url, additional_headers=headers, max_size=None, open_timeout=timeout,
                    compression=None,
                )
                break
            except (OSError, InvalidHandshake, asyncio.TimeoutError) as error:
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"could not connect to {self.url} within {timeout:g} s: {error!r}"
                    ) from error
                await asyncio.sleep(0.1)
        self._closed_reason = None
        self._reader = asyncio.create_task(self._read_loop(), name="onebot-sim-reader")
        return self

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._ws = self._reader = None

    async def __aenter__(self) -> OneBotSim:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def clear(self) -> None:
        """Forget recorded actions and sends nobody waited for (between tests)."""
        self.actions.clear()
        self._unclaimed.clear()

    # the bot's actions -----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self._ws is not None and self._changed is not None
        try:
            async for frame in self._ws:
                try:
                    data = json.loads(frame)
                except ValueError:
                    continue
                if not isinstance(data, dict) or "action" not in data:
                    continue
                action = Action(
                    action=str(data["action"]), params=data.get("params") or {},
                    echo=data.get("echo"), received=time.perf_counter(), wall=time.time(),
                )
                response = self._answer(action)
                action.response = response
                await self._ws.send(json.dumps(response, ensure_ascii=False))
                async with self._changed:
                    self.actions.append(action)
                    if action.action in SEND_ACTIONS:
                        self._unclaimed.append(action)
                    self._changed.notify_all()
        except ConnectionClosed as error:
            self._closed_reason = f"the bot closed the WebSocket ({error})"
        finally:
            self._closed_reason = self._closed_reason or "the simulator's connection ended"
            async with self._changed:
                self._changed.notify_all()

    def _answer(self, action: Action) -> dict[str, Any]:
        try:
            handler = self.handlers.get(action.action)
            data = handler(action.params) if handler else self._builtin(action)
        except Exception as error:
            return {"status": "failed", "retcode": 100, "data": None, "echo": action.echo,
                    "msg": type(error).__name__, "wording": str(error)}
        return {"status": "ok", "retcode": 0, "data": data, "echo": action.echo}

    def _builtin(self, action: Action) -> Any:
        params = action.params
        if action.action in SEND_ACTIONS:
            message_id = next(_message_ids)
            message_type = params.get("message_type") or (
                "group" if action.action in ("send_group_msg", "send_group_forward_msg")
                or params.get("group_id") else "private"
            )
            self._sent_messages[message_id] = {
                "time": int(time.time()), "message_type": message_type, "message_id": message_id,
                "real_id": message_id,
                "message": ([{"type": "forward", "data": {"id": str(message_id)}}]
                            if action.is_forward else action.message),
                "sender": {"user_id": self.self_id, "nickname": self.nickname},
            }
            if action.is_forward:
                return {"message_id": message_id, "forward_id": str(message_id)}
            return {"message_id": message_id}
        if action.action == "get_msg":
            message_id = int(params.get("message_id", 0))
            if message_id in self._sent_messages:
                return self._sent_messages[message_id]
            event = self.events.get(message_id)
            if event is None:
                raise LookupError(f"no message {message_id}")
            found = {
                "time": event["time"], "message_type": event["message_type"],
                "message_id": message_id, "real_id": message_id, "sender": event["sender"],
                "message": event["message"],
            }
            if "group_id" in event:  # as NapCat and LLOneBot answer
                found["group_id"] = event["group_id"]
            return found
        if action.action in ("get_group_file_url", "get_private_file_url", "get_file"):
            found = self.files.get(str(params.get("file_id")))
            if found is None:
                raise LookupError(f"no file {params.get('file_id')}")
            if action.action == "get_file":
                return dict(found)
            if not found.get("url"):
                raise LookupError(f"no URL for file {params.get('file_id')}")
            return {"url": found["url"]}
        if action.action == "get_group_member_info":
            group_id, user_id = int(params["group_id"]), int(params["user_id"])
            return {"group_id": group_id, "user_id": user_id, "nickname": f"user{user_id}", "card": "",
                    "role": self.role(group_id, user_id)}
        if action.action in GROUP_ACTIONS:
            return self._group_action(action.action, params)
        if action.action == "get_login_info":
            return {"user_id": self.self_id, "nickname": self.nickname}
        if action.action == "get_status":
            return {"online": True, "good": True}
        return None

    def role(self, group_id: int, user_id: int) -> str:
        """A member's role in a group: what `roles` says, else "member"."""
        return self.roles.get(int(group_id), {}).get(int(user_id), "member")

    def _group_action(self, name: str, params: dict[str, Any]) -> None:
        """set_group_ban, set_group_kick, delete_msg: done (None) where the bot's role reaches past
        the target's, else refused (the implementation's retcode != 0)."""
        if name == "delete_msg":
            message_id = int(params["message_id"])
            if message_id in self._sent_messages:
                return None  # the bot's own message
            event = self.events.get(message_id)
            if event is None or "group_id" not in event:
                raise LookupError(f"no group message {message_id}")
            group_id, user_id = int(event["group_id"]), int(event["user_id"])
        else:
            group_id, user_id = int(params["group_id"]), int(params["user_id"])
        mine, theirs = self.role(group_id, self.self_id), self.role(group_id, user_id)
        if ROLE_RANK[mine] <= ROLE_RANK[theirs]:
            raise PermissionError(f"the bot is a {mine} of group {group_id} and {user_id} a {theirs}")
        return None

    def group_actions(self) -> list[Action]:
        """Every set_group_ban, set_group_kick and delete_msg the bot called so far."""
        return [a for a in self.actions if a.action in GROUP_ACTIONS]

    async def wait_send(
        self, *, timeout: float = WAIT, where: Callable[[Action], bool] | None = None
    ) -> Action:
        """The first send action (send_msg & co.) not yet returned that matches `where`."""

        def claim(action: Action) -> bool:
            if where is None or where(action):
                self._unclaimed.remove(action)
                return True
            return False

        return await self._wait_for(lambda: list(self._unclaimed), claim, "send_msg", timeout)

    async def wait_action(
        self, name: str, *, timeout: float = WAIT, where: Callable[[Action], bool] | None = None
    ) -> Action:
        """The first recorded action called `name` (any action, sends too) that matches `where`,
        waiting for it if it has not come yet; unlike `wait_send` it claims nothing."""
        return await self._wait_for(
            lambda: [a for a in self.actions if a.action == name],
            lambda action: where is None or where(action), name, timeout)

    async def _wait_for(
        self, candidates: Callable[[], list[Action]], take: Callable[[Action], bool], what: str,
        timeout: float,
    ) -> Action:
        """The first of `candidates()` that `take` accepts, waiting for new actions until then."""
        assert self._changed is not None, "connect() first"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._changed:
            while True:
                for action in candidates():
                    if take(action):
                        return action
                if self._reader is None or self._reader.done():
                    raise ConnectionError(f"no {what} came: {self._closed_reason}")
                remaining = deadline - loop.time()
                if remaining <= 0:
                    seen = "\n  ".join(str(a) for a in self.actions[-10:]) or "(none)"
                    raise TimeoutError(
                        f"no matching {what} within {timeout:g} s; last actions seen:\n  {seen}"
                    )
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

    async def expect_no_send(
        self, seconds: float, *, where: Callable[[Action], bool] | None = None
    ) -> None:
        """Wait `seconds`; raise AssertionError if a send (not yet returned by `wait_send`)
        matching `where` came by then."""
        try:
            action = await self.wait_send(timeout=seconds, where=where)
        except TimeoutError:
            return
        raise AssertionError(f"the bot sent something it should not have: {action}")

    async def next_send_msg(self, timeout: float = WAIT) -> Action:
        """The next message the bot sends, whatever it answers."""
        return await self.wait_send(timeout=timeout)

    async def reply_to(self, event: Mapping[str, Any] | int, timeout: float = WAIT) -> Action:
        """The message the bot sends quoting `event` (or a message id)."""
        message_id = int(event if isinstance(event, int) else event["message_id"])
        return await self.wait_send(timeout=timeout, where=lambda a: a.reply_id == message_id)

    def sends_quoting(self, event: Mapping[str, Any]) -> list[Action]:
        """Every recorded send action quoting `event` so far."""
        return [a for a in self.actions if a.action in SEND_ACTIONS
                and a.reply_id == int(event["message_id"])]

    # events ----------------------------------------------------------------------------------

    def group_event(
        self,
        message: str | Segment | Iterable[Segment],
        *,
        group_id: int = 20001,
        user_id: int = 10001,
        nickname: str | None = None,
        card: str = "",
        role: str = "member",
        message_id: int | None = None,
    ) -> dict[str, Any]:
        """A OneBot v11 group `message` event, as JSON-ready data (`card`: the group card)."""
        message = segments(message)
        message_id = next(_message_ids) if message_id is None else message_id
        return {
            "time": int(time.time()), "self_id": self.self_id, "post_type": "message",
            "message_type": "group", "sub_type": "normal", "message_id": message_id,
            "group_id": int(group_id), "user_id": int(user_id), "anonymous": None,
            "message": message, "raw_message": raw_message(message), "font": 0,
            "sender": {
                "user_id": int(user_id), "nickname": nickname or f"user{user_id}", "card": card,
                "sex": "unknown", "age": 0, "area": "", "level": "1", "role": role, "title": "",
            },
        }

    def private_event(
        self,
        message: str | Segment | Iterable[Segment],
        *,
        user_id: int = 10001,
        nickname: str | None = None,
        message_id: int | None = None,
    ) -> dict[str, Any]:
        """A OneBot v11 private (friend) `message` event, as JSON-ready data."""
        message = segments(message)
        message_id = next(_message_ids) if message_id is None else message_id
        return {
            "time": int(time.time()), "self_id": self.self_id, "post_type": "message",
            "message_type": "private", "sub_type": "friend", "message_id": message_id,
            "user_id": int(user_id), "message": message, "raw_message": raw_message(message),
            "font": 0,
            "sender": {"user_id": int(user_id), "nickname": nickname or f"user{user_id}",
                       "sex": "unknown", "age": 0},
        }

    def poke_event(
        self,
        *,
        user_id: int = 10001,
        group_id: int | None = 20001,
        target_id: int | None = None,
    ) -> dict[str, Any]:
        """A OneBot v11 `poke` notice: `user_id` poked `target_id` (the bot unless given), in a
        group, or in a private chat when `group_id` is None."""
        event: dict[str, Any] = {
            "time": int(time.time()), "self_id": self.self_id, "post_type": "notice",
            "notice_type": "notify", "sub_type": "poke", "user_id": int(user_id),
            "target_id": int(self.self_id if target_id is None else target_id),
        }
        if group_id is not None:
            event["group_id"] = int(group_id)
        return event

    async def poke(self, **kwargs: Any) -> dict[str, Any]:
        """Push a poke notice (see `poke_event` for the keywords); returns the event."""
        return await self.push(self.poke_event(**kwargs))

    async def push(self, event: dict[str, Any]) -> dict[str, Any]:
        """Send an event to the bot; returns it (keep it to match the reply)."""
        if self._ws is None:
            raise ConnectionError("connect() first")
        if "message_id" in event:
            self.events[int(event["message_id"])] = event
        await self._ws.send(json.dumps(event, ensure_ascii=False))
        return event

    async def group_message(
        self, message: str | Segment | Iterable[Segment], **kwargs: Any
    ) -> dict[str, Any]:
        """Push a group message event (see `group_event` for the keywords); returns the event."""
        return await self.push(self.group_event(message, **kwargs))

    async def private_message(
        self, message: str | Segment | Iterable[Segment], **kwargs: Any
    ) -> dict[str, Any]:
        """Push a private message event (see `private_event` for the keywords); returns the event."""
        return await self.push(self.private_event(message, **kwargs))

    async def ask(
        self, message: str | Segment | Iterable[Segment], *, timeout: float = WAIT,
        private: bool = False, **kwargs: Any,
    ) -> tuple[dict[str, Any], Action]:
        """Push a message and wait for the bot's reply quoting it."""
        if private:
            event = await self.private_message(message, **kwargs)
        else:
            event = await self.group_message(message, **kwargs)
        return event, await self.reply_to(event, timeout=timeout)


# the bot process ----------------------------------------------------------------------------


async def wait_for_quiet(
    activity: Callable[[], object], *, until: Callable[[], bool] = lambda: True,
    quiet: float = 1.0, timeout: float = WAIT,
) -> bool:
    """Wait until `until()` holds and `activity()` (what was counted so far: frames, requests)
    has not changed for `quiet` s; False if that did not come within `timeout` s. A count taken
    then includes every answer still on its way, however slow the machine."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen, since = activity(), loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.05)
        now = activity()
        if now != seen or not until():
            seen, since = now, loop.time()
        elif loop.time() - since >= quiet:
            return True
    return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def terminate(process: subprocess.Popen[bytes]) -> None:
    """Stop a bot process: SIGTERM, then SIGKILL if it is still there after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class BotProcess:
    """`bot.py` in a subprocess, configured only through environment variables.

    It runs in a fresh temporary directory, so no developer `.env` is read, with the localstore
    folders inside it. Use it as a context manager (`with` or `async with`): it waits until the
    bot listens, raises with the bot's output if the process exits first, and always stops it.
    """

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str = "test-key",
        model: str = "fake-model",
        toolkit_dirs: Iterable[str | os.PathLike[str]] = (),
        env: Mapping[str, str] | None = None,
        access_token: str | None = None,
        startup_timeout: float = 60.0,
        bot_py: Path = BOT_PY,
    ) -> None:
        self.port = free_port()
        self.access_token = access_token
        self.startup_timeout = startup_timeout
        self.bot_py = bot_py
        self.workdir = Path(tempfile.mkdtemp(prefix="marsho-e2e-bot-"))
        self.log_path = self.workdir / "bot.log"
        self.env = {
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "DRIVER": "~fastapi+~httpx+~websockets",
            "MARSHO_BASE_URL": base_url,
            "MARSHO_API_KEY": api_key,
            "MARSHO_MODEL": model,
            "MARSHO_TOOLKIT_DIRS": json.dumps([str(Path(d).resolve()) for d in toolkit_dirs]),
            "LOCALSTORE_DATA_DIR": str(self.workdir / "data"),
            "LOCALSTORE_CACHE_DIR": str(self.workdir / "cache"),
            "LOCALSTORE_CONFIG_DIR": str(self.workdir / "config"),
            "PYTHONUNBUFFERED": "1",
            # the tests read the English texts; zh-CN (the default) is checked where it matters
            "MARSHO_LANG": "en",
            # a question goes to the model as it was asked, without the time after it (the
            # turn's note), unless a test or benchmark turns it on
            "MARSHO_TIME_PROMPT": "false",
        }
        if access_token:
            self.env["ONEBOT_ACCESS_TOKEN"] = access_token
        self.env.update(env or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def ws_url(self) -> str:
        """The OneBot v11 reverse WebSocket of this bot."""
        return f"ws://127.0.0.1:{self.port}/onebot/v11/ws"

    def output(self) -> str:
        """Everything the bot printed so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def _child_env(self) -> dict[str, str]:
        # a developer's own MARSHO_* / LOCALSTORE_* / nonebot settings must not leak in
        inherited = {
            k: v for k, v in os.environ.items()
            if not k.upper().startswith(("MARSHO_", "MARSHOAI_", "LOCALSTORE_", "ONEBOT_"))
            and k.upper() not in {"HOST", "PORT", "DRIVER", "ENVIRONMENT", "COMMAND_START",
                                  "NICKNAME", "SUPERUSERS", "LOG_LEVEL"}
        }
        return {**inherited, **self.env}

    def start(self) -> BotProcess:
        """Start the bot and wait until it accepts connections."""
        log = open(self.log_path, "wb")
        try:
            self.process = subprocess.Popen(
                [sys.executable, str(self.bot_py)], cwd=self.workdir, env=self._child_env(),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self.process.poll()
            if code is not None:
                output = self.output()
                self.stop()
                raise RuntimeError(f"bot.py exited with code {code} before listening:\n{output}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                output = self.output()
                self.stop()
                raise TimeoutError(
                    f"bot.py did not listen on port {self.port} within "
                    f"{self.startup_timeout:g} s:\n{output}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the bot (SIGTERM, then SIGKILL after 10 s) and remove its directory."""
        process, self.process = self.process, None
        if process is not None:
            terminate(process)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def simulator(self, *, self_id: int = 42, **kwargs: Any) -> OneBotSim:
        """A simulator for this bot (not yet connected; `async with` it)."""
        return OneBotSim(self.ws_url, self_id=self_id, access_token=self.access_token, **kwargs)

    def __enter__(self) -> BotProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> BotProcess:
        try:
            return await asyncio.to_thread(self.start)
        except BaseException:
            self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)


def show_output(process: BotProcess, label: str = "bot.py") -> None:
    """Write the end of the bot's output to the real stderr (pytest would swallow it)."""
    sys.__stderr__.write(f"\n---- {label} output (last 8000 characters) ----\n{process.output()[-8000:]}")


@contextmanager
def output_if_failed(process: BotProcess, request: Any, label: str = "bot.py") -> Iterator[None]:
    """Around a fixture's `yield`: when a test that used it failed, show the bot's output."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        show_output(process, label)


# bots and echo accounts that talk back (issue 25) -------------------------------------------

INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff")
"""Zero-width characters a platform that strips them would drop from a message."""

Relayed = Callable[[Action], "list[Segment] | None"]
"""A send of one bot → the message another account says back (None: nothing)."""


def said_again(*, strip_invisible: bool = False) -> Relayed:
    """What another bot in the group receives of a send: its text and @ segments as they were
    (the `reply` segment, which names a message id of the other simulator, left out); with
    `strip_invisible`, as a platform that drops zero-width characters delivers it."""

    def relayed(action: Action) -> list[Segment] | None:
        if action.is_forward:
            return None
        message = [dict(s) for s in action.message if s.get("type") in ("text", "at")]
        if strip_invisible:
            for segment in message:
                if segment["type"] == "text":
                    text = str(segment["data"].get("text", ""))
                    segment["data"] = {"text": "".join(c for c in text if c not in INVISIBLE)}
        return message if any(s["type"] == "text" and s["data"].get("text") for s in message) else None
    return relayed


def echoed(prefix: str = "Marsho said: ", *, strip_invisible: bool = False) -> Relayed:
    """An echo account: each text message the bot sends, said again after `prefix` (without its
    zero-width characters with `strip_invisible`)."""

    def relayed(action: Action) -> list[Segment] | None:
        said = action.node_texts if action.is_forward else [action.text]
        text = "\n".join(t for t in said if t)
        if strip_invisible:
            text = "".join(c for c in text if c not in INVISIBLE)
        return [text_segment(prefix + text)] if text else None
    return relayed


Links = dict[tuple[int, int], tuple[int, int]]
"""(simulator's self id, message id there) → the same message in the other simulator."""


async def relay(
    source: OneBotSim, target: OneBotSim, *, group_id: int, user_id: int | None = None,
    says: Relayed | None = None, stop: asyncio.Event | None = None, links: Links | None = None,
) -> int:
    """Until `stop` is set (or the task is cancelled): every message `source`'s bot sends to
    `group_id` is pushed to `target`'s bot as a group message from `user_id` (default: the
    source bot's own account, as another bot in the group sees it), shaped by `says` (default
    `said_again()`). Two relays wire two bots into one group; `relay(sim, sim, user_id=...,
    says=echoed())` is an echo account. With `links` (one dict shared by both relays) a send
    that quotes a relayed message quotes, on the other side, the message it came from (as one
    group's message ids are the same for every member). Returns how many messages it pushed."""
    assert source._changed is not None, "connect() first"
    says = says or said_again()
    sender = source.self_id if user_id is None else int(user_id)
    seen, pushed = 0, 0
    stop = stop or asyncio.Event()
    while not stop.is_set():
        async with source._changed:
            try:
                await asyncio.wait_for(source._changed.wait_for(lambda seen=seen: len(source.actions) > seen), 0.2)
            except asyncio.TimeoutError:
                continue
            fresh, seen = source.actions[seen:], len(source.actions)
        for action in fresh:
            if action.action not in SEND_ACTIONS or int(action.params.get("group_id") or 0) != int(group_id):
                continue
            message = says(action)
            if message is None or stop.is_set():
                continue
            quoted = links.get((source.self_id, action.reply_id or 0)) if links is not None else None
            if quoted is not None and quoted[0] == target.self_id:
                message = [reply_segment(quoted[1]), *message]
            event = await target.group_message(message, group_id=group_id, user_id=sender)
            pushed += 1
            sent = ((action.response or {}).get("data") or {}).get("message_id")
            if links is not None and sent is not None:
                links[(target.self_id, int(event["message_id"]))] = (source.self_id, int(sent))
                links[(source.self_id, int(sent))] = (target.self_id, int(event["message_id"]))
    return pushed
