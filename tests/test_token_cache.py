"""The engine counts the stable start of a request (system prompt, tool schemas) once per change
and per counter, not once per request (issue 30)."""

from __future__ import annotations

from typing import Any

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.tokens import TokenCounter
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools.model import Toolset
from nonebot_plugin_marsho.tools.runner import ToolRunner

PROMPT = "You are Marsho. " * 40
TOOLS = [{"type": "function", "function": {"name": "kit__look", "description": "Look " * 30,
                                           "parameters": {"type": "object", "properties": {}}}}]


class Tally(TokenCounter):
    """The estimate, counting how often it counted `PROMPT`'s message and the tools; `scale`
    tells two counters apart by what they answer."""

    def __init__(self, scale: int = 1) -> None:
        super().__init__()
        self.scale = scale
        self.prompts = self.tools = 0

    def count_message(self, message: dict[str, Any]) -> int:
        if message.get("role") == "system":
            self.prompts += 1
        return super().count_message(message) * self.scale

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        self.tools += 1
        return super().count_tools(tools) * self.scale


def engine(counter: TokenCounter) -> Engine:
    toolset = Toolset()
    return Engine(None, toolset, SqlStore("sqlite://"), ToolRunner(toolset),  # type: ignore[arg-type]
                  system_prompt=PROMPT, max_tokens=4000, counter=counter)


def room(engine: Engine) -> int:
    """Tokens left for history beside the system message and the tools."""
    system = engine._system(PROMPT, "", TOOLS)
    return engine._layout(system, [{"role": "user", "content": "hi"}], TOOLS)[1]


def test_the_system_prompt_and_the_tools_are_counted_once_for_many_requests() -> None:
    counter = Tally()
    marsho = engine(counter)
    rooms = {room(marsho) for _ in range(20)}
    assert len(rooms) == 1
    assert (counter.prompts, counter.tools) == (1, 1)


def test_each_counter_counts_the_start_for_itself_and_keeps_its_own_counts() -> None:
    first, second = Tally(scale=1), Tally(scale=2)
    marsho = engine(first)
    one = room(marsho)
    marsho.counter = second  # marsho.model switched: another model's tokenizer
    two = room(marsho)
    assert two < one  # the second counter's own (doubled) counts, not the first's
    marsho.counter = first  # and back: the first counter's counts are still known
    assert room(marsho) == one
    marsho.counter = second
    assert room(marsho) == two
    assert (first.prompts, first.tools, second.prompts, second.tools) == (1, 1, 1, 1)


def test_a_changed_system_prompt_is_counted_again() -> None:
    counter = Tally()
    marsho = engine(counter)
    room(marsho)
    longer = marsho._layout(marsho._system(PROMPT + "Speak French.", "", TOOLS),
                            [{"role": "user", "content": "hi"}], TOOLS)[1]
    assert longer < room(marsho) and counter.prompts == 2
