"""Web services as tools (seed 004): a JSON file of services, each a URL the arguments are POSTed to.

The file (comments allowed)::

    {
      "toolkit": "services",
      "tools": [
        {
          "name": "sales",
          "description": "Monthly sales of a shop, as a chart",
          "url": "https://example.com/sales",
          "parameters": {"type": "object",
                         "properties": {"shop": {"type": "string"},
                                        "months": {"type": "integer", "default": 12}},
                         "required": ["shop"]},
          "headers": {"Authorization": "Bearer ${SALES_API_KEY}"},
          "timeout": 15,
          "permission": "everyone"
        }
      ]
    }

Each entry becomes the tool `<toolkit>__<name>`. A call POSTs the arguments as a JSON object,
defaults of omitted optional parameters filled in; `${NAME}` in a header value is the environment
variable NAME, read at call time (header values never appear in results or logs). The answer is
`{"type": "markdown", "data": "...", "desc": "..."}` (the model reads the text) or
`{"type": "chart", "chart_type": "bar|pie|line|candlestick", "data": [...], "field_headers": [...],
"dimension": "...", "desc": "..."}` (the chart goes to the chat as a PNG; the model reads a
summary). Whatever a service gets wrong becomes an error result for the model and a log line.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from nonebot.log import logger

from . import charts
from .loader import TOOLKIT_NAME_PATTERN, strip_json_comments
from .model import (
    PERMISSIONS,
    SEPARATOR,
    TOOL_NAME_PATTERN,
    LoadProblem,
    Tool,
    Toolkit,
    ToolResponse,
)

DEFAULT_TOOLKIT = "services"
DEFAULT_TIMEOUT = 15.0
MAX_TIMEOUT = 600.0
MAX_RESPONSE_BYTES = 1_000_000
"""A service's answer is read up to this size; a longer one is an error (read streamed)."""

ERROR_EXCERPT = 300
"""Characters of an HTTP error's body quoted in the result."""

USER_AGENT = "nonebot-plugin-marsho (web service tools)"

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

_TOP_KEYS = {"toolkit", "tools", "$schema", "comment"}
_ENTRY_KEYS = {"name", "description", "url", "parameters", "headers", "timeout", "permission",
               "comment"}


class ServiceError(Exception):
    """A service's answer is unusable; the message says why, for the model and the log."""


# --- calling a service -------------------------------------------------------------------------

def fill_defaults(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with the schema's `default` of every omitted property, nested objects too."""
    filled = dict(arguments)
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return filled
    for name, sub in properties.items():
        if not isinstance(sub, Mapping):
            continue
        if name not in filled:
            if "default" in sub:
                filled[name] = copy.deepcopy(sub["default"])
        elif isinstance(filled[name], Mapping) and isinstance(sub.get("properties"), Mapping):
            filled[name] = fill_defaults(filled[name], sub)
    return filled


def resolve_headers(
    headers: Mapping[str, str], environ: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """(headers with `${NAME}` replaced from `environ`, names of the variables that are not set)."""
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        value = environ.get(match.group(1))
        if value is None:
            missing.append(match.group(1))
            return ""
        return value

    resolved = {name: ENV_REFERENCE.sub(substitute, value) for name, value in headers.items()}
    return resolved, list(dict.fromkeys(missing))


_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def _valid_header_value(value: str) -> bool:
    """True when HTTP allows the value: printable Latin-1 and tabs, no line breaks."""
    return _HEADER_VALUE.fullmatch(value) is not None


def _redact(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return text


def _excerpt(body: bytes, limit: int = ERROR_EXCERPT) -> str:
    text = " ".join(body.decode("utf-8", errors="replace").split())
    return text if len(text) <= limit else text[:limit] + "…"


def _json_type(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            type(None): "null", dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


@dataclass
class WebService:
    """One configured service; `call(arguments)` is what the tool runs."""

    tool_name: str
    url: str
    parameters: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False)
    max_bytes: int = MAX_RESPONSE_BYTES

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    async def call(self, arguments: Mapping[str, Any]) -> ToolResponse:
        """POST the arguments; the answer as the model should read it, never raising for the
        service's faults."""
        secrets: list[str] = []
        try:
            headers, missing = resolve_headers(self.headers, self.environ)
            secrets = [v for v in headers.values() if len(v) >= 4]
            if missing:
                raise ServiceError(
                    f"cannot be called: its header(s) need the environment variable(s) "
                    f"{', '.join(missing)}, which are not set. Tell the bot's owner."
                )
            invalid = [name for name, value in headers.items() if not _valid_header_value(value)]
            if invalid:  # named, never quoted: the value may be a secret
                raise ServiceError(
                    f"cannot be called: the value of its header(s) {', '.join(invalid)} holds line "
                    "breaks, control or non-Latin-1 characters. Tell the bot's owner."
                )
            body = json.dumps(fill_defaults(arguments, self.parameters), ensure_ascii=False)
            try:
                status, reason, content_type, data = await asyncio.wait_for(
                    self._post(headers, body.encode("utf-8")), self.timeout
                )
            except (asyncio.TimeoutError, httpx.TimeoutException):
                raise ServiceError(f"did not answer within {self.timeout:g} s") from None
            except httpx.ConnectError as error:
                raise ServiceError(f"could not be reached ({_describe(error)})") from None
            except httpx.LocalProtocolError:  # its message may quote a header
                raise ServiceError("could not be called: the request was refused by the HTTP "
                                   "client (a header may be invalid)") from None
            except (httpx.HTTPError, httpx.StreamError, OSError) as error:
                raise ServiceError(f"failed: {_describe(error)}") from None
            if not 200 <= status < 300:
                excerpt = _excerpt(data)
                raise ServiceError(
                    f"answered HTTP {status} {reason}".rstrip()
                    + (f": {excerpt}" if excerpt else " with an empty body")
                )
            return await self._answer(self._parse(data, content_type))
        except ServiceError as error:
            message = _redact(f"the web service {self.tool_name} {error}", secrets)
            logger.warning(f"marsho: {message} (host {self.host})")
            return ToolResponse.error(message)

    async def _post(self, headers: dict[str, str], body: bytes) -> tuple[int, str, str, bytes]:
        """(status, reason, content type, body) of the POST, the body read up to the cap."""
        request_headers = {"User-Agent": USER_AGENT, **headers, "Content-Type": "application/json"}
        try:
            client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout), follow_redirects=False)
        except Exception as error:  # pragma: no cover - a broken TLS or proxy set-up
            raise ServiceError(f"could not be called: {_describe(error)}") from None
        async with client:
            try:
                request = client.build_request("POST", self.url, content=body, headers=request_headers)
            except (ValueError, TypeError, httpx.HTTPError):
                # do not echo the error: it may quote a header's value
                raise ServiceError("could not be called: a header name or value is not valid. "
                                   "Tell the bot's owner.") from None
            response = await client.send(request, stream=True)
            try:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self.max_bytes:
                    raise ServiceError(self._too_big(f"{int(declared)} bytes"))
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise ServiceError(self._too_big(f"more than {self.max_bytes} bytes"))
            finally:
                await response.aclose()
            return (response.status_code, response.reason_phrase,
                    response.headers.get("content-type", ""), bytes(data))

    def _too_big(self, size: str) -> str:
        return f"answered with {size}; at most {self.max_bytes} bytes are read"

    def _parse(self, data: bytes, content_type: str) -> dict[str, Any]:
        """The answer as a checked JSON object."""
        try:
            answer = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            media = f" ({content_type.split(';')[0]})" if content_type else ""
            excerpt = _excerpt(data, 200)
            raise ServiceError(
                f"answered with something that is not JSON{media}"
                + (f": {excerpt}" if excerpt else ": an empty body")
            ) from None
        if not isinstance(answer, dict):
            raise ServiceError(f"answered with {_json_type(answer)}, not a JSON object with "
                               "'type', 'data' and 'desc'")
        kind = answer.get("type")
        if kind is None:
            raise ServiceError("answered without 'type' (it must be \"markdown\" or \"chart\")")
        if not isinstance(kind, str) or kind.strip().lower() not in ("markdown", "chart"):
            raise ServiceError(f"answered with the unknown type {kind!r} (expected \"markdown\" "
                               "or \"chart\")")
        if "data" not in answer:
            raise ServiceError("answered without 'data'")
        desc = answer.get("desc")
        if desc is not None and not isinstance(desc, str):
            raise ServiceError(f"answered with a 'desc' that is {_json_type(desc)}, not a string")
        if desc is None:
            logger.debug(f"marsho: the web service {self.tool_name} answered without 'desc'")
        return answer

    async def _answer(self, answer: dict[str, Any]) -> ToolResponse:
        kind = answer["type"].strip().lower()
        desc = (answer.get("desc") or "").strip()
        extra = answer.get("markdown")
        if kind == "markdown":
            data = answer["data"]
            if isinstance(data, str):
                text = data
            elif isinstance(extra, str):
                text = extra
            elif data is None:
                raise ServiceError("answered with type markdown but 'data' is null")
            else:  # not what seed 004 says, but still readable
                text = json.dumps(data, ensure_ascii=False)
            return ToolResponse.success(text if not desc else f"{text}\n\n(About this answer: {desc})")
        chart_type = answer.get("chart_type")
        if chart_type is None:
            raise ServiceError("answered with type chart but without 'chart_type' "
                               f"({', '.join(charts.CHART_TYPES)})")
        if not isinstance(chart_type, str) or chart_type.strip().lower() not in charts.CHART_TYPES:
            raise ServiceError(f"answered with the unknown chart_type {chart_type!r} (expected "
                               f"{', '.join(charts.CHART_TYPES)})")
        chart_type = chart_type.strip().lower()
        headers = answer.get("field_headers")
        if headers is not None and not isinstance(headers, list):
            raise ServiceError(f"answered with 'field_headers' that is {_json_type(headers)}, "
                               "not a list")
        dimension = answer.get("dimension")
        if dimension is not None and not isinstance(dimension, str):
            dimension = str(dimension)
        try:
            table = charts.read_table(answer["data"], headers)
        except charts.ChartDataError as error:
            raise ServiceError(f"answered with chart data that cannot be drawn: {error}") from None
        summary = charts.summarize_chart(chart_type, table, dimension, desc)
        if isinstance(extra, str) and extra.strip():
            summary += f"\n\nThe service also wrote:\n{extra.strip()}"
        try:
            png = await asyncio.to_thread(charts.render_table, chart_type, table, dimension, desc)
        except charts.ChartDataError as error:
            raise ServiceError(f"answered with chart data that cannot be drawn: {error}") from None
        except Exception as error:  # a matplotlib bug or odd data: the numbers still help
            logger.warning(f"marsho: the chart of the web service {self.tool_name} could not be "
                           f"drawn: {_describe(error)}")
            summary = summary.replace(" and is shown to the user as a picture beside your answer",
                                      "") + f"\n(The chart could not be drawn: {_describe(error)})"
            return ToolResponse.success(summary)
        return ToolResponse.success(summary, images=[png])


def _describe(error: BaseException) -> str:
    message = str(error).strip()
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


# --- the config file ---------------------------------------------------------------------------

def _problem(problems: list[LoadProblem], toolkit: str, path: Path, message: str,
             severity: str = "error") -> None:
    problems.append(LoadProblem(toolkit, path, message, severity))  # type: ignore[arg-type]


def _read_parameters(value: Any, where: str) -> tuple[dict[str, Any] | None, str, list[str]]:
    """(schema, error, warnings)."""
    if value is None:
        return {"type": "object", "properties": {}}, "", []
    if not isinstance(value, dict):
        return None, f"{where}: 'parameters' must be a JSON Schema object, not {_json_type(value)}", []
    schema = dict(value)
    schema.setdefault("type", "object")
    if schema["type"] != "object":
        return None, f"{where}: 'parameters' must be a schema of type \"object\", not {schema['type']!r}", []
    schema.setdefault("properties", {})
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        at = "/".join(str(p) for p in error.absolute_path) or "(top)"
        return None, f"{where}: 'parameters' is not a valid JSON Schema at {at}: {error.message}", []
    warnings: list[str] = []
    properties = schema.get("properties") or {}
    for missing in [r for r in schema.get("required", []) if r not in properties]:
        warnings.append(f"{where}: 'required' names {missing!r}, which is not in 'properties'")
    for name, sub in properties.items():
        if isinstance(sub, dict) and "default" in sub:
            if name in schema.get("required", []):
                warnings.append(f"{where}: parameter {name!r} is required and also has a default")
            errors = list(Draft202012Validator(sub).iter_errors(sub["default"]))
            if errors:
                warnings.append(f"{where}: the default of {name!r} does not match its schema: "
                                f"{errors[0].message}")
    return schema, "", warnings


def _read_entry(
    index: int, entry: Any, toolkit: str, path: Path, environ: Mapping[str, str],
    problems: list[LoadProblem],
) -> Tool | None:
    where = f"tools[{index}]"
    if not isinstance(entry, dict):
        _problem(problems, toolkit, path, f"{where}: must be a JSON object, not {_json_type(entry)}")
        return None
    name = entry.get("name")
    if isinstance(name, str) and name:
        where = f"tools[{index}] ({name})"
    if not isinstance(name, str) or not name:
        _problem(problems, toolkit, path, f"{where}: 'name' is missing or not a string")
        return None
    full_name = f"{toolkit}{SEPARATOR}{name}"
    if SEPARATOR in name or not TOOL_NAME_PATTERN.match(name) or not TOOL_NAME_PATTERN.match(full_name):
        _problem(problems, toolkit, path,
                 f"{where}: the tool name {full_name!r} must be 1-64 letters, digits, '_' or '-', "
                 f"with no '{SEPARATOR}' inside {name!r}")
        return None
    for key in sorted(set(entry) - _ENTRY_KEYS):
        _problem(problems, toolkit, path, f"{where}: unknown key {key!r} is ignored (known: "
                 f"{', '.join(sorted(_ENTRY_KEYS - {'comment'}))})", "warning")
    description = entry.get("description", "")
    if not isinstance(description, str):
        _problem(problems, toolkit, path, f"{where}: 'description' must be a string")
        return None
    if not description.strip():
        _problem(problems, toolkit, path,
                 f"{where}: no 'description'; the model will not know when to call it", "warning")
    url = entry.get("url")
    if not isinstance(url, str) or not url.strip():
        _problem(problems, toolkit, path, f"{where}: 'url' is missing or not a string")
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        _problem(problems, toolkit, path,
                 f"{where}: 'url' must be an http:// or https:// address with a host, not {url!r}")
        return None
    try:
        httpx.URL(url.strip())
    except (httpx.InvalidURL, ValueError) as error:
        _problem(problems, toolkit, path, f"{where}: 'url' is not a valid address: {error}")
        return None
    parameters, schema_error, warnings = _read_parameters(entry.get("parameters"), where)
    if parameters is None:
        _problem(problems, toolkit, path, schema_error)
        return None
    for warning in warnings:
        _problem(problems, toolkit, path, warning, "warning")
    headers = entry.get("headers", {})
    if headers is None:
        headers = {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        _problem(problems, toolkit, path,
                 f"{where}: 'headers' must be an object of strings, e.g. "
                 "{\"Authorization\": \"Bearer ${MY_API_KEY}\"}")
        return None
    bad_names = [k for k in headers if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", k)]
    if bad_names:
        _problem(problems, toolkit, path, f"{where}: header name(s) {', '.join(map(repr, bad_names))} "
                 "are not valid HTTP header names")
        return None
    literal = {k: ENV_REFERENCE.sub("", v) for k, v in headers.items()}
    bad_values = [k for k, v in literal.items() if not _valid_header_value(v)]
    if bad_values:
        _problem(problems, toolkit, path, f"{where}: the value of header(s) "
                 f"{', '.join(map(repr, bad_values))} holds line breaks, control or non-Latin-1 "
                 "characters")
        return None
    _, missing = resolve_headers(headers, environ)
    if missing:
        _problem(problems, toolkit, path,
                 f"{where}: its headers use the environment variable(s) {', '.join(missing)}, which "
                 "are not set; calls will fail until they are", "warning")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
        0 < timeout <= MAX_TIMEOUT
    ):
        _problem(problems, toolkit, path,
                 f"{where}: 'timeout' must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, "
                 f"not {timeout!r}")
        return None
    permission = entry.get("permission", "everyone")
    if permission not in PERMISSIONS:
        _problem(problems, toolkit, path,
                 f"{where}: 'permission' must be one of {', '.join(PERMISSIONS)}, not {permission!r}")
        return None
    service = WebService(
        tool_name=full_name, url=url.strip(), parameters=parameters, headers=dict(headers),
        timeout=float(timeout), environ=environ,
    )

    async def call(**arguments: Any) -> ToolResponse:
        return await service.call(arguments)

    call.__name__ = full_name
    call.__qualname__ = full_name
    call.service = service  # type: ignore[attr-defined]
    return Tool(
        name=full_name,
        description=description,
        parameters=parameters,
        func=call,
        toolkit=toolkit,
        permission=permission,
    )


def load_webservices(
    path: Path, *, environ: Mapping[str, str] = os.environ
) -> tuple[Toolkit | None, list[LoadProblem]]:
    """The services of the file at `path` as a Toolkit, and the problems met.

    A missing file means no services: (None, []). A broken entry is skipped with an error naming
    the file and the entry; the others still load. None when no service loaded.
    """
    path = Path(path)
    problems: list[LoadProblem] = []
    if not path.exists():
        return None, []
    toolkit = DEFAULT_TOOLKIT
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        _problem(problems, toolkit, path, f"cannot be read: {error}")
        return None, problems
    try:
        data = json.loads(strip_json_comments(text))
    except json.JSONDecodeError as error:
        _problem(problems, toolkit, path,
                 f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}")
        return None, problems
    if not isinstance(data, dict):
        _problem(problems, toolkit, path,
                 "must be a JSON object such as {\"toolkit\": \"services\", \"tools\": [...]}")
        return None, problems
    name = data.get("toolkit", DEFAULT_TOOLKIT)
    if not isinstance(name, str) or not TOOLKIT_NAME_PATTERN.match(name) or SEPARATOR in name:
        _problem(problems, toolkit, path,
                 f"'toolkit' must be 1-60 letters, digits, '_' or '-' without '{SEPARATOR}', not {name!r}")
        return None, problems
    toolkit = name
    for key in sorted(set(data) - _TOP_KEYS):
        _problem(problems, toolkit, path, f"unknown key {key!r} is ignored (known: toolkit, tools)",
                 "warning")
    entries = data.get("tools")
    if not isinstance(entries, list):
        _problem(problems, toolkit, path, "'tools' must be a list of services"
                 + (" (it is missing)" if entries is None else f", not {_json_type(entries)}"))
        return None, problems
    tools: list[Tool] = []
    for index, entry in enumerate(entries):
        tool = _read_entry(index, entry, toolkit, path, environ, problems)
        if tool is None:
            continue
        if any(t.name == tool.name for t in tools):
            _problem(problems, toolkit, path, f"tools[{index}] ({tool.name}): a service of this name "
                     "is already defined above; rename one")
            continue
        tools.append(tool)
    if not tools:
        if not any(p.severity == "error" for p in problems):
            _problem(problems, toolkit, path, "defines no services", "warning")
        return None, problems
    return Toolkit(name=toolkit, path=path, tools=tools, source=str(path)), problems
