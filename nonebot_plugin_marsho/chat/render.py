"""Reply → chat text: empty answers explained, tool listings, call dumps, history figures."""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..agent.engine import Reply
from ..agent.providers import EndpointStatus
from ..agent.summary import SummaryStatus
from ..exceptions import BudgetError, MarshoError, StoreError, join_hint
from ..i18n import Texts
from ..store.session import Summary
from ..tools.model import Toolset

MAX_CALLS_RESULT_CHARS = 500
"""Characters of each tool result shown by `marsho.calls`; the full text stays in history."""


def reply_text(t: Texts, reply: Reply, max_tool_rounds: int, max_chars: int = 0) -> str:
    """The text to send for a finished turn (with a note when it was cut at `max_chars`)."""
    text = reply.text.strip()  # reasoning was already taken out (llm.split_reasoning)
    if text:
        return f"{text}\n{t('reply.cut', limit=max_chars)}" if reply.cut else text
    if reply.hit_round_limit:
        return t("reply.round_limit", rounds=max_tool_rounds)
    return t("reply.empty")


def _registered() -> tuple[str, ...]:
    """The registry's commands in the help's order (chat/commands/, which renders its replies
    with this module: imported when first needed)."""
    from .commands import REGISTRY

    return REGISTRY.names()


def usage_text(t: Texts, names: list[str], at_enabled: bool, commands: Sequence[str] | None = None) -> str:
    """What `marsho` alone and `marsho.help` answer; `commands`: the names of those it lists, in
    its order (the registry's)."""
    name = names[0]
    lines = [t("usage.ask", name=name), t("usage.triggers", names=t.join(names))]
    if at_enabled:
        lines.append(t("usage.at"))
    lines.append(t("usage.quote"))
    commands = _registered() if commands is None else commands
    lines += [t(f"usage.{command}", name=name) for command in commands]
    return "\n".join(lines)


def unknown_command_text(t: Texts, name: str, word: str, commands: Sequence[str] | None = None) -> str:
    """What `marsho.<word>` answers when no command is called `word`: the closest command if one
    is close (difflib), then every command with what it does, the closest first; `commands`: the
    names (the registry's, in the help's order)."""
    commands = _registered() if commands is None else commands
    ratios = {command: difflib.SequenceMatcher(None, word, command).ratio() for command in commands}
    ranked = sorted(commands, key=lambda command: -ratios[command])  # ties keep the help's order
    asked = f"{name}.{word}"
    if ranked and ratios[ranked[0]] >= 0.6:  # difflib.get_close_matches' own cutoff
        head = t("command.did_you_mean", command=asked, closest=f"{name}.{ranked[0]}")
    else:
        head = t("command.unknown", command=asked)
    return "\n".join([head, *(t(f"usage.{command}", name=name) for command in ranked)])


def tools_text(
    t: Texts, toolset: Toolset, mcp_status: Mapping[str, str] | None = None, *, owner: bool = True
) -> str:
    """What `marsho.tools` answers: loaded toolkits and tools, MCP servers' states, then every
    toolkit that failed; a member (`owner` False) is not shown why a server or toolkit failed
    (a server's stderr, a path on the bot's machine), only that it did."""
    lines: list[str] = []
    if toolset.toolkits:
        lines.append(t("tools.loaded", toolkits=len(toolset.toolkits), tools=len(toolset.tools)))
        for toolkit in toolset.toolkits:
            lines.append(f"• {toolkit.name} ({toolkit.source})")
            for tool in toolkit.tools:
                who = "" if tool.permission == "everyone" else f" [{t('tools.' + tool.permission)}]"
                summary = f": {tool.summary}" if tool.summary else ""
                lines.append(f"  - {tool.name}{who}{summary}")
    else:
        lines.append(t("tools.none"))
    if mcp_status:
        states = (f"{name}: {_translated(t, state, owner)}" for name, state in mcp_status.items())
        lines.append(t("tools.mcp", servers="; ".join(states)))
    if toolset.available:
        lines.append(t("tools.available", names=t.join(toolset.available)))
    if toolset.disabled:
        lines.append(t("tools.disabled", names=t.join(toolset.disabled)))
    failed = toolset.failed_toolkits()
    if failed:
        lines.append(t("tools.failed", count=len(failed)))
        for name, problems in failed.items():
            lines.append(f"✗ {name or t('tools.toolset_folder')}")
            # the folder and file, not the server's whole path: group members read this too
            if owner:
                lines.extend(f"  - {Path(*problem.path.parts[-2:])}: {problem.message}"
                             for problem in problems)
        if not owner:
            lines.append(t("tools.failed_brief"))
    return "\n".join(lines)


def _translated(t: Texts, state: str, owner: bool = True) -> str:
    """An MCP server's state in the chat's language (it carries its catalogue code); for a
    member without the error text (a server's stderr, an address)."""
    code = getattr(state, "code", None)
    if not code:
        return state
    params = dict(getattr(state, "params", {}))
    if not owner and "error" in params:
        params["error"] = t("tools.error_hidden")
    return t(code, **params)


def calls_text(t: Texts, calls: list[dict[str, Any]], max_chars: int = MAX_CALLS_RESULT_CHARS) -> str:
    """What `marsho.calls` answers: an OpenAI-style JSON array of tool calls, each with its
    result; arguments and results cut to `max_chars` (MARSHO_CALLS_CHARS), and a call the asker
    may not see shown by its tool's name only."""
    if not calls:
        return t("calls.none")
    shown = []
    for call in calls:
        if "hidden" in call:
            hidden = t("calls.hidden_admin") if call["hidden"] == "admin" else t("calls.hidden_superuser")
            shown.append({k: v for k, v in call.items() if k != "hidden"} | {"result": hidden})
            continue
        function = dict(call.get("function") or {})
        if "arguments" in function:
            function["arguments"] = _cut(t, str(function["arguments"]), max_chars)
        result = _cut(t, str(call.get("result", "")), max_chars)
        shown.append({**call, "function": function, "result": result})
    return json.dumps(shown, ensure_ascii=False, indent=1)


def _cut(t: Texts, text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[:max_chars] + t("calls.cut", chars=len(text))


SUMMARY_SHOWN_CHARS = 600
"""Characters of the session's summary `marsho.history` shows (the rest is cut with "…")."""


def history_text(t: Texts, turns: int, messages: int, tokens: int, budget: int, counting: str,
                 summary: Summary | None = None) -> str:
    """What `marsho.history` answers: the stored turns, and the summary of those trimmed earlier."""
    if not turns:
        return t("history.empty")
    stats = t("history.stats", turns_text=t.plural("count.turns", turns),
              messages_text=t.plural("count.messages", messages), tokens=tokens, counting=counting,
              budget=budget)
    if summary is None or not summary.text:
        return stats
    text = summary.text
    if len(text) > SUMMARY_SHOWN_CHARS:
        text = text[:SUMMARY_SHOWN_CHARS] + "…"
    covered = t.plural("count.turns", summary.turns)
    return stats + "\n" + t("history.summary", turns_text=covered, summary=text)


def error_text(t: Texts, error: MarshoError) -> str:
    """An error as the people in the chat read it: in their language, with its hint."""
    if not error.code:
        return str(error)
    message = t(error.code, **error.params)
    return join_hint(message, t(error.hint, **error.params)) if error.hint else message


def brief_reason(error: BaseException | None) -> str:
    """The catalogue key of what a member is told went wrong: one sentence, without the
    endpoint's address, a server path or the upstream error text (superusers get the detail)."""
    code = getattr(error, "code", "") or ""
    if isinstance(error, StoreError):
        return "brief.database"
    if isinstance(error, BudgetError):
        return "brief.budget"
    if code.startswith("endpoint."):
        kind = code.removeprefix("endpoint.")
        return {
            "401": "brief.key", "403": "brief.key", "no_key": "brief.key", "429": "brief.busy",
            "timeout": "brief.timeout", "unreachable": "brief.down", "5xx": "brief.failed",
            "too_large": "brief.too_large", "4xx": "brief.refused",
        }.get(kind, "brief.unusable")
    return "brief.internal"


def brief_text(t: Texts, reason: str) -> str:
    """What a member reads when their question failed."""
    return t("error.brief", reason=t(reason))


def _ago(t: Texts, seconds: float) -> str:
    """How long ago, in the unit that reads best: no time zone to get wrong."""
    if seconds < 120:
        return t("status.ago_seconds", n=max(0, round(seconds)))
    if seconds < 2 * 3600:
        return t("status.ago_minutes", n=round(seconds / 60))
    return t("status.ago_hours", n=round(seconds / 3600))


def _rest_reason(t: Texts, error: MarshoError) -> str:
    """Why an endpoint rests or is skipped: the failure, without its hint ("try again in a
    moment" is what the rest does), and the wait a 429 asked for."""
    reason = t(error.code, **error.params) if error.code else str(error)
    asked = getattr(error, "retry_after", None)
    if asked is not None:
        reason = t("status.asked", reason=reason, seconds=f"{asked:g}")
    return reason


def _learned_line(t: Texts, model: str, fact: str, value: str) -> str:
    """What a model's refusal taught (agent/model/learned.py), as a line under its endpoint."""
    if fact == "stream_only":
        return t("status.learned_stream_only", model=model)
    return t("status.learned_effort", model=model, value=value)


def status_text(t: Texts, endpoints: Sequence[EndpointStatus], summaries: SummaryStatus | None = None) -> str:
    """What `marsho.status` answers (superusers): each endpoint and its keys (masked) with its
    state (why and until when it rests, is skipped or is failing), requests, errors by kind and
    latency p50/p95 over the last hour; then the summaries of trimmed history (MARSHO_SUMMARY):
    their model, requests written and failed, the last failure."""
    kinds = {
        "rate": t("status.kind.rate"), "server": t("status.kind.server"),
        "timeout": t("status.kind.timeout"), "dropped": t("status.kind.dropped"),
        "refused": t("status.kind.refused"), "empty": t("status.kind.empty"),
        "auth": t("status.kind.auth"), "not_found": t("status.kind.not_found"),
        "request": t("status.kind.request"), "unreadable": t("status.kind.unreadable"),
        "too_large": t("status.kind.too_large"), "no_key": t("status.kind.no_key"),
        "cut": t("status.kind.cut"),
    }

    def state(name: str, seconds: float, trial_in: float | None = None, trying: bool = False) -> str:
        left = f"{max(1, round(seconds))}"
        if name == "resting":
            said = t("status.resting", seconds=left)
        elif name == "set aside":
            return t("status.set_aside", seconds=left)
        elif name == "skipped":
            said = t("status.skipped", seconds=left)
        else:
            return t("status.ok")
        if trying:
            return t("status.trial", state=said, trial=t("status.trial_running"))
        if trial_in is None:
            return said
        when = t("status.trial_next") if trial_in <= 0 else t("status.trial_in", seconds=round(trial_in))
        return t("status.trial", state=said, trial=when)

    def figures(requests: int, errors: Mapping[str, int], latency: tuple[float, float] | None) -> str:
        parts = [t.plural("count.requests", requests)]
        if errors:
            parts.append(t("status.errors", errors=t.join(
                [f"{kinds.get(kind, kind)} {count}" for kind, count in sorted(errors.items())])))
        if latency is not None:
            parts.append(t("status.latency", p50=f"{latency[0]:.2f}", p95=f"{latency[1]:.2f}"))
        return ("，" if t.language == "zh-CN" else ", ").join(parts)  # a Chinese sentence takes ，

    def endpoint_line(name: str, endpoint: EndpointStatus) -> str:
        shown = state(endpoint.state, endpoint.seconds_left, endpoint.trial_in, endpoint.trying)
        if endpoint.problem is not None:  # only the owner can end it: failing until one is answered
            shown = t("status.failing_state") if endpoint.state == "ok" else shown
            reason = error_text(t, endpoint.problem)
        elif endpoint.reason is not None and endpoint.state != "ok":
            reason = _rest_reason(t, endpoint.reason)
        else:
            reason = ""
        line = t("status.endpoint", name=name, model=endpoint.model, url=endpoint.base_url, state=shown,
                 figures=figures(endpoint.requests, endpoint.errors, endpoint.latency))
        return t("status.why", line=line, reason=reason) if reason else line

    lines = [t("status.title")]
    for number, endpoint in enumerate(endpoints):
        name = t("status.primary") if number == 0 else t("status.fallback", number=number)
        lines.append(endpoint_line(name, endpoint))
        lines += [_learned_line(t, endpoint.model, fact, value) for fact, value in endpoint.learned]
        if len(endpoint.keys) > 1:
            lines += [t("status.key", key=key.masked, state=state(key.state, key.seconds_left),
                        figures=figures(key.requests, key.errors, key.latency)) for key in endpoint.keys]
    if summaries is not None:
        lines.append(t("status.summaries", model=summaries.model or t("status.summaries_chat_model"),
                       made=summaries.made, failed=summaries.failed))
        # MARSHO_SUMMARY_MODEL's own client: its endpoints (a model the endpoint does not know
        # shows as "not found" here); the chat model's requests are counted above
        lines += ["  " + endpoint_line(t("status.summaries_model"), endpoint)
                  for endpoint in summaries.endpoints]
        if summaries.last_failure_at:
            lines.append(t("status.summaries_failure", when=_ago(t, time.time() - summaries.last_failure_at),
                           reason=summaries.last_failure))
    return "\n".join(lines)
