"""The tool system's rules for names, schemas and `${NAME}`, each written once: what a tool and
a toolkit may be called, how a tool's `parameters` schema is normalised, and how config files
(webservices.json, mcp.json) take values from the environment."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo

from ..fileformat import json_type
from ..redaction import hide

# --- names -------------------------------------------------------------------------------------

TOOL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What OpenAI-compatible endpoints accept as a function name."""

SEPARATOR = "__"
"""Between toolkit and function in a tool's name, as in nonebot-plugin-marshoai's toolkits."""

MAX_TOOLKIT_NAME = 60
"""Characters of a toolkit's name, leaving room for the separator and a function's name."""

TOOLKIT_NAME_PATTERN = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_TOOLKIT_NAME}}}$")

_NAME_CHARACTERS = "letters, digits, '_' or '-' (what OpenAI-compatible endpoints accept)"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def check_toolkit_name(name: str) -> str:
    """The name, or ValueError saying (as a predicate: "must be ...") why a toolkit cannot have it."""
    if SEPARATOR in name or not TOOLKIT_NAME_PATTERN.match(name):
        raise ValueError(
            f"must be 1-{MAX_TOOLKIT_NAME} {_NAME_CHARACTERS}, without {SEPARATOR!r} (it starts "
            f"every tool name, and {SEPARATOR!r} separates it from the function's), not {name!r}"
        )
    return name


def tool_name(toolkit: str, function: str) -> str:
    """`<toolkit>__<function>` (the function alone without a toolkit), or ValueError saying, as a
    predicate of the function's name, which rule it breaks."""
    if not function:
        raise ValueError("must not be empty")
    if SEPARATOR in function:
        raise ValueError(f"must not contain {SEPARATOR!r} (it separates toolkit and function), "
                         f"not {function!r}")
    name = f"{toolkit}{SEPARATOR}{function}" if toolkit else function
    if not TOOL_NAME_PATTERN.match(name):
        made = " with the toolkit's name before it" if toolkit else ""
        raise ValueError(f"must be 1-64 {_NAME_CHARACTERS}{made}, not {name!r}")
    return name


def split_tool_name(name: str, toolkit: str) -> str:
    """The function's part of a full tool name that must belong to `toolkit`; ValueError saying
    (as a predicate) what is wrong."""
    prefix = toolkit + SEPARATOR
    if not name.startswith(prefix):
        raise ValueError(f"must start with {prefix!r} (the toolkit folder's name, two underscores, "
                         f"then the function's name), not {name!r}")
    tool_name(toolkit, name[len(prefix):])
    return name[len(prefix):]


def safe_name(text: str, limit: int) -> str:
    """`text` made a valid name part by force: other characters become '_', cut at `limit` (for
    names chosen by others, such as an MCP server's tools)."""
    return (_UNSAFE.sub("_", text) or "_")[:limit]


# --- parameter schemas -------------------------------------------------------------------------

def normalize_parameters(value: Any) -> dict[str, Any]:
    """A tool's `parameters` as the JSON Schema of an object: absent means none, "$schema" is
    dropped (every schema is read as 2020-12, which the runner validates with). ValueError
    saying (as a predicate) what is wrong."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object (a JSON Schema), not {json_type(value)}")
    schema = {key: item for key, item in value.items() if key != "$schema"}
    schema.setdefault("type", "object")
    if schema["type"] != "object":
        raise ValueError(f"must be a schema of type \"object\", not {schema['type']!r}")
    schema.setdefault("properties", {})
    from jsonschema import Draft202012Validator  # ~30 ms: only once a manifest is read
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        raise ValueError(f"is not a valid JSON Schema at {where}: {error.message}") from None
    return schema


ParametersSchema = Annotated[dict[str, Any], BeforeValidator(normalize_parameters)]
"""A model field holding a tool's `parameters`, normalised; declare it with
`Field(None, validate_default=True)` so that an absent one becomes "no parameters"."""


def parameter_warnings(schema: Mapping[str, Any]) -> list[str]:
    """What looks wrong in a valid parameters schema, without stopping the tool: 'required'
    naming a missing property, defaults that a required parameter cannot use or that do not fit."""
    warnings: list[str] = []
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return warnings
    required = schema.get("required", [])
    for missing in [name for name in required if name not in properties]:
        warnings.append(f"'required' names {missing!r}, which is not in 'properties'")
    for name, sub in properties.items():
        if isinstance(sub, Mapping) and "default" in sub:
            if name in required:
                warnings.append(f"parameter {name!r} is required and also has a default")
            from jsonschema import Draft202012Validator

            errors = list(Draft202012Validator(sub).iter_errors(sub["default"]))
            if errors:
                warnings.append(f"the default of {name!r} does not match its schema: {errors[0].message}")
    return warnings


# --- ${NAME} -----------------------------------------------------------------------------------

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""`${NAME}` in a config file's value: the environment variable NAME, so secrets stay out of it."""


class Environment:
    """Where `${NAME}` in one entry of a config file is read from, when the file is read.

    A variable that is not set is a ValueError naming it, so the entry is not loaded (unless
    `required` is false: a disabled entry keeps `${NAME}` as written). Every value put in is
    kept in `secrets`, to be redacted wherever it might show.
    """

    def __init__(self, environ: Mapping[str, str] | None = None, *, required: bool = True) -> None:
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.required = required
        self.secrets: list[str] = []

    def expand(self, text: str) -> str:
        """`text` with each `${NAME}` replaced by the variable's value."""
        missing = list(dict.fromkeys(n for n in ENV_REFERENCE.findall(text) if n not in self.environ))
        if missing and self.required:
            many = len(missing) > 1
            raise ValueError(f"uses the environment variable{'s' if many else ''} "
                             f"{', '.join(missing)}, which {'are' if many else 'is'} not set")

        def substitute(match: re.Match[str]) -> str:
            value = self.environ.get(match.group(1))
            if value is None:
                return match.group(0)
            self.secrets.append(value)
            return value

        return ENV_REFERENCE.sub(substitute, text)


def _expand(value: str, info: ValidationInfo) -> str:
    return (info.context or {})["environment"].expand(value)


Expanded = Annotated[str, AfterValidator(_expand)]
"""A string field of a config file in which `${NAME}` is expanded: the model must be validated
with `context={"environment": Environment(...)}`."""


REDACTED = "[redacted]"

MIN_SECRET = 4
"""Shorter values are not hidden: replacing every "1" or "ok" in a message would garble it."""


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each secret hidden, in every spelling redaction.py knows."""
    return hide(text, secrets, min_length=MIN_SECRET)
