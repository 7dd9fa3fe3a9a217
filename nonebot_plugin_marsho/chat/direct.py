"""Rules and handlers NoneBot calls with the bot, the event and the state as they are.

NoneBot gives a rule's or a handler's function its parameters by dependency injection: for every
call it checks and solves each parameter in a task group of its own (anyio), and the rule's
checkers run in one more. For a function that takes `(bot, event, state)` and nothing else that
work hands it what the caller had already, at about a third of the CPU of a message that is not
for marsho (which the rule sees, every message). `DirectRule` and `direct_handler` call the
function with them directly: the same function, the same arguments, the same outcome.

`DirectRule` keeps its function among `checkers` as NoneBot parsed it, so a rule combined with it
(`Rule(...) & rule`, which NoneBot rebuilds from the checkers) still runs it, the usual way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

from nonebot.adapters import Bot, Event
from nonebot.dependencies import Dependent
from nonebot.exception import SkippedException
from nonebot.matcher import Matcher
from nonebot.rule import Rule
from nonebot.typing import T_DependencyCache, T_State

Checker = Callable[[Bot, Event, T_State], Awaitable[bool]]
Handler = Callable[[Bot, Event, T_State], Awaitable[Any]]


class DirectRule(Rule):
    """A rule of one checker `call(bot, event, state)`, called without dependency injection."""

    __slots__ = ("call",)

    def __init__(self, call: Checker) -> None:
        super().__init__(call)
        self.call = call

    def __repr__(self) -> str:
        return f"DirectRule({getattr(self.call, '__name__', self.call)!r})"

    async def __call__(self, bot: Bot, event: Event, state: T_State, stack: AsyncExitStack | None = None,
                       dependency_cache: T_DependencyCache | None = None) -> bool:
        try:
            return bool(await self.call(bot, event, state))
        except SkippedException:  # as NoneBot's Rule: a skipped checker does not match
            return False


class _DirectHandler(Dependent[Any]):
    """A handler `call(bot, event, state)` NoneBot's matcher calls without dependency injection
    (it calls every handler with `bot=`, `event=`, `state=` and more as keywords)."""

    async def __call__(self, **kwargs: Any) -> Any:
        call: Handler = self.call  # type: ignore[assignment]
        return await call(kwargs["bot"], kwargs["event"], kwargs["state"])


def direct_handler(matcher: type[Matcher]) -> Callable[[Handler], Handler]:
    """`@direct_handler(matcher)`: like `@matcher.handle()` for a handler `(bot, event, state)`,
    called without dependency injection."""

    def register(call: Handler) -> Handler:
        matcher.handlers.append(_DirectHandler(call))
        return call
    return register
