"""Reply → chat text: empty answers explained, tool listings, call dumps, history figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .engine import Reply
from .tools.model import Toolset

_ONLY = {"admin": "admins only", "superuser": "superusers only"}
MAX_CALLS_RESULT_CHARS = 500
"""Characters of each tool result shown by `marsho.calls`; the full text stays in history."""


def reply_text(reply: Reply, max_tool_rounds: int) -> str:
    """The text to send for a finished turn."""
    text = reply.text.strip()  # reasoning was already taken out (llm.split_reasoning)
    if text:
        return text
    if reply.hit_round_limit:
        return (
            f"I used all {max_tool_rounds} rounds of tool calls (MARSHO_MAX_TOOL_ROUNDS) "
            "without reaching an answer. Try asking something narrower."
        )
    return "The model sent an empty answer. Try asking again, perhaps in other words."


def usage_text(names: list[str], at_enabled: bool) -> str:
    """What `marsho` alone and `marsho.help` answer."""
    name = names[0]
    lines = [
        f"Ask me anything: {name} <question>",
        f"Trigger words: {', '.join(names)} (any case, with or without a command prefix)",
    ]
    if at_enabled:
        lines.append("You can also @ me in a group.")
    lines += [
        f"{name}.reset  forget this conversation",
        f"{name}.tools  list the tools I can use",
        f"{name}.calls  show the tool calls of my last answer",
        f"{name}.history  how much of this conversation I keep",
        f"{name}.help   show this help",
        f"{name}.model [name]  show or switch the model (superusers)",
        f"{name}.export  save this conversation as JSON (superusers)",
    ]
    return "\n".join(lines)


def tools_text(toolset: Toolset, mcp_status: dict[str, str] | None = None) -> str:
    """What `marsho.tools` answers: loaded toolkits and tools, MCP servers' states, then every
    toolkit that failed."""
    lines: list[str] = []
    if toolset.toolkits:
        lines.append(f"Loaded toolkits ({len(toolset.toolkits)}, {len(toolset.tools)} tools):")
        for toolkit in toolset.toolkits:
            lines.append(f"• {toolkit.name} ({toolkit.source})")
            for tool in toolkit.tools:
                who = "" if tool.permission == "everyone" else f" [{_ONLY[tool.permission]}]"
                summary = f": {tool.summary}" if tool.summary else ""
                lines.append(f"  - {tool.name}{who}{summary}")
    else:
        lines.append("No toolkits are loaded.")
    if mcp_status:
        lines.append("MCP servers: " + "; ".join(f"{name}: {state}" for name, state in mcp_status.items()))
    if toolset.available:
        lines.append("Off until enabled (MARSHO_ENABLED_TOOLKITS): " + ", ".join(toolset.available))
    if toolset.disabled:
        lines.append("Disabled (MARSHO_DISABLED_TOOLKITS): " + ", ".join(toolset.disabled))
    failed = toolset.failed_toolkits()
    if failed:
        lines.append(f"Failed to load ({len(failed)}):")
        for name, problems in failed.items():
            lines.append(f"✗ {name or '(toolset folder)'}")
            # the folder and file, not the server's whole path: group members read this too
            lines.extend(f"  - {Path(*problem.path.parts[-2:])}: {problem.message}"
                         for problem in problems)
    return "\n".join(lines)


def calls_text(calls: list[dict[str, Any]]) -> str:
    """What `marsho.calls` answers: seed 001's JSON array, each call with its result."""
    if not calls:
        return "No tool calls in this conversation's last answer."
    shown = []
    for call in calls:
        result = str(call.get("result", ""))
        if len(result) > MAX_CALLS_RESULT_CHARS:
            result = result[:MAX_CALLS_RESULT_CHARS] + f"…({len(result)} characters)"
        shown.append({**call, "result": result})
    return json.dumps(shown, ensure_ascii=False, indent=1)


def history_text(turns: int, messages: int, tokens: int, budget: int, counting: str) -> str:
    """What `marsho.history` answers."""
    if not turns:
        return "This conversation is empty."
    return (
        f"This conversation: {turns} turns, {messages} messages, about {tokens} tokens stored "
        f"({counting}). Each request carries the newest turns that fit in {budget} tokens "
        "(MARSHO_HISTORY_TOKENS)."
    )
