"""A conversation other code drives itself (the "AIO" calls of the tool system's spec): set tools,
chat, read the tool calls, submit tool results, read the last response. NoneBot-free."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..exceptions import MarshoError
from ..store.session import Message
from ..tools.model import TOOL_NAME_PATTERN, Tool, ToolCall, ToolContext, Toolkit, Toolset
from ..tools.runner import ToolRunner, serialize_result
from ..tools.schema import function_tool
from ..tools.toolbox import Toolbox
from .engine import Progress, answer
from .llm import Completion, LLMClient
from .persona import Prompt
from .turn import TurnFacts, build_request

ToolSpec = Mapping[str, Any] | Callable[..., Any] | Tool
"""What `set_tools` takes: an OpenAI tool schema (you run it yourself), a function, or a Tool."""


def _schema_only_tool(schema: Mapping[str, Any]) -> Tool:
    function = schema.get("function", schema)
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"a tool schema needs function.name: {dict(schema)!r}")

    def not_runnable(**_: Any) -> Any:
        raise MarshoError(f"{name} has no function; submit its results with submit_tool_results")

    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return Tool(name, str(function.get("description", "")), dict(parameters), not_runnable)


def _name_of(func: Callable[..., Any]) -> str:
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        raise ValueError(
            f"{func!r} has no __name__: wrap it in a def, or pass "
            "function_tool(func, name=...) from nonebot_plugin_marsho.tools"
        )
    return name


class Conversation:
    """One conversation with the model, driven by code (another plugin, a script).

    With `auto_run_tools=True` (the default) tool calls run as in chat: `chat()` returns the
    final answer. With `auto_run_tools=False` nothing runs by itself: `chat()` may stop at tool
    calls, which you read with `get_tool_calls()` and answer with `submit_tool_results()`.

    Each question is built as a chat turn is (agent/turn.py): with `prompt` (the bot's own,
    `Marsho.prompt`) it gets the bot's system prompt, and the time and `nickname` beside it.
    """

    def __init__(
        self,
        *,
        llm: LLMClient | None = None,
        system_prompt: str = "",
        auto_run_tools: bool = True,
        max_tool_rounds: int = 8,
        tool_timeout: float = 30.0,
        context: ToolContext | None = None,
        prompt: Prompt | None = None,
        nickname: str | None = None,
        speaker: str = "",
        group_persona: str | None = None,
    ) -> None:
        if prompt is not None and system_prompt:
            raise ValueError("give Conversation a system_prompt or a prompt, not both")
        self._llm = llm
        self.prompt = prompt
        """The bot's way of prompting (persona, additional prompt, liked people; the time and the
        nickname beside each question), as a chat turn gets it; None: `system_prompt` alone."""
        self.nickname = nickname
        """What the asker asked to be called (told beside each question, with `prompt`)."""
        self.speaker = speaker
        """The asker's label in a conversation of several people: each question starts with it."""
        self.group_persona = group_persona
        """The asker's group's own persona (in the system prompt, with `prompt`)."""
        self.auto_run_tools = auto_run_tools
        self.max_tool_rounds = max_tool_rounds
        self.context = context
        self.messages: list[Message] = (
            [{"role": "system", "content": system_prompt}] if system_prompt else []
        )
        self._toolset = Toolset()
        self._runner = ToolRunner(self._toolset, timeout=tool_timeout)
        self._last_calls: list[ToolCall] = []
        self._pending: list[ToolCall] = []
        self._last_response = ""

    default_llm: Callable[[], LLMClient] | None = None
    """Where a Conversation made without `llm` gets its client: set by the plugin when NoneBot
    loads it (the running bot's endpoint, from `.env`); None outside a bot."""

    @property
    def llm(self) -> LLMClient:
        """The client given, else the running bot's (the endpoint of `.env`)."""
        if self._llm is None:
            if Conversation.default_llm is None:
                raise MarshoError("this Conversation has no endpoint: pass Conversation(llm=LLMClient(...)), "
                                  "or use it inside a bot that loaded nonebot_plugin_marsho")
            self._llm = Conversation.default_llm()
        return self._llm

    def set_tools(self, tools: Toolbox | Toolset | Iterable[ToolSpec]) -> None:
        """AIO.SetTools: the tools offered from now on (replacing earlier ones)."""
        if isinstance(tools, Toolset):
            chosen = list(tools.tools.values())
        elif isinstance(tools, Toolbox):
            chosen = tools.build()
        else:
            tools = list(tools)
            if self.auto_run_tools and any(isinstance(tool, Mapping) for tool in tools):
                raise ValueError(
                    "a tool given as a bare schema has no function to run: pass functions, or "
                    "use Conversation(auto_run_tools=False) and submit_tool_results yourself"
                )
            chosen = [
                tool if isinstance(tool, Tool)
                else _schema_only_tool(tool) if isinstance(tool, Mapping)
                else function_tool(tool, name=_name_of(tool))
                for tool in tools
            ]
        names = [tool.name for tool in chosen]
        invalid = [name for name in names if not TOOL_NAME_PATTERN.match(name)]
        if invalid:
            raise ValueError(
                "tool names must be 1-64 letters, digits, '_' or '-' (what OpenAI-compatible "
                f"endpoints accept): {', '.join(map(repr, invalid))}"
            )
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique: {', '.join(duplicates)}")
        self._toolset.tools.clear()
        self._toolset.add(Toolkit("conversation", tools=chosen))

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The schemas offered to the model (those the context may use)."""
        return self._toolset.schemas(self.context)

    async def chat(self, text: str, *, progress: Progress | None = None) -> str:
        """AIO.Chat: send a user message; returns the answer's text ('' if it stopped at tool
        calls in manual mode)."""
        if self._pending:
            raise MarshoError(
                "the last response's tool calls are unanswered: call submit_tool_results first"
            )
        # built as a chat turn is; its note goes with this question's requests only
        request = await build_request(self._facts(text), self.prompt, context=self.context)
        if request.system_prompt is not None:
            self._use_system_prompt(request.system_prompt)
        # nothing is kept unless the endpoint answers: a failed chat can simply be retried
        question, asked = request.question(), request.asked()
        if not self.auto_run_tools:
            completion = await self.llm.complete([*self.messages, asked], self.tools or None)
            return self._take([question], completion)
        outcome = await answer(
            self.llm, self._runner, lambda added: [*self.messages, asked, *added], self.tools,
            context=self.context, max_tool_rounds=self.max_tool_rounds, progress=progress,
        )
        self.messages.extend([question, *outcome.added])
        self._last_calls = [call for call, _ in outcome.reply.calls]
        self._last_response = outcome.reply.text
        return self._last_response

    def _facts(self, text: str) -> TurnFacts:
        """The facts of a turn asking `text` in this conversation."""
        return TurnFacts.asking(text, speaker=self.speaker, nickname=self.nickname,
                                group_persona=self.group_persona)

    def _use_system_prompt(self, system_prompt: str) -> None:
        # the prompt's, at the start of the conversation: the same each turn (but for a change
        # of praises.json), so the request's start repeats
        if self.messages and self.messages[0]["role"] == "system":
            del self.messages[0]
        if system_prompt:
            self.messages.insert(0, {"role": "system", "content": system_prompt})

    def _take(self, sent: list[Message], completion: Completion) -> str:
        self.messages.extend(sent)
        self.messages.append(completion.assistant_message())
        self._last_calls = list(completion.tool_calls)
        self._pending = list(completion.tool_calls)
        self._last_response = completion.content
        return completion.content

    def get_tool_calls(self) -> str:
        """AIO.GetToolCalls: the last response's tool calls as a JSON array
        `[{"id", "type": "function", "function": {"name", "arguments"}}]`, or '' if none."""
        if not self._last_calls:
            return ""
        return json.dumps([call.to_openai() for call in self._last_calls], ensure_ascii=False)

    async def submit_tool_results(self, results: Mapping[str, Any] | Sequence[Any]) -> str:
        """AIO.SubmitToolResults: one result per pending call, by call id (a mapping) or in call
        order (a list); returns the model's next text ('' if it asks for more tools)."""
        if not self._pending:
            raise MarshoError("there are no tool calls waiting for results")
        if isinstance(results, Mapping):
            ids = [call.id for call in self._pending]
            missing = [i for i in ids if i not in results]
            unknown = [key for key in results if key not in ids]
            if missing or unknown:
                raise ValueError(
                    "give exactly one result per pending call "
                    f"(missing: {missing or 'none'}; unknown ids: {unknown or 'none'})"
                )
            ordered = [results[i] for i in ids]
        else:
            ordered = list(results)
            if len(ordered) != len(self._pending):
                raise ValueError(
                    f"{len(self._pending)} calls are pending but {len(ordered)} results were given"
                )
        answers: list[Message] = [
            {"role": "tool", "tool_call_id": call.id, "content": serialize_result(result)}
            for call, result in zip(self._pending, ordered, strict=True)
        ]
        completion = await self.llm.complete([*self.messages, *answers], self.tools or None)
        return self._take(answers, completion)

    def get_last_response(self) -> str:
        """AIO.GetLastResponse: the text of the last response."""
        return self._last_response
