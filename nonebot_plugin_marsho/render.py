"""Reply → chat text: reasoning stripped, empty answers explained, tool listings and call dumps."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .engine import Reply
from .tools.model import Toolset

THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_ONLY = {"admin": "admins only", "superuser": "superusers only"}
MAX_CALLS_RESULT_CHARS = 500
"""Characters of each tool result shown by `marsho.calls`; the full text stays in history."""


def strip_reasoning(text: str) -> str:
    """Drop `<think>` blocks (closed, or left open at the end) that reasoning models put in text."""
    text = THINK_BLOCK.sub("", text)
    # some providers drop the opening tag and send only "... </think> answer"
    if "</think>" in text.lower():
        text = re.split(r"</think>", text, flags=re.IGNORECASE)[-1]
    return text.strip()


def reply_text(reply: Reply, max_tool_rounds: int) -> str:
    """The text to send for a finished turn."""
    text = strip_reasoning(reply.text)
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
        f"{name}.help   show this help",
    ]
    return "\n".join(lines)


def tools_text(toolset: Toolset) -> str:
    """What `marsho.tools` answers: loaded toolkits and tools, then every toolkit that failed."""
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
