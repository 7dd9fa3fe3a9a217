"""Streamed answers: the part that decides which requests are streamed (MARSHO_STREAM, models
that take only streams), the server-sent events read from a response's bytes, and the one
Completion assembled from a stream's chunks: text, reasoning apart, tool calls from their
fragments by index (the id on the first, the name, the arguments in pieces), usage from the last
chunk. The endpoint client (endpoint.py) sends the request and keeps every bound; this module
never holds more than the response's bytes.

What a text hook (`ModelRequest.on_text`) is told: the answer's text as it arrives, without a
leading `<think>` block; in a response to a request that offered tools, the text is held until
its first paragraph ends (a blank line), HELD_CHARS have come, or the response ends without
calls, and a response that turns to tool calls before that tells nothing (its text is the
calls' preamble, not an answer)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...exceptions import EndpointError
from ...redaction import logger
from .base import Wrapper

if TYPE_CHECKING:
    from ..metering import TokenUsage
    from .base import Completion, Model, ModelRequest, StreamMode, TextHook
    from .learned import Learned

HELD_CHARS = 240
"""Characters of text held at most, in a response to a request that offered tools, before they
are told without waiting for the end of the first paragraph (a preamble to calls is shorter)."""

MAX_STREAMED_CALLS = 256
"""Tool calls assembled from one streamed response at most (fragments of calls past these are
dropped; the engine keeps fewer still, see engine.KEPT_CALLS_FACTOR)."""

_STREAM_ONLY = re.compile(
    r"only supports? stream|stream mode|for non-streaming calls|stream(ing)? (is )?required"
    r"|requires? stream", re.IGNORECASE)
"""A 400 saying the model takes only streamed requests: DashScope's "This model only support
stream mode" (qwq-plus) and "parameter.enable_thinking must be set to false for non-streaming
calls" (qwen3 with thinking on)."""


def only_streams(error: EndpointError) -> bool:
    """Whether a refusal says the model must be streamed."""
    return error.status == 400 and _STREAM_ONLY.search(str(error)) is not None


class Streaming(Wrapper):
    """The part that streams the requests that should be: always (MARSHO_STREAM=true), never
    (false), or (auto) when a text hook listens or the model takes only streams. A model whose
    refusal says it takes only streams is asked again streamed, and from then on (`Learned`)."""

    def __init__(self, inner: Model, learned: Learned, mode: StreamMode = "auto", *,
                 base_url: str = "") -> None:
        super().__init__(inner)
        self.learned = learned
        self.mode = mode
        self.base_url = base_url

    def wanted(self, request: ModelRequest) -> bool:
        if self.mode != "auto":
            return self.mode == "true"
        return request.on_text is not None or request.model in self.learned.stream_only

    async def request(self, request: ModelRequest) -> Completion:
        stream = self.wanted(request)
        if stream != request.stream:
            request = request.but(stream=stream)
        try:
            return await self.inner.request(request)
        except EndpointError as error:
            if stream or self.mode == "false" or not only_streams(error):
                raise
            self.learned.learn_stream_only(request.model, self.base_url, error)
        return await self.inner.request(request.but(stream=True))


async def server_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The `data` of each server-sent event in `chunks` (lines `data: ...`, an event ended by a
    blank line; comments and other fields skipped)."""
    buffer = b""
    data: list[bytes] = []
    async for chunk in chunks:
        buffer += chunk
        if b"\n" not in chunk and b"\r" not in chunk:
            continue  # a long line still coming: not split again with each piece
        # a "\r" at the end may be the start of "\r\n": it waits for the next piece
        end = len(buffer) - 1 if buffer.endswith(b"\r") else len(buffer)
        *lines, rest = re.split(rb"\r\n|\r|\n", buffer[:end])
        buffer = rest + buffer[end:]
        for line in lines:
            if not line:
                if data:
                    yield b"\n".join(data).decode("utf-8", "replace")
                    data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
    if buffer.startswith(b"data:"):
        value = buffer[5:]
        data.append(value[1:] if value.startswith(b" ") else value)
    if data:
        yield b"\n".join(data).decode("utf-8", "replace")


@dataclass
class _Call:
    """One tool call being assembled from its fragments."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def raw(self) -> dict[str, Any]:
        """The call as a complete response would hold it (read by endpoint._tool_calls_of)."""
        raw: dict[str, Any] = {**self.extras, "id": self.id, "type": "function",
                               "function": {"name": self.name, "arguments": "".join(self.arguments)}}
        return raw


_CALL_FIELDS = frozenset({"index", "id", "type", "function"})

_THINK_OPEN = "<think>"
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


class StreamAssembly:
    """One streamed response read chunk by chunk into what a complete response would say, with
    its text told to `on_text` on the way (see the module's docstring)."""

    def __init__(self, on_text: TextHook | None, *, tools_offered: bool, max_chars: int) -> None:
        self.on_text = on_text
        self.hold = tools_offered
        """Hold the text until its first paragraph ends: the response may still turn to calls."""
        self.max_chars = max_chars
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.length = self.reasoning_length = 0
        self.total = 0
        """Characters of text the stream sent (past max_chars too): whether the answer was cut."""
        self.calls: dict[int, _Call] = {}
        self.usage: TokenUsage | None = None
        self.finished = False
        """A chunk said why the answer ended (`finish_reason`), or `[DONE]` came."""
        self.started = False
        """The response's stream began (a failure from now on is a stream cut half way)."""
        self.shown = False
        """Some text was told to `on_text`: a failure now cannot be retried unseen."""
        self._pending = ""
        self._checked = False  # whether the text's start was looked at for a <think> block
        self._thinking = False

    def message(self) -> dict[str, Any]:
        """The assembled message, shaped as a complete response's `choices[0].message`."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[index].raw() for index in sorted(self.calls)]
        return message

    async def add(self, chunk: Any) -> None:
        """Take one chunk (a parsed event)."""
        from ..metering import usage_of

        if not isinstance(chunk, dict):
            return
        usage = usage_of(chunk)
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            return
        if choice.get("finish_reason"):
            self.finished = True
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        from .endpoint import _text_of

        fragments = delta.get("tool_calls")
        if isinstance(fragments, list):
            for fragment in fragments:
                self._fragment(fragment)
        reasoning = _text_of(delta.get("reasoning_content") or delta.get("reasoning"))
        if reasoning and self.reasoning_length < self.max_chars:
            self.reasoning.append(reasoning[:self.max_chars - self.reasoning_length])
            self.reasoning_length += len(self.reasoning[-1])
        text = _text_of(delta.get("content"))
        if text:
            await self._text(text)

    def _fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            return
        call = self._call_of(fragment)
        if call is None:
            return
        given = fragment.get("id")
        if isinstance(given, str) and given and not call.id:  # DashScope repeats "id": "" later
            call.id = given
        function = fragment.get("function")
        if isinstance(function, dict):
            name = function.get("name")
            if isinstance(name, str) and name and not call.name:
                call.name = name
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                call.arguments.append(arguments)
            elif arguments is not None:
                from ...tools.runner import json_text

                call.arguments = [json_text(arguments) or ""]
        call.extras.update({key: value for key, value in fragment.items() if key not in _CALL_FIELDS})

    def _call_of(self, fragment: dict[str, Any]) -> _Call | None:
        """The call a fragment belongs to (by its index; without one, a new id starts a new
        call and anything else goes on the last), None past MAX_STREAMED_CALLS."""
        index = fragment.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            given = fragment.get("id")
            new = isinstance(given, str) and given and given not in {c.id for c in self.calls.values()}
            index = max(self.calls, default=-1) + (1 if new or not self.calls else 0)
        call = self.calls.get(index)
        if call is None:
            if len(self.calls) >= MAX_STREAMED_CALLS:
                return None
            call = self.calls[index] = _Call()
            self._pending = ""  # the response turned to calls: its text is not an answer to tell
        return call

    async def _text(self, text: str) -> None:
        self.total += len(text)
        room = self.max_chars - self.length
        if room <= 0:
            return
        kept = text[:room]
        self.content.append(kept)
        self.length += len(kept)
        if self.on_text is None or self.calls:
            return
        self._pending += kept
        await self._tell(final=False)

    async def finish(self) -> None:
        """The stream ended: what is held is told, unless the response turned to calls."""
        if not self.calls:
            await self._tell(final=True)

    async def _tell(self, *, final: bool) -> None:
        if not self._checked:
            start = self._pending.lstrip().lower()
            if not final and len(start) < len(_THINK_OPEN) and _THINK_OPEN.startswith(start):
                return  # too little to know yet
            self._checked = True
            self._thinking = start.startswith(_THINK_OPEN)
        if self._thinking:
            closed = _THINK_CLOSE.search(self._pending)
            if closed is None:
                return  # reasoning, never told
            self._thinking = False
            self._pending = self._pending[closed.end():]
        if not self.shown:
            self._pending = self._pending.lstrip()
        if not self._pending:
            return
        if self.hold and not final:
            if "\n\n" not in self._pending and len(self._pending) < HELD_CHARS:
                return
            self.hold = False
        piece, self._pending = self._pending, ""
        await self._told(piece)

    async def _told(self, piece: str) -> None:
        hook = self.on_text
        if hook is None:
            return
        self.shown = True
        try:
            await hook(piece)
        except Exception as error:  # showing it is a courtesy: the answer still comes whole
            logger.warning(f"marsho: the streamed text could not be shown: {error}")
            self.on_text = None


def parsed(data: str) -> Any:
    """One event's JSON (ValueError when it is not)."""
    return json.loads(data)
