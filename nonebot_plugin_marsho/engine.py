"""One chat turn, NoneBot-free: history + question + tool schemas → endpoint → tool rounds → Reply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nonebot.log import logger

from .llm import LLMClient
from .session import History, Message, SessionLocks, fit_history
from .tools.model import ToolCall, ToolContext, ToolResult, Toolset
from .tools.runner import ToolRunner


@dataclass(frozen=True)
class Reply:
    """What one turn produced for the user."""

    text: str
    calls: list[tuple[ToolCall, ToolResult]] = field(default_factory=list)
    rounds: int = 0
    hit_round_limit: bool = False


Progress = Callable[[ToolCall, "ToolResult | None"], None]
"""Told of each tool call before it runs (result None) and again with its result."""


@dataclass
class TurnOutcome:
    """A finished answer: the messages it added after the prompt, and the Reply."""

    added: list[Message]
    reply: Reply


async def answer(
    llm: LLMClient,
    runner: ToolRunner,
    prompt: list[Message],
    tools: list[dict[str, Any]],
    *,
    context: ToolContext | None = None,
    max_tool_rounds: int = 8,
    progress: Progress | None = None,
) -> TurnOutcome:
    """Ask the model until it answers in text: run each batch of tool calls and send the
    results back, at most `max_tool_rounds` times, then once more without tools.

    Every call gets exactly one tool message; raises EndpointError if the endpoint fails.
    """
    added: list[Message] = []
    calls: list[tuple[ToolCall, ToolResult]] = []
    rounds = 0
    while True:
        offered = tools if tools and rounds < max_tool_rounds else None
        completion = await llm.complete([*prompt, *added], offered)
        if not completion.tool_calls or offered is None:
            break
        rounds += 1
        if progress:
            for call in completion.tool_calls:
                progress(call, None)
        results = await runner.run(completion.tool_calls, context, on_result=progress)
        for result in results:
            log = logger.info if result.ok else logger.warning
            log(f"marsho: tool {result.name} → {result.status} in {result.seconds:.2f} s")
        added.append(completion.assistant_message())
        added.extend(result.to_message() for result in results)
        calls.extend(zip(completion.tool_calls, results, strict=True))
    # calls sent although no tools were offered are dropped: unanswered calls would make the
    # stored history an invalid request
    added.append({"role": "assistant", "content": completion.content})
    hit_limit = bool(tools) and rounds > 0 and rounds >= max_tool_rounds
    return TurnOutcome(added, Reply(completion.content, calls, rounds, hit_limit))


class Engine:
    """Runs chat turns: one at a time per session, every loop bounded, history kept valid."""

    def __init__(
        self,
        llm: LLMClient,
        toolset: Toolset,
        history: History,
        runner: ToolRunner,
        *,
        system_prompt: str = "",
        max_tool_rounds: int = 8,
        max_history: int = 40,
    ) -> None:
        self.llm = llm
        self.toolset = toolset
        self.history = history
        self.runner = runner
        self.system_prompt = system_prompt
        self.max_tool_rounds = max_tool_rounds
        self.max_history = max_history
        self.locks = SessionLocks()

    async def chat(
        self,
        key: str,
        text: str,
        context: ToolContext | None = None,
        *,
        progress: Progress | None = None,
    ) -> Reply:
        """Answer `text` in session `key` with the tools the asker may use; the turn is stored
        only if it completes.

        Raises EndpointError when the endpoint fails; the session's history is then unchanged.
        """
        async with self.locks.hold(key):
            earlier = fit_history(await self.history.turns(key), self.max_history)
            question: Message = {"role": "user", "content": text}
            system: list[Message] = (
                [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            )
            outcome = await answer(
                self.llm, self.runner, [*system, *earlier, question],
                self.toolset.schemas(context), context=context,
                max_tool_rounds=self.max_tool_rounds, progress=progress,
            )
            await self.history.append_turn(key, [question, *outcome.added])
            if outcome.reply.hit_round_limit:
                logger.warning(f"marsho: session {key} used all {self.max_tool_rounds} tool "
                               "rounds (MARSHO_MAX_TOOL_ROUNDS)")
            return outcome.reply

    async def reset(self, key: str) -> int:
        """Forget the session's history (after any turn that is running)."""
        async with self.locks.hold(key):
            return await self.history.clear(key)

    async def last_calls(self, key: str) -> list[dict[str, Any]]:
        """The last turn's tool calls as seed 001's JSON array, each with the result it got."""
        turns = await self.history.turns(key)
        if not turns:
            return []
        results = {
            m.get("tool_call_id"): m.get("content", "") for m in turns[-1] if m.get("role") == "tool"
        }
        return [
            {**call, "result": results.get(call.get("id"), "")}
            for message in turns[-1]
            if message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
