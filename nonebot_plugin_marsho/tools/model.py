"""The small vocabulary of the tool system: tools, toolkits, calls, results, load problems."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .naming import SEPARATOR, TOOL_NAME_PATTERN  # noqa: F401 - re-exported: callers import them from here


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: its id, the tool's name, the arguments as raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        """The call as it appears in an assistant message (and in `Conversation.get_tool_calls`)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


ResultStatus = Literal[
    "ok", "unknown_tool", "bad_arguments", "denied", "timeout", "error"
]


@dataclass(frozen=True)
class ToolResult:
    """What one call produced: the text the model reads and whether the call succeeded."""

    call_id: str
    name: str
    content: str
    status: ResultStatus = "ok"
    seconds: float = 0.0
    images: tuple[bytes, ...] = ()
    """Pictures for the chat (PNG, JPEG...), sent beside the answer; the model reads `content`."""

    @property
    def ok(self) -> bool:
        """True when the tool ran and returned normally."""
        return self.status == "ok"

    def to_message(self) -> dict[str, Any]:
        """The `tool` message that answers the call with this id."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}


Permission = Literal["everyone", "admin", "superuser"]
"""Who may use a tool: anyone, group admins and owners (and superusers), or superusers only."""

PERMISSIONS: tuple[Permission, ...] = ("everyone", "admin", "superuser")

Role = Literal["member", "admin", "owner", "superuser"]
"""Who is asking: a group member, a group admin, the group owner, or one of the bot's SUPERUSERS."""

_ROLE_RANK: dict[str, int] = {"member": 0, "admin": 1, "owner": 1, "superuser": 2}
_PERMISSION_RANK: dict[str, int] = {"everyone": 0, "admin": 1, "superuser": 2}


@dataclass
class Tool:
    """A function the model may call: what it sees (name, description, schema) and how it runs.

    `presets` are arguments bound by the bot owner (API keys...): passed to the function, never
    shown to the model. `context_param` names the parameter that receives the ToolContext.
    `arguments_model` turns the model's JSON into the function's Python types.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    func: Callable[..., Any]
    toolkit: str = ""
    permission: Permission = "everyone"
    presets: dict[str, Any] = field(default_factory=dict, repr=False)
    context_param: str | None = None
    arguments_model: Any = None
    keeps_result: bool = True
    """False: what the tool returned is for the turn that called it only; stored history keeps a
    placeholder (memory__recall: a shared conversation's next asker may not see those memories)."""
    offered: Callable[[ToolContext], bool] | None = field(default=None, repr=False, compare=False)
    """Where the tool is offered, decided per turn from its ToolContext (the group tools: in a
    group, on a platform that has the calls, that has not turned them off); None: wherever its
    permission allows. Where it is not offered it is neither shown to the model nor run."""
    not_offered: str = ""
    """Why a call where the tool is not offered does nothing, for its result ("the group tools
    work only in group chats ..."); empty: a general sentence."""

    @property
    def summary(self) -> str:
        """The first line of the description, for listings."""
        lines = self.description.strip().splitlines()
        return lines[0] if lines else ""

    def summary_in(self, language: str) -> str:
        """The summary in `language` for listings, where i18n's TOOL_SUMMARIES has it (the
        built-in tools'); the model always reads `description`."""
        from ..i18n import TOOL_SUMMARIES

        return TOOL_SUMMARIES.get(language, {}).get(self.summary, self.summary)  # type: ignore[call-overload]

    @property
    def is_async(self) -> bool:
        """True when calling the function returns a coroutine to await."""
        return inspect.iscoroutinefunction(self.func)

    def schema(self) -> dict[str, Any]:
        """The entry for the request's `tools` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass
class Toolkit:
    """A toolkit folder that loaded: its name, where it lives, and its tools."""

    name: str
    path: Path | None = None
    tools: list[Tool] = field(default_factory=list)
    source: str = ""
    sends: str = ""
    """What the toolkit sends out of the bot, and to whom (empty: nothing)."""


@dataclass(frozen=True)
class LoadProblem:
    """Something wrong with a toolkit: where (file, line) and what; errors skip the toolkit."""

    toolkit: str
    path: Path
    message: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class ToolContext:
    """Who asks and where: handed to tools that declare a parameter of this type, never shown
    to the model, and used to check each tool's permission."""

    session_key: str = ""
    user_id: str = ""
    group_id: str | None = None
    role: Role = "member"
    bot: Any = None
    event: Any = None
    platform: str = ""
    """Whose ids these are ("OneBot V11", "Telegram", "Satori/discord"...); "" outside a chat
    (the CLI)."""
    chat_key: str = ""
    """The chat asked in: the group's (or guild channel's) key, or the private chat's
    (`X:private:<user>`), whatever MARSHO_SESSION_SCOPE; "" outside a chat."""
    personal: bool = True
    """False when the turn is not the asker's own: an unsolicited reply to a message not
    addressed to marsho, or an anonymous sender (who cannot be told apart). Nothing about the
    person is then remembered or recalled (memory)."""

    def may_use(self, tool: Tool) -> bool:
        """True when the tool is offered here and the asker's role reaches its permission."""
        if tool.offered is not None and not tool.offered(self):
            return False
        return _ROLE_RANK.get(self.role, 0) >= _PERMISSION_RANK.get(tool.permission, 2)


OWNER_CONTEXT = ToolContext(session_key="local", role="superuser")
"""For the bot owner's own use (the CLI): every tool allowed."""


@dataclass(frozen=True)
class ToolResponse:
    """A tool's answer with a status (like AgentScope's ServiceResponse): an error reaches the model
    as an error, and the turn goes on."""

    status: Literal["success", "error"]
    content: Any
    images: tuple[bytes, ...] = ()
    """Pictures (PNG, JPEG...) to send into the chat beside the answer."""

    @classmethod
    def success(cls, content: Any, images: Sequence[bytes] = ()) -> ToolResponse:
        """The tool did its job; `content` is what the model reads, `images` go to the chat."""
        return cls("success", content, tuple(images))

    @classmethod
    def error(cls, message: Any) -> ToolResponse:
        """The tool failed; `message` says why, in words the model can relay."""
        return cls("error", message)


@dataclass
class Toolset:
    """Every loaded toolkit, its tools by name, and the problems met while loading."""

    toolkits: list[Toolkit] = field(default_factory=list)
    problems: list[LoadProblem] = field(default_factory=list)
    tools: dict[str, Tool] = field(default_factory=dict)
    disabled: list[str] = field(default_factory=list)
    available: dict[str, str] = field(default_factory=dict)
    """Toolkits that are off until enabled (MARSHO_ENABLED_TOOLKITS), with what they send out."""

    def add(self, toolkit: Toolkit) -> None:
        """Register a toolkit whose tool names were already checked to be free."""
        self.toolkits.append(toolkit)
        for tool in toolkit.tools:
            self.tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool of that name, if loaded."""
        return self.tools.get(name)

    def may_see(self, name: str, context: ToolContext | None) -> bool:
        """Whether the asker may read what the tool `name` returned (and how it was called): as
        they may use it; a tool no longer loaded, only superusers."""
        asker = context or ToolContext()
        tool = self.tools.get(name)
        return asker.may_use(tool) if tool is not None else asker.role == "superuser"

    def schemas(self, context: ToolContext | None = None) -> list[dict[str, Any]]:
        """The request's `tools` list: every tool the asker may use (a plain member, if unknown),
        sorted by name, so the list is the same from turn to turn whatever order the toolkits and
        MCP servers came in (it is part of the prompt's start that providers cache)."""
        asker = context or ToolContext()
        return [tool.schema() for tool in sorted(self.tools.values(), key=lambda tool: tool.name)
                if asker.may_use(tool)]

    @property
    def errors(self) -> list[LoadProblem]:
        """Problems that kept a toolkit from loading."""
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[LoadProblem]:
        """Problems that were repaired; the toolkit loaded."""
        return [p for p in self.problems if p.severity == "warning"]

    def listed_in(self, language: str) -> Toolset:
        """A copy for a listing (`marsho.tools`) whose tools read their summary in `language`;
        the toolset itself, which the model's requests come from, is left as it is."""
        toolkits = [dataclasses.replace(kit, tools=[
            dataclasses.replace(tool, description=tool.summary_in(language)) for tool in kit.tools])
            for kit in self.toolkits]
        listed = dataclasses.replace(self, toolkits=toolkits, tools={})
        for kit in toolkits:
            listed.tools.update((tool.name, tool) for tool in kit.tools)
        return listed

    def failed_toolkits(self) -> dict[str, list[LoadProblem]]:
        """Toolkits that did not load, each with its errors."""
        failed: dict[str, list[LoadProblem]] = {}
        for problem in self.errors:
            failed.setdefault(problem.toolkit, []).append(problem)
        return failed
