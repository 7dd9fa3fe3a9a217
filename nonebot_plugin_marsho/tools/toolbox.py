"""Registering plain Python functions as tools, described by their signatures and docstrings:
`Toolbox.add` and `@toolbox.tool`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from .model import Tool
from .naming import tool_name
from .schema import (
    ToolDefinitionError,
    check_permission,
    check_presets,
    function_tool,
    read_signature,
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Registration:
    """One function registered in a Toolbox, with how it is to be offered."""

    func: Callable[..., Any]
    name: str
    description: str | None = None
    permission: str = "everyone"
    presets: dict[str, Any] = field(default_factory=dict)


class Toolbox:
    """Functions that describe themselves as tools.

    In a toolkit folder's `__init__.py` (no tools.json needed)::

        from nonebot_plugin_marsho.tools import Toolbox

        tools = Toolbox()

        @tools.tool
        async def get_weather(city: str) -> str:
            '''Get the current weather of a city.

            Args:
                city: City name, e.g. Hangzhou.
            '''

        tools.add(search, api_key="...")       # a preset: passed in, never shown to the model
    """

    def __init__(self) -> None:
        self.registrations: list[Registration] = []

    def add(
        self,
        func: F,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        permission: str = "everyone",
        **presets: Any,
    ) -> F:
        """Register `func`; keyword arguments other than the options are presets for it."""
        function: str = name or getattr(func, "__name__", None) or ""
        _checked_name("", function)
        check_permission(permission, function)
        check_presets(func, presets)
        self.registrations.append(
            Registration(func, function, description, permission, dict(presets))
        )
        return func

    @overload
    def tool(self, func: F, /) -> F: ...

    @overload
    def tool(
        self, /, *, name: str | None = None, description: str | None = None,
        permission: str = "everyone", **presets: Any,
    ) -> Callable[[F], F]: ...

    def tool(self, func: Any = None, /, **options: Any) -> Any:
        """Decorator form of `add`: `@tools.tool` or `@tools.tool(permission="superuser")`."""
        if func is not None:
            return self.add(func)
        return lambda f: self.add(f, **options)

    def registration_of(self, func: Callable[..., Any]) -> Registration | None:
        """How `func` was registered here, if it was."""
        return next((r for r in self.registrations if r.func is func), None)

    def build(self, toolkit: str = "", settings: Mapping[str, Any] | None = None) -> list[Tool]:
        """The registered functions as Tools named `<toolkit>__<name>` (plain names without a
        toolkit). `settings` (the owner's per-toolkit config) override presets by name."""
        tools = []
        for entry in self.registrations:
            presets = {**entry.presets, **_accepted(entry.func, settings or {})}
            tools.append(function_tool(
                entry.func,
                name=_checked_name(toolkit, entry.name),
                description=entry.description,
                permission=entry.permission,
                presets=presets,
                toolkit=toolkit,
            ))
        return tools


def _checked_name(toolkit: str, function: str) -> str:
    """The tool's full name, or a ToolDefinitionError saying which rule it breaks."""
    try:
        return tool_name(toolkit, function)
    except ValueError as error:
        raise ToolDefinitionError(f"the tool name {error}") from None


def _accepted(func: Callable[..., Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    names = read_signature(func).names
    return {key: value for key, value in settings.items() if key in names}
