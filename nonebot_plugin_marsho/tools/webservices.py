"""Web services as tools, the contract of chat platforms' "web service plugins": the arguments
are POSTed as JSON, the answer is markdown or a chart. A JSON file lists the services::

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
variable NAME, read with the file (a service whose variable is not set is not loaded; the values
never appear in results or logs). The answer is
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
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..fileformat import FileFormatError, entry_label, json_type, read_file, validate
from ..redaction import logger
from .model import LoadProblem, Permission, Tool, Toolkit, ToolResponse
from .naming import (
    Environment,
    Expanded,
    ParametersSchema,
    check_toolkit_name,
    parameter_warnings,
    redact,
    tool_name,
)

DEFAULT_TOOLKIT = "services"
DEFAULT_TIMEOUT = 15.0
MAX_TIMEOUT = 600.0
MAX_RESPONSE_BYTES = 1_000_000
"""A service's answer is read up to this size; a longer one is an error (read streamed)."""

ERROR_EXCERPT = 300
"""Characters of an HTTP error's body quoted in the result."""

USER_AGENT = "nonebot-plugin-marsho (web service tools)"


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


_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def _valid_header_value(value: str) -> bool:
    """True when HTTP allows the value: printable Latin-1 and tabs, no line breaks."""
    return _HEADER_VALUE.fullmatch(value) is not None


def _excerpt(body: bytes, limit: int = ERROR_EXCERPT) -> str:
    text = " ".join(body.decode("utf-8", errors="replace").split())
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass
class WebService:
    """One configured service; `call(arguments)` is what the tool runs."""

    tool_name: str
    url: str
    parameters: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """As sent: `${NAME}` already replaced when the file was read."""
    timeout: float = DEFAULT_TIMEOUT
    max_bytes: int = MAX_RESPONSE_BYTES
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Values hidden from results and logs: those of `${NAME}`, and every header value."""

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    async def call(self, arguments: Mapping[str, Any]) -> ToolResponse:
        """POST the arguments; the answer as the model should read it, never raising for the
        service's faults."""
        try:
            body = json.dumps(fill_defaults(arguments, self.parameters), ensure_ascii=False)
            try:
                status, reason, content_type, data = await asyncio.wait_for(
                    self._post(self.headers, body.encode("utf-8")), self.timeout
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
            message = redact(f"the web service {self.tool_name} {error}", self.secrets)
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
            raise ServiceError(f"answered with {json_type(answer)}, not a JSON object with "
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
            raise ServiceError(f"answered with a 'desc' that is {json_type(desc)}, not a string")
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
            else:  # not what the contract says, but still readable
                text = json.dumps(data, ensure_ascii=False)
            return ToolResponse.success(text if not desc else f"{text}\n\n(About this answer: {desc})")
        from . import charts  # here, not at import: only a chart answer needs it (issue 30)

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
            raise ServiceError(f"answered with 'field_headers' that is {json_type(headers)}, "
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

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _header_name(name: str) -> str:
    if not _HEADER_NAME.fullmatch(name):
        raise ValueError("is not a valid HTTP header name")
    return name


def _header_value(value: str) -> str:
    if not _valid_header_value(value):  # named, never quoted: the value may be a secret
        raise ValueError("holds line breaks, control or non-Latin-1 characters")
    return value


def _timeout(seconds: float) -> float:
    if not 0 < seconds <= MAX_TIMEOUT:
        raise ValueError(f"must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, "
                         f"not {seconds:g}")
    return seconds


class ServiceEntry(BaseModel):
    """One service of webservices.json: the tool `<toolkit>__<name>`, what the model sees, and
    where and how to POST. Validate with `context={"toolkit": ..., "environment": Environment()}`."""

    model_config = ConfigDict(strict=True, extra="allow")  # unknown keys are warned about

    name: str
    description: str = ""
    url: str
    parameters: ParametersSchema = Field(None, validate_default=True)
    headers: dict[
        Annotated[str, AfterValidator(_header_name)],
        Annotated[Expanded, AfterValidator(_header_value)],
    ] = {}
    timeout: Annotated[float, AfterValidator(_timeout)] = DEFAULT_TIMEOUT
    permission: Permission = "everyone"
    comment: Any = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str, info: ValidationInfo) -> str:
        tool_name((info.context or {})["toolkit"], name)
        return name

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        url = url.strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// address with a host, not {url!r}")
        try:
            httpx.URL(url)
        except (httpx.InvalidURL, ValueError) as error:
            raise ValueError(f"is not a valid address: {error}") from None
        return url


class ServicesFile(BaseModel):
    """webservices.json: a toolkit name, and its services, each read on its own so that a broken
    one leaves the others loaded."""

    model_config = ConfigDict(strict=True, extra="allow")  # unknown keys are warned about

    toolkit: Annotated[str, AfterValidator(check_toolkit_name)] = DEFAULT_TOOLKIT
    tools: list[Any]
    schema_: Any = Field(None, alias="$schema")
    comment: Any = None


def _unknown_keys(model: BaseModel) -> list[str]:
    known = [f.alias or name for name, f in type(model).model_fields.items() if name != "comment"]
    return [f"unknown key {key!r} is ignored (known: {', '.join(k for k in known if k != '$schema')})"
            for key in sorted(model.model_extra or {})]


def _read_service(
    index: int, raw: Any, toolkit: str, path: Path, environ: Mapping[str, str],
    problems: list[LoadProblem],
) -> Tool:
    """One entry as a Tool; FileFormatError when it cannot be one."""
    where = entry_label("tools", index, raw)
    environment = Environment(environ)
    entry = validate(ServiceEntry, raw, path, where=where,
                     context={"toolkit": toolkit, "environment": environment})
    warnings = _unknown_keys(entry) + parameter_warnings(entry.parameters)
    if not entry.description.strip():
        warnings.append("no 'description'; the model will not know when to call it")
    problems.extend(LoadProblem(toolkit, path, f"{where}: {w}", "warning") for w in warnings)
    name = tool_name(toolkit, entry.name)
    service = WebService(
        tool_name=name, url=entry.url, parameters=entry.parameters, headers=entry.headers,
        timeout=entry.timeout, secrets=(*environment.secrets, *entry.headers.values()),
    )

    async def call(**arguments: Any) -> ToolResponse:
        return await service.call(arguments)

    call.__name__ = name
    call.__qualname__ = name
    call.service = service  # type: ignore[attr-defined]
    return Tool(name=name, description=entry.description, parameters=entry.parameters, func=call,
                toolkit=toolkit, permission=entry.permission)


def load_webservices(
    path: Path, *, environ: Mapping[str, str] = os.environ
) -> tuple[Toolkit | None, list[LoadProblem]]:
    """The services of the file at `path` as a Toolkit, and the problems met.

    A missing file means no services: (None, []). A broken entry, or one using a `${NAME}` that
    `environ` lacks, is skipped with an error naming the file and the entry; the others still
    load. None when no service loaded.
    """
    path = Path(path)
    if not path.exists():
        return None, []
    try:
        config = read_file(path, ServicesFile)
    except FileFormatError as error:
        return None, [LoadProblem(DEFAULT_TOOLKIT, path, message) for message in error.messages]
    toolkit = config.toolkit
    problems = [LoadProblem(toolkit, path, w, "warning") for w in _unknown_keys(config)]
    tools: list[Tool] = []
    for index, raw in enumerate(config.tools):
        try:
            tool = _read_service(index, raw, toolkit, path, environ, problems)
        except FileFormatError as error:
            problems.extend(LoadProblem(toolkit, path, message) for message in error.messages)
            continue
        if any(t.name == tool.name for t in tools):
            problems.append(LoadProblem(toolkit, path, f"{entry_label('tools', index, raw)}: a "
                                        "service of this name is already defined above; rename one"))
            continue
        tools.append(tool)
    if not tools:
        if not any(p.severity == "error" for p in problems):
            problems.append(LoadProblem(toolkit, path, "defines no services", "warning"))
        return None, problems
    return Toolkit(name=toolkit, path=path, tools=tools, source=str(path)), problems
