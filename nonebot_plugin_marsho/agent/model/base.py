"""The model interface every part implements (a request in, a Completion out), and what passes
through it. Parts that change one thing wrap another model and pass the rest on (`Wrapper`), as
pydantic-ai's models/wrapper.py does; they are composed once, by agent/model/factory.py."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractAsyncContextManager

    from ...tools.model import ToolCall
    from ..metering import TokenUsage
    from ..providers import Deadline, EndpointStatus
    from .fallback import Route

Message = dict[str, Any]

ToolMode = Literal["native", "prompt", "off"]
"""How tools reach a model: the API's `tools` field, a text protocol in the prompt, or not at all."""

TextHook = Callable[[str], Awaitable[None]]
"""Told each piece of an answer's text as a streamed response brings it (agent/model/stream.py
says which pieces: never reasoning, never a call's arguments)."""

StreamMode = Literal["auto", "true", "false"]
"""MARSHO_STREAM: stream when a text hook listens or the model takes only streams; always; never."""


@dataclass(frozen=True)
class Completion:
    """The model's answer to one request: text, tool calls, and reasoning kept apart."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""
    cut: bool = False
    """The answer was longer than MARSHO_MAX_ANSWER_CHARS and `content` is its start (chat/ says
    so with `reply.cut`)."""
    usage: TokenUsage | None = None
    """The tokens the endpoint reported for the request (None: it reported none)."""
    extras: tuple[dict[str, Any] | None, ...] = ()
    """What the provider attached to each tool call beyond id, name and arguments (Gemini's
    `extra_content` with its thought signature), in the order of `tool_calls`; () when none.
    Sent back within the turn to the same endpoint only (fallback.Route), never stored."""
    streamed: bool = False
    """The answer came as a stream (its text pieces may have been told already)."""

    def assistant_message(self, *, with_reasoning: bool = False) -> dict[str, Any]:
        """The assistant message to append to the conversation; reasoning only on request, and
        only beside tool calls (where providers such as DeepSeek want it back)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["content"] = self.content or None
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
            if with_reasoning and self.reasoning:
                message["reasoning_content"] = self.reasoning
        return message


_THINK_BLOCK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL | re.IGNORECASE)


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, answer): `<think>` blocks that reasoning models put in the text (closed, or
    left open at the end, or only closed: "... </think> answer") are taken out of the answer."""
    thoughts = [match.strip() for match in _THINK_BLOCK.findall(text)]
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text.lower():
        head, text = re.split(r"</think>", text, maxsplit=1, flags=re.IGNORECASE)
        thoughts.insert(0, head.strip())
    return "\n".join(t for t in thoughts if t), text.strip()


@dataclass(frozen=True)
class ModelRequest:
    """One request on its way down the parts; a part changes it with `but` (a copy).

    The caller gives `messages` (plain OpenAI shape), `tools` and the turn's `route`; the fallback
    chain fills in, per endpoint, the `model` asked, the `deadline` shared by the endpoints, the
    seconds to `keep` for the ones after it, whether there are `more`, the `foreign`
    reasoning another endpoint gave, and the `settings` its errors' hints name; the quirks add
    body `options` (the token field, the reasoning effort); the streaming part sets `stream`,
    and `on_text` is told the answer's text as it arrives."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    route: Route | None = None
    model: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    deadline: Deadline | None = None
    keep: float = 0.0
    more: bool = False
    foreign: frozenset[str] = frozenset()
    settings: Mapping[str, str] = field(default_factory=dict)
    """Where the owner set this endpoint's model, keys and URL (`model_setting`, `key_setting`,
    `url_setting`): the hints of its errors name them, in the retry log line as in the reply."""
    stream: bool = False
    """Ask for a streamed answer (with its usage in the last chunk)."""
    on_text: TextHook | None = None

    def but(self, **changes: Any) -> ModelRequest:
        """This request with `changes` (as `dataclasses.replace`, which builds it again through
        `__init__` and its fields' list: 3.3 us, against 0.5; there is no `__post_init__` to run)."""
        unknown = changes.keys() - _REQUEST_FIELDS
        if unknown:
            raise TypeError(f"ModelRequest has no field {', '.join(sorted(unknown))}")
        changed = object.__new__(type(self))
        changed.__dict__.update(self.__dict__)
        changed.__dict__.update(changes)
        return changed

    def body(self) -> dict[str, Any]:
        """The chat-completions request body, exactly as it is sent."""
        body: dict[str, Any] = {"model": self.model, "messages": self.messages}
        if self.tools:
            body["tools"] = self.tools
        body.update(self.options)
        if self.stream:  # stream_options only beside stream: OpenAI refuses it alone
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body


_REQUEST_FIELDS = frozenset(f.name for f in fields(ModelRequest))


class Model(Protocol):
    """A model: a request in, a Completion out (or an EndpointError). A streamed request is the
    same call with `request.stream` set: every part wraps it alike, and the answer is whole."""

    async def request(self, request: ModelRequest) -> Completion: ...

    def status(self) -> list[EndpointStatus]:
        """Each endpoint behind this model, for `marsho.status`."""
        ...

    async def close(self) -> None: ...


class Wrapper:
    """A part around another model: what it does not change goes to `inner` as it came."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    async def request(self, request: ModelRequest) -> Completion:
        return await self.inner.request(request)

    def status(self) -> list[EndpointStatus]:
        return self.inner.status()

    async def close(self) -> None:
        await self.inner.close()


class Gate(Protocol):
    """Requests in flight across all chats (MARSHO_MAX_CONCURRENT_REQUESTS): each HTTP request
    to the endpoint runs inside `async with gate.slot():`."""

    def slot(self) -> AbstractAsyncContextManager[object]: ...
