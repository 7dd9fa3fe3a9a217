"""chat/direct.py: rules and handlers called with the bot, the event and the state as they are,
without NoneBot's dependency injection (issue 30: the rule sees every message)."""

from __future__ import annotations

from typing import Any

from nonebot.adapters import Bot, Event
from nonebot.dependencies import Dependent
from nonebot.exception import SkippedException
from nonebot.rule import Rule
from nonebot.typing import T_State

from nonebot_plugin_marsho.chat import matchers, poke
from nonebot_plugin_marsho.chat.direct import DirectRule, direct_handler

BOT, EVENT = object(), object()


async def test_a_direct_rule_gets_the_bot_the_event_and_the_state_as_they_are() -> None:
    seen: list[tuple[Any, Any, Any]] = []

    async def checker(bot: Bot, event: Event, state: T_State) -> bool:
        seen.append((bot, event, state))
        state["mark"] = 1
        return True

    state: dict[str, Any] = {}
    assert await DirectRule(checker)(BOT, EVENT, state) is True  # type: ignore[arg-type]
    assert seen == [(BOT, EVENT, state)] and state == {"mark": 1}


async def test_a_direct_rule_says_no_when_its_checker_does_or_skips() -> None:
    async def no(bot: Bot, event: Event, state: T_State) -> bool:
        return False

    async def skips(bot: Bot, event: Event, state: T_State) -> bool:
        raise SkippedException

    assert await DirectRule(no)(BOT, EVENT, {}) is False  # type: ignore[arg-type]
    assert await DirectRule(skips)(BOT, EVENT, {}) is False  # type: ignore[arg-type]


def test_a_direct_rule_combined_with_another_keeps_its_checker() -> None:
    async def checker(bot: Bot, event: Event, state: T_State) -> bool:
        return True

    combined = Rule() & DirectRule(checker)
    assert [dependent.call for dependent in combined.checkers] == [checker]


async def test_a_direct_handler_gets_the_bot_the_event_and_the_matchers_state() -> None:
    seen: list[tuple[Any, Any, Any]] = []

    class Matcher:
        handlers: list[Dependent[Any]] = []

    @direct_handler(Matcher)  # type: ignore[arg-type]
    async def handler(bot: Bot, event: Event, state: T_State) -> str:
        seen.append((bot, event, state))
        return "done"

    state: dict[str, Any] = {"marsho_request": 1}
    (registered,) = Matcher.handlers
    # as NoneBot's Matcher.simple_run calls each handler
    result = await registered(matcher=Matcher, bot=BOT, event=EVENT, state=state, stack=None,
                              dependency_cache={})
    assert result == "done" and seen == [(BOT, EVENT, state)]


def test_marsho_has_one_matcher_whose_rule_and_handler_run_without_dependency_injection() -> None:
    from nonebot.matcher import matchers as registered

    ours = [matcher for group in registered.values() for matcher in group
            if matcher.plugin_name == "nonebot_plugin_marsho"]
    assert ours == [matchers.marsho] and poke.poke is matchers.marsho
    assert matchers.marsho.type == ""  # messages and notices alike
    assert isinstance(matchers.marsho.rule, DirectRule)
    assert matchers.marsho.rule.call is matchers._for_marsho
    assert [handler.call for handler in matchers.marsho.handlers] == [matchers.handle_event]
    assert type(matchers.marsho.handlers[0]) is not Dependent
    assert (poke._poked_me, poke.handle_poke) in matchers._notices
