"""The OpenAI-compatible client: one request → a Completion, every failure → an EndpointError."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import openai
from nonebot.log import logger

from ..exceptions import EndpointError
from ..tools.model import ToolCall
from .prompt_mode import parse_tool_calls, system_addendum, to_prompt_messages

NO_KEY_PLACEHOLDER = "no-key"
"""Sent when MARSHO_API_KEY is empty: local endpoints accept anything, the SDK insists on a key."""


@dataclass(frozen=True)
class Completion:
    """The model's answer to one request: text, tool calls, and reasoning kept apart."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""

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


ToolMode = Literal["native", "prompt", "off"]
"""How tools reach a model: the API's `tools` field, a text protocol in the prompt, or not at all."""

_TOOLS_REFUSED = re.compile(
    r"(tool|function)[^.]{0,60}(not (be )?supported|unsupported|not available|not enabled)"
    r"|(not support|unsupported|does not support)[^.]{0,60}(tool|function)",
    re.IGNORECASE,
)


def _refuses_tools(error: EndpointError) -> bool:
    """A 400 saying the model cannot take `tools` (wordings of OpenAI-compatible servers)."""
    return error.status == 400 and _TOOLS_REFUSED.search(str(error)) is not None


def _with_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _error_detail_of(body: dict[str, Any]) -> str:
    """The message of an OpenAI-style error body (some servers send them with status 200)."""
    inner = body.get("error", body.get("message", ""))
    if isinstance(inner, dict):
        inner = inner.get("message", "")
    return str(inner) if inner else ""


def _error_detail(error: openai.APIError) -> str:
    body = getattr(error, "body", None)
    detail = _error_detail_of(body) if isinstance(body, dict) else ""
    return detail or str(getattr(error, "message", "") or error)


class LLMClient:
    """Talks to one OpenAI-compatible endpoint; make it inside the running loop and reuse it."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout: float,
        tool_mode: ToolMode = "native",
        tool_mode_by_model: Mapping[str, ToolMode] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        self.default_tool_mode = tool_mode
        self.tool_mode_by_model = dict(tool_mode_by_model or {})
        self._learned_prompt_mode: set[str] = set()
        self._client: openai.AsyncOpenAI | None = None

    @property
    def tool_mode(self) -> ToolMode:
        """How the current model gets tools: configured per model, else learned, else default."""
        if self.model in self.tool_mode_by_model:
            return self.tool_mode_by_model[self.model]
        if self.model in self._learned_prompt_mode:
            return "prompt"
        return self.default_tool_mode

    @property
    def needs_key(self) -> bool:
        """True when no key is set and the endpoint is one that always wants one."""
        host = urlsplit(self.base_url).hostname or ""
        return not self.api_key and host.endswith("openai.com")

    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.api_key or NO_KEY_PLACEHOLDER,
                timeout=self.timeout,
                # aiohttp's pool stays cheap with many requests in flight (the SDK's advice
                # "for improved concurrency"); httpx2's rescans every connection per request
                http_client=openai.DefaultAioHttpClient(timeout=self.timeout),
                # one honest bound per request: MARSHO_TIMEOUT, not the SDK's retries on top of it
                max_retries=0,
            )
        return self._client

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        """Ask the model, offering `tools` in the model's tool mode; calls come back as
        ToolCalls whatever the mode, and `messages` are always in the native format."""
        mode = self.tool_mode
        if mode == "native":
            try:
                return await self._request(messages, tools)
            except EndpointError as error:
                if not tools or not _refuses_tools(error):
                    raise
                self._learned_prompt_mode.add(self.model)
                logger.warning(
                    f"marsho: {self.base_url} refused tools for model {self.model} ({error}); "
                    "using prompt mode for it from now on (set MARSHO_TOOL_MODE_BY_MODEL to "
                    "choose yourself)"
                )
                mode = "prompt"
        plain = to_prompt_messages(messages)
        if mode == "prompt" and tools:
            plain = _with_system_text(plain, system_addendum(tools))
        completion = await self._request(plain, None)
        calls, text = parse_tool_calls(completion.content)
        if not calls:
            return completion
        if mode != "prompt" or not tools:
            calls = []  # calls although no tools were offered: not run, and kept from the user
        return Completion(text, calls, completion.reasoning)

    async def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> Completion:
        """Send one chat-completions request and read the first choice."""
        if self.needs_key:
            raise EndpointError(code="endpoint.no_key", hint="endpoint.no_key.hint", url=self.base_url)
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            request["tools"] = tools
        started = time.monotonic()
        try:
            # the SDK's low-level post: our messages are plain OpenAI-shaped dicts already, and
            # create()'s parameter transform costs ~0.25 ms per message (11 ms at 40 messages)
            response = await asyncio.wait_for(
                # read as a plain dict: building the SDK's models costs more than reading it
                self._get_client().post("/chat/completions", body=request, cast_to=dict),
                self.timeout,
            )
        except (asyncio.TimeoutError, openai.APITimeoutError) as error:
            # the aiohttp transport reports a refused connection as a (connect) timeout at once
            if time.monotonic() - started < self.timeout * 0.9 and error.__cause__ is not None:
                raise self._unreachable(error.__cause__) from None
            raise EndpointError(code="endpoint.timeout", hint="endpoint.timeout.hint",
                                url=self.base_url, seconds=f"{self.timeout:g}") from None
        except openai.APIStatusError as error:
            raise self._status_error(error) from None
        except openai.APIConnectionError as error:
            raise self._unreachable(error.__cause__ or error) from None
        except openai.OpenAIError as error:
            raise EndpointError(code="endpoint.unreadable", url=self.base_url, error=str(error)) from None
        return self._read(response)

    def _unreachable(self, cause: BaseException) -> EndpointError:
        return EndpointError(code="endpoint.unreachable", hint="endpoint.unreachable.hint",
                             url=self.base_url, error=f"{type(cause).__name__}: {cause}")

    def _status_error(self, error: openai.APIStatusError) -> EndpointError:
        status = error.status_code
        detail = _error_detail(error)
        if status in (401, 403, 404, 429):
            return EndpointError(code=f"endpoint.{status}", hint=f"endpoint.{status}.hint", status=status,
                                 detail=detail, model=self.model, url=self.base_url)
        if status >= 500:
            return EndpointError(code="endpoint.5xx", hint="endpoint.5xx.hint", status=status,
                                 detail=detail)
        return EndpointError(code="endpoint.4xx", status=status, detail=detail)

    def _read(self, response: Any) -> Completion:
        """The first choice of a chat completion, read from the JSON body with care: whatever
        the endpoint sent, the result is well-formed or an EndpointError says what was wrong."""
        if not isinstance(response, dict):  # the SDK hands back non-JSON bodies as they are
            start = str(response)[:80]
            raise EndpointError(code="endpoint.not_completion", hint="endpoint.not_completion.hint",
                                url=self.base_url, start=repr(start))
        choices = response.get("choices")
        if not isinstance(choices, list) or not choices:
            detail = _error_detail_of(response)
            raise EndpointError(code="endpoint.no_choices", url=self.base_url,
                                detail=f": {detail}" if detail else "")
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message")
        if not isinstance(message, dict):
            raise EndpointError(code="endpoint.empty_choice", url=self.base_url)
        calls: list[ToolCall] = []
        seen_ids: set[str] = set()
        raw_calls = message.get("tool_calls")
        for index, raw in enumerate(raw_calls if isinstance(raw_calls, list) else []):
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict) or not function.get("name"):
                continue
            call_id = str(raw.get("id") or f"call_{uuid.uuid4().hex[:12]}")
            if call_id in seen_ids:  # every call must get its own tool message
                call_id = f"{call_id}_{index}"
            seen_ids.add(call_id)
            arguments = function.get("arguments") or ""
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            calls.append(ToolCall(id=call_id, name=str(function["name"]), arguments=arguments))
        thought, content = split_reasoning(str(message.get("content") or ""))
        reasoning = str(message.get("reasoning_content") or message.get("reasoning") or "")
        return Completion(
            content=content,
            tool_calls=calls,
            reasoning="\n".join(part for part in (reasoning, thought) if part),
        )

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            await self._client.close()
            self._client = None
