"""One chat turn, NoneBot-free: history + question + tool schemas → endpoint → tool rounds → Reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nonebot.log import logger

from .llm import Completion, LLMClient
from .session import History, Message, SessionLocks, Turn, fit_history
from .tools.model import ToolCall, ToolContext, ToolResult, Toolset
from .tools.runner import ToolRunner


@dataclass(frozen=True)
class Reply:
    """What one turn produced for the user."""

    text: str
    calls: list[tuple[ToolCall, ToolResult]] = field(default_factory=list)
    rounds: int = 0
    hit_round_limit: bool = False


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

    async def chat(self, key: str, text: str, context: ToolContext | None = None) -> Reply:
        """Answer `text` in session `key`; the turn is stored only if it completes.

        Raises EndpointError when the endpoint fails; the session's history is then unchanged.
        """
        async with self.locks.hold(key):
            earlier = fit_history(await self.history.turns(key), self.max_history)
            question: Message = {"role": "user", "content": text}
            turn: Turn = [question]
            system: list[Message] = (
                [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            )
            tools = self.toolset.schemas()
            calls: list[tuple[ToolCall, ToolResult]] = []
            rounds = 0
            while True:
                offered = tools if tools and rounds < self.max_tool_rounds else None
                completion = await self.llm.complete([*system, *earlier, *turn], offered)
                if not completion.tool_calls or offered is None:
                    break
                rounds += 1
                results = await self._run_tools(completion, context)
                turn.append(completion.assistant_message())
                turn.extend(result.to_message() for result in results)
                calls.extend(zip(completion.tool_calls, results))
            # tool calls sent although no tools were offered are dropped, unanswered calls
            # would make the stored history an invalid request
            turn.append({"role": "assistant", "content": completion.content})
            await self.history.append_turn(key, turn)
            hit_limit = bool(tools) and rounds >= self.max_tool_rounds and rounds > 0
            if hit_limit:
                logger.warning(f"marsho: session {key} reached MARSHO_MAX_TOOL_ROUNDS={rounds}")
            return Reply(completion.content, calls, rounds, hit_limit)

    async def _run_tools(
        self, completion: Completion, context: ToolContext | None
    ) -> list[ToolResult]:
        results = await self.runner.run(completion.tool_calls, context)
        for result in results:
            log = logger.info if result.ok else logger.warning
            log(f"marsho: tool {result.name} → {result.status} in {result.seconds:.2f} s")
        return results

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
