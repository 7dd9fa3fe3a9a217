"""Tool.offered: a tool offered only where its hook says (the group tools: in groups that have them
on), whatever ToolContext a turn is built with: a message's, a reminder's, the library's. Where
it is not offered it is neither in the request's tools nor run, and the other tools are as
before."""

from __future__ import annotations

from typing import Any

from nonebot_plugin_marsho.chat.group_actions import GroupActions
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import Tool, ToolCall, ToolRunner, Toolset
from nonebot_plugin_marsho.tools.model import ToolContext
from tests.test_group_actions import GROUP, RecordingBot, store  # noqa: F401 - the fixture

ran: list[str] = []


def _tool(name: str, offered: Any = None) -> Tool:
    def work() -> str:
        ran.append(name)
        return f"{name} ran"
    return Tool(f"kit__{name}", f"The {name} tool", {"type": "object", "properties": {}}, work,
                toolkit="kit", offered=offered)


def test_a_tool_is_offered_only_where_its_hook_says() -> None:
    toolset = Toolset()
    for tool in (_tool("anywhere"), _tool("in_groups", offered=lambda context: context.group_id is not None)):
        toolset.tools[tool.name] = tool
    in_group, private = ToolContext(group_id="1"), ToolContext()
    assert [schema["function"]["name"] for schema in toolset.schemas(in_group)] == ["kit__anywhere", "kit__in_groups"]
    assert [schema["function"]["name"] for schema in toolset.schemas(private)] == ["kit__anywhere"]


async def test_a_tool_not_offered_here_is_not_run_though_called() -> None:
    toolset = Toolset()
    tool = _tool("in_groups", offered=lambda context: context.group_id is not None)
    toolset.tools[tool.name] = tool
    runner = ToolRunner(toolset)
    try:
        ran.clear()
        [refused] = await runner.run([ToolCall("c1", "kit__in_groups", "{}")], ToolContext())
        [done] = await runner.run([ToolCall("c2", "kit__in_groups", "{}")], ToolContext(group_id="1"))
    finally:
        runner.close()
    assert refused.status == "denied" and done.ok and ran == ["in_groups"]


def _plain(bot: RecordingBot, group: str | None) -> ToolContext:
    """A turn's context built as a reminder's is: a plain ToolContext, no event."""
    platform = bot.adapter.get_name()
    return ToolContext(session_key="k", user_id="1", group_id=group, role="admin", bot=bot, platform=platform,
                       chat_key=f"{platform}:group:{group}" if group else f"{platform}:private:1")


def test_a_plain_tool_context_offers_the_group_tools_only_where_they_are_on(store: SqlStore) -> None:  # noqa: F811
    actions = GroupActions(store)
    toolset = Toolset()
    for tool in actions.toolkit().tools:
        toolset.tools[tool.name] = tool
    bot = RecordingBot()
    assert [s["function"]["name"] for s in toolset.schemas(_plain(bot, GROUP))] == [
        "group__mute", "group__recall", "group__unmute"]
    assert toolset.schemas(_plain(bot, None)) == []
    actions.off.add(f"OneBot V11:group:{GROUP}")
    assert toolset.schemas(_plain(bot, GROUP)) == []


async def test_a_group_tool_called_in_a_private_chat_says_it_works_only_in_groups(
        store: SqlStore) -> None:  # noqa: F811
    toolset = Toolset()
    for tool in GroupActions(store).toolkit().tools:
        toolset.tools[tool.name] = tool
    runner = ToolRunner(toolset)
    try:
        [result] = await runner.run([ToolCall("c1", "group__mute", '{"user_id": "7", "minutes": 1}')],
                                    _plain(RecordingBot(), None))
    finally:
        runner.close()
    assert result.status == "denied"
    assert result.content.startswith(
        "Error: group__mute is not available here: the group tools work only in group chats"), result.content
