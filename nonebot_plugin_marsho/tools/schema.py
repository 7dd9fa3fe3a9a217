"""Describe a Python function as a tool: JSON schema from its type hints through
pydantic, descriptions from its Google, reST or numpydoc docstring through docstring-parser."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from .model import PERMISSIONS, Permission, Tool, ToolContext


class ToolDefinitionError(ValueError):
    """A function cannot be made into a tool; the message says which parameter and why."""


@dataclass(frozen=True)
class Signature:
    """What a function accepts, as far as calling it as a tool goes."""

    names: frozenset[str]
    required: frozenset[str]
    takes_kwargs: bool
    context_param: str | None

    def accepts(self, name: str) -> bool:
        """True when `name=` can be passed to the function."""
        return self.takes_kwargs or name in self.names


def _is_context(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    return any(arg is ToolContext for arg in typing.get_args(annotation))


def _type_hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception as error:  # an unresolvable forward reference, a typo in a hint
        raise ToolDefinitionError(
            f"the type hints of {func.__name__}() cannot be resolved: {type(error).__name__}: {error}"
        ) from None


def read_signature(func: Callable[..., Any]) -> Signature:
    """The parameters of `func`; which one (if any) takes the ToolContext."""
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError) as error:
        raise ToolDefinitionError(f"the signature of {func!r} cannot be read: {error}") from None
    hints = _type_hints(func)
    names: set[str] = set()
    required: set[str] = set()
    takes_kwargs = False
    context_param = None
    for name, param in parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            takes_kwargs = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"parameter {name!r} of {func.__name__}() is positional-only; tools are called "
                "with keyword arguments"
            )
        if _is_context(hints.get(name)):
            context_param = name
            continue
        names.add(name)
        if param.default is inspect.Parameter.empty:
            required.add(name)
    return Signature(frozenset(names), frozenset(required), takes_kwargs, context_param)


_VALUE_KEYWORDS = frozenset({"default", "const", "enum", "examples"})
"""Keywords whose values are data, not schema: copied as they are."""


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's "title" keys (tokens the model does not need); keep properties named so."""
    if isinstance(schema, dict):
        return {
            key: (
                value if key in _VALUE_KEYWORDS
                else {name: _strip_titles(sub) for name, sub in value.items()}
                if key in ("properties", "$defs") and isinstance(value, dict)
                else _strip_titles(value)
            )
            for key, value in schema.items()
            if key != "title"
        }
    if isinstance(schema, list):
        return [_strip_titles(item) for item in schema]
    return schema


def describe_function(
    func: Callable[..., Any], *, hidden: Iterable[str] = ()
) -> tuple[str, dict[str, Any], type[BaseModel]]:
    """(description, JSON schema of the parameters, pydantic model that reads the arguments).

    Parameters named in `hidden` (presets) and the ToolContext parameter are left out.
    """
    hidden = set(hidden)
    signature = read_signature(func)
    hints = _type_hints(func)
    import docstring_parser  # here, not at import: tools are described when toolkits load

    doc = docstring_parser.parse(inspect.getdoc(func) or "")
    param_docs = {param.arg_name: param.description for param in doc.params}
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(func).parameters.items():
        if name not in signature.names or name in hidden:
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (hints.get(name, Any), Field(default, description=param_docs.get(name)))
    try:
        model = create_model(  # type: ignore[call-overload]
            f"{func.__name__}_arguments", __config__=ConfigDict(extra="ignore"), **fields
        )
        schema = model.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as error:
        first_line = str(error).strip().splitlines()[0]
        raise ToolDefinitionError(
            f"the parameters of {func.__name__}() cannot be described as JSON Schema "
            f"({first_line}); use str, int, float, bool, Literal, Enum, list, dict, Optional "
            "or a pydantic model"
        ) from None
    schema = _strip_titles(schema)
    schema.setdefault("properties", {})
    description = "\n\n".join(
        part for part in (doc.short_description, doc.long_description) if part
    ).strip()
    return description, schema, model


def check_permission(permission: str, where: str) -> Permission:
    """The permission, or a ToolDefinitionError naming the allowed values."""
    if permission not in PERMISSIONS:
        raise ToolDefinitionError(
            f"{where}: permission {permission!r} is not one of {', '.join(PERMISSIONS)}"
        )
    return permission  # type: ignore[return-value]


def check_presets(func: Callable[..., Any], presets: Mapping[str, Any]) -> None:
    """Every preset must name a parameter of `func`."""
    signature = read_signature(func)
    unknown = [name for name in presets if not signature.accepts(name)]
    if unknown:
        raise ToolDefinitionError(
            f"preset {', '.join(map(repr, unknown))} is not a parameter of {func.__name__}()"
        )


def function_tool(
    func: Callable[..., Any],
    *,
    name: str,
    description: str | None = None,
    permission: str = "everyone",
    presets: Mapping[str, Any] | None = None,
    toolkit: str = "",
) -> Tool:
    """A Tool described by the function itself: name, docstring, type hints."""
    presets = dict(presets or {})
    check_presets(func, presets)
    doc_description, parameters, model = describe_function(func, hidden=presets)
    description = description if description is not None else doc_description
    if not description:
        raise ToolDefinitionError(
            f"{func.__name__}() has no docstring: say in one line what it does, so the model "
            "knows when to call it"
        )
    return Tool(
        name=name,
        description=description,
        parameters=parameters,
        func=func,
        toolkit=toolkit,
        permission=check_permission(permission, name),
        presets=presets,
        context_param=read_signature(func).context_param,
        arguments_model=model,
    )
