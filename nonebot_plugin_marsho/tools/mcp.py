"""MCP servers as toolkits: the common `mcpServers` config, one connection task per server.

Each server's tools join the Toolset as a Toolkit named after the server, with tools named
`<server>__<tool>` whose `parameters` are the tools' input schemas, so the ToolRunner checks
permissions and validates arguments before anything reaches the server.

Every server is held by one long-running asyncio task that enters the SDK's transport and
ClientSession context managers, and leaves them, itself (anyio cancel scopes must be exited in
the task that entered them). Calls are plain requests on that session, each raced against the
connection being lost, so a server that dies mid-call fails that call at once with a clear
error; its task then reconnects with exponential backoff while the other servers go on.

Stdio servers are started by our own transport (the SDK's, watched): when the handshake fails it
says what the server did (exited with code N, wrote non-JSON to stdout, said nothing in N s) with
the last lines of its stderr. Tools that require MCP tasks (`execution.taskSupport: "required"`)
are not offered: this client does not run tasks, so every call to them would fail.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import anyio
import httpx
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.stdio import (
    PROCESS_TERMINATION_TIMEOUT,
    _create_platform_compatible_process,
    _terminate_process_tree,
    get_default_environment,
)
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, BeforeValidator, ConfigDict, field_validator, model_validator

from ..fileformat import FileFormatError, read_file, validate
from ..i18n import text
from ..redaction import logger
from .model import Permission, Tool, Toolkit, ToolResponse, Toolset
from .naming import SEPARATOR, Environment, Expanded, normalize_parameters, redact, safe_name

try:  # the SDK's current client (1.2x); the older one is deprecated but still there
    from mcp.client.streamable_http import streamable_http_client as _new_http_client
except ImportError:  # pragma: no cover - older SDKs
    _new_http_client = None  # type: ignore[assignment]
from mcp.client.streamable_http import streamablehttp_client as _old_http_client

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

Transport = Literal["stdio", "sse", "streamable-http"]

CONNECTION_CLOSED = getattr(types, "CONNECTION_CLOSED", -32000)

_TRANSPORT_ALIASES: dict[str, Transport] = {
    "stdio": "stdio",
    "sse": "sse",
    "streamable-http": "streamable-http",
    "streamable_http": "streamable-http",
    "streamablehttp": "streamable-http",
    "http": "streamable-http",
}
MAX_SERVER_NAME = 40
"""Characters of a server's name kept in tool names, leaving room for the tool's own name."""

HTTP_TIMEOUT = httpx.Timeout(30.0, read=300.0)
"""The SDK's own defaults for its HTTP transports: a server may hold a response stream open."""


class ServerStatus(str):
    """A server's state in English (as logs show it), with the catalogue `code` and `params` that
    chat/ translates for the people in a chat."""

    code: str
    params: dict[str, Any]

    def __new__(cls, code: str, /, **params: Any) -> ServerStatus:
        status = super().__new__(cls, text("en", code, **params))
        status.code, status.params = code, params
        return status


@dataclass(frozen=True)
class ServerConfig:
    """One entry of `mcpServers`: how to reach the server and who may use its tools."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = field(default=(), repr=False)
    env: dict[str, str] | None = field(default=None, repr=False)
    cwd: str | None = None
    url: str = field(default="", repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    permission: Permission = "superuser"
    timeout: float | None = None
    """Seconds one call may take; None: the manager's call_timeout."""
    disabled: bool = False
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """The values `${NAME}` put in, hidden from the server's errors in logs and listings."""

    @property
    def toolkit_name(self) -> str:
        """The server's name as a toolkit: the characters tool names allow, at most 40."""
        return safe_name(self.name, MAX_SERVER_NAME)

    @property
    def where(self) -> str:
        """What the server is, for logs and listings: its command or its URL, without the
        arguments or query string (where secrets from `${NAME}` may have been put)."""
        if self.transport == "stdio":
            return self.command
        parsed = urlparse(self.url)
        port = f":{parsed.port}" if parsed.port else ""
        return f"{parsed.scheme}://{parsed.hostname or ''}{port}{parsed.path}"


# ---------------------------------------------------------------------------------------------
# config


def _text(value: Any) -> Any:
    """Numbers where text is expected are read as text, as other clients do (`"args": ["-p", 8080]`)."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


Text = Annotated[Expanded, BeforeValidator(_text)]


class McpServerEntry(BaseModel):
    """One server of mcp.json's `mcpServers`, as other MCP clients write it: a `command` (with
    `args`, `env`, `cwd`) or a `url` (with `headers`), plus our `permission`, `timeout` and
    `disabled`. `${NAME}` is expanded in every string; validate with
    `context={"environment": Environment(...)}`."""

    model_config = ConfigDict(strict=True)  # other keys are ignored: other clients add their own

    command: Text | None = None
    args: list[Text] = []
    env: dict[str, Text] | None = None
    cwd: Text | None = None
    url: Text | None = None
    headers: dict[str, Text] | None = None
    transport: str | None = None
    type: str | None = None
    """What some clients call `transport`."""
    permission: Permission = "superuser"
    timeout: float | None = None
    disabled: bool = False

    @field_validator("command")
    @classmethod
    def _command(cls, command: str | None) -> str | None:
        if command is not None and not command.strip():
            raise ValueError("must not be empty")
        return command

    @field_validator("url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        parsed = urlparse(url) if url is not None else None
        if parsed is not None and (parsed.scheme not in ("http", "https") or not parsed.netloc):
            raise ValueError(f"must be an http:// or https:// URL, not {url!r}")
        return url

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, timeout: float | None) -> float | None:
        if timeout is not None and timeout <= 0:
            raise ValueError(f"must be a positive number of seconds, not {timeout:g}")
        return timeout

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerEntry:
        """Check the transport against `command` or `url`, and settle it in `transport`."""
        kind = self.transport if self.transport is not None else self.type
        transport = _TRANSPORT_ALIASES.get(kind.lower()) if kind is not None else None
        if kind is not None and transport is None:
            raise ValueError(f"unknown transport {kind!r} (use stdio, sse or streamable-http)")
        if self.command is not None and self.url is not None:
            raise ValueError("has both 'command' and 'url'; a server is either a command or a URL")
        if self.command is not None:
            if transport not in (None, "stdio"):
                raise ValueError(f"has a 'command', so its transport is stdio, not {kind!r}")
            transport = "stdio"
        elif self.url is not None:
            if transport == "stdio":
                raise ValueError("has a 'url', so its transport is sse or streamable-http, not stdio")
            if transport is None:  # guess: the SSE transport's endpoint is conventionally /sse
                sse = urlparse(self.url).path.rstrip("/").endswith("/sse")
                transport = "sse" if sse else "streamable-http"
        else:
            raise ValueError("needs a 'command' (a local server) or a 'url' (a remote one)")
        self.transport = transport
        return self

    def server(self, name: str, secrets: list[str]) -> ServerConfig:
        """The server as the manager connects it."""
        return ServerConfig(
            name=name, transport=self.transport,  # type: ignore[arg-type] # settled above
            command=self.command or "", args=tuple(self.args), env=self.env, cwd=self.cwd,
            url=self.url or "", headers=self.headers or {}, permission=self.permission,
            timeout=self.timeout, disabled=self.disabled, secrets=tuple(secrets),
        )


class McpFile(BaseModel):
    """mcp.json: `{"mcpServers": {name: server}}`, each server read on its own so that a broken
    one leaves the others loaded."""

    model_config = ConfigDict(strict=True)  # other keys are ignored

    mcpServers: dict[str, Any]  # noqa: N815 - the key every MCP client uses


def read_mcp_config(
    path: Path, *, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, ServerConfig], list[str]]:
    """The servers of an `mcpServers` file (comments allowed), and its problems as sentences.

    A missing or empty file is no servers and no problems. A bad entry, or one using a `${NAME}`
    that is not set, is left out and named in a problem; the others still load. Disabled
    servers are returned with `disabled=True` (their `${NAME}` need not be set).
    """
    path = Path(path)
    if not path.exists():
        return {}, []
    try:
        config = read_file(path, McpFile, empty={"mcpServers": {}})
    except FileFormatError as error:
        return {}, str(error).splitlines()
    servers: dict[str, ServerConfig] = {}
    problems: list[str] = []
    taken: dict[str, str] = {}
    for name, entry in config.mcpServers.items():
        if not name.strip():
            problems.append(f"{path}: a server in mcpServers has an empty name")
            continue
        disabled = isinstance(entry, dict) and entry.get("disabled") is True
        environment = Environment(environ, required=not disabled)
        try:
            server = validate(McpServerEntry, entry, path, where=f"MCP server {name!r}",
                              context={"environment": environment}).server(name, environment.secrets)
        except FileFormatError as error:
            problems.extend(str(error).splitlines())
            continue
        other = taken.get(server.toolkit_name)
        if other is not None:
            problems.append(
                f"{path}: MCP server {name!r}: its tools would be named like those of {other!r} "
                f"({server.toolkit_name}__...); rename one of them"
            )
            continue
        taken[server.toolkit_name] = name
        servers[name] = server
    return servers, problems


# ---------------------------------------------------------------------------------------------
# results


def _innermost(error: BaseException) -> BaseException:
    """The real error inside the exception groups of task groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _describe(error: BaseException) -> str:
    """The innermost cause of an error, in one line (task groups wrap the real one)."""
    error = _innermost(error)
    if isinstance(error, McpError):
        return error.error.message
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _resource_text(resource: Any) -> str:
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    mime = getattr(resource, "mimeType", None) or "binary"
    return f"[{mime} resource {resource.uri} omitted]"


def convert_result(result: types.CallToolResult) -> ToolResponse:
    """An MCP tool result as the ToolResponse the runner expects: text, pictures, or an error."""
    texts: list[str] = []
    images: list[bytes] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            texts.append(item.text)
        elif isinstance(item, types.ImageContent):
            try:
                images.append(base64.b64decode(item.data, validate=False))
            except (binascii.Error, ValueError):
                texts.append(f"[an image ({item.mimeType}) that could not be decoded]")
        elif isinstance(item, types.EmbeddedResource):
            texts.append(_resource_text(item.resource))
        elif isinstance(item, types.ResourceLink):
            texts.append(f"[resource: {item.uri}]")
        else:  # audio, and whatever later protocol versions add
            texts.append(f"[{getattr(item, 'type', 'unknown')} content omitted]")
    if not texts and result.structuredContent is not None:
        texts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    text = "\n".join(texts)
    if result.isError:
        return ToolResponse.error(text or "the tool reported an error without saying what")
    if images and not text:
        text = f"[{len(images)} image(s) sent to the chat]"
    return ToolResponse.success(text, images=images)


# ---------------------------------------------------------------------------------------------
# stdio servers' stderr


class _StderrTail(asyncio.Protocol):
    """Keeps the last lines a stdio server wrote to stderr, to explain why it failed."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines: deque[str] = deque(maxlen=8)
        self._partial = ""

    def data_received(self, data: bytes) -> None:
        text = self._partial + data.decode("utf-8", errors="replace")
        *lines, self._partial = text.split("\n")
        for line in lines:
            if line.strip():
                self.lines.append(line.rstrip())
                logger.debug(f"marsho: MCP server {self.server} stderr: {line.rstrip()}")

    def tail(self) -> str:
        lines = list(self.lines) + ([self._partial] if self._partial.strip() else [])
        return " | ".join(lines[-3:])[-500:]


async def _stderr_pipe(stack: contextlib.AsyncExitStack, server: str) -> tuple[Any, _StderrTail]:
    """A file for the child's stderr whose lines land in a _StderrTail."""
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "rb")
    writer = os.fdopen(write_fd, "w")
    tail = _StderrTail(server)
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.connect_read_pipe(lambda: tail, reader)
    except Exception:
        reader.close()
        writer.close()
        raise
    stack.callback(transport.close)
    stack.callback(writer.close)
    return writer, tail


# ---------------------------------------------------------------------------------------------
# stdio servers' stdout and exit


INHERITED_ENVIRONMENT = tuple(sorted(get_default_environment()))
"""The variables of the bot's environment a stdio server sees (besides its own `env`)."""


@dataclass
class _StdioWatch:
    """What a stdio server did, to explain a handshake that failed."""

    returncode: int | None = None
    """Its exit status once it closed its stdout (negative: killed by that signal)."""
    not_json: str = ""
    """The start of the first line it wrote to stdout that is not a JSON-RPC message."""
    messages: int = 0
    """JSON-RPC messages it wrote."""
    warn: bool = True
    """Log non-JSON output as a warning (the first attempt) rather than for debugging."""

    def exited(self) -> str:
        code = self.returncode
        if code is None:
            return ""
        return f"it was killed by signal {-code}" if code < 0 else f"it exited with code {code}"

    def wrote(self) -> str:
        return f"it wrote non-JSON to stdout: {self.not_json!r}" if self.not_json else ""


@contextlib.asynccontextmanager
async def _stdio_client(config: ServerConfig, errlog: Any, watch: _StdioWatch) -> AsyncIterator[Any]:
    """The SDK's stdio transport, reading bytes and noting in `watch` what the server did: lines
    that are not JSON-RPC are logged and skipped (not fatal: some servers print a banner), and
    its exit status is read when its stdout closes, before the session learns of it."""
    env = get_default_environment()
    env.update(config.env or {})
    process = await _create_platform_compatible_process(
        command=config.command, args=list(config.args), env=env, errlog=errlog, cwd=config.cwd
    )
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def receive(line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = types.JSONRPCMessage.model_validate_json(line)
        except ValueError:
            if not watch.not_json:
                watch.not_json = line[:120].decode("utf-8", errors="replace").strip()
                log = logger.warning if watch.warn else logger.debug
                log(f"marsho: MCP server {config.name} wrote non-JSON to stdout "
                    f"(stdout is for MCP messages only): {watch.not_json!r}")
            return
        watch.messages += 1
        await read_writer.send(SessionMessage(message))

    async def stdout_reader() -> None:
        assert process.stdout is not None
        buffer = b""
        async with read_writer:
            try:
                async for chunk in process.stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        await receive(line)
                await receive(buffer)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            # its stdout closed: it most likely exited; say how before the session learns of it
            with anyio.move_on_after(PROCESS_TERMINATION_TIMEOUT):
                watch.returncode = await process.wait()

    async def stdin_writer() -> None:
        assert process.stdin is not None
        async with write_reader:
            try:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_none=True)
                    await process.stdin.send((data + "\n").encode())
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                await anyio.lowlevel.checkpoint()  # it exited: the reader says so

    async with anyio.create_task_group() as group, process:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            # the MCP shutdown sequence, as the SDK does it: close stdin, wait, then terminate
            if process.stdin is not None:
                with contextlib.suppress(Exception):
                    await process.stdin.aclose()
            try:
                with anyio.fail_after(PROCESS_TERMINATION_TIMEOUT):
                    await process.wait()
            except TimeoutError:
                await _terminate_process_tree(process)
            except ProcessLookupError:  # pragma: no cover
                pass
            for stream in (read_stream, write_stream, read_writer, write_reader):
                await stream.aclose()


# ---------------------------------------------------------------------------------------------
# connections


class _ConnectionLost(Exception):
    """The connection to a server went away; its message says how."""


class _Server:
    """One configured server: its connection task, its state and its toolkit."""

    def __init__(self, manager: McpManager, config: ServerConfig) -> None:
        self.manager = manager
        self.config = config
        self.state: Literal["idle", "connecting", "connected", "retrying", "disabled", "stopped"] = (
            "disabled" if config.disabled else "idle"
        )
        """Shown as "starting" while connecting for the first time, and as "failed" when retrying
        but the manager does not retry (the CLI's)."""
        self.error = ""
        self.retry_at = 0.0
        self.session: ClientSession | None = None
        self.lost: asyncio.Event | None = None
        self.wake = asyncio.Event()
        self.refresh_wanted = False
        self.check_wanted = False
        self.in_flight = 0
        self.toolkit: Toolkit | None = None
        self.task: asyncio.Task[None] | None = None
        self.first_attempt = asyncio.Event()
        self.connected_at: float | None = None
        self._last_logged = ""
        self._stderr: _StderrTail | None = None
        self._watch: _StdioWatch | None = None
        self.unsupported: list[str] = []
        """Tools of the server left out because they require MCP tasks."""

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def timeout(self) -> float:
        return self.config.timeout or self.manager.call_timeout

    def status(self) -> ServerStatus:
        if self.state == "connected":
            count = len(self.toolkit.tools) if self.toolkit else 0
            if self.unsupported:
                return ServerStatus("mcp.connected_unsupported", count=count,
                                    names=", ".join(self.unsupported))
            return ServerStatus("mcp.connected", count=count)
        if self.state == "connecting" and not self.first_attempt.is_set():
            return ServerStatus("mcp.starting")
        if self.state == "retrying" and not self.manager.retry:
            return ServerStatus("mcp.failed", error=self.error)
        if self.state == "retrying":
            wait = max(0.0, self.retry_at - time.monotonic())
            return ServerStatus("mcp.retrying", seconds=f"{wait:.0f}", error=self.error)
        return ServerStatus(f"mcp.{self.state}")

    # -- the connection task --------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve until the connection is lost, wait, and again; until cancelled."""
        manager = self.manager
        delay = manager.backoff_initial
        while True:
            self.connected_at = None
            try:
                await self._connect_and_serve()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - whatever the transport raised
                self.error = self._explain(self._failure(error))
            finally:
                self._drop_connection()
                self.first_attempt.set()
            up_since = self.connected_at
            if up_since is not None and time.monotonic() - up_since >= manager.stable_after:
                delay = manager.backoff_initial  # it had been working: start over
            self.state = "retrying"
            if not manager.retry:  # status(): "failed"
                logger.warning(f"marsho: MCP server {self.name} ({self.config.where}): {self.error}")
                return
            self.retry_at = time.monotonic() + delay
            log = logger.info if self.error == self._last_logged else logger.warning
            self._last_logged = self.error
            log(
                f"marsho: MCP server {self.name} ({self.config.where}): {self.error}; retrying in {delay:g} s"
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, manager.backoff_max)

    def _failure(self, error: BaseException) -> str:
        """Why an attempt failed before the connection was up, in words: what the process did
        (exited, wrote non-JSON), or that it did not answer in time, or the transport's error."""
        inner = _innermost(error)
        watch, timeout = self._watch, self.manager.connect_timeout
        what = ""
        if isinstance(inner, OSError) and self.config.transport == "stdio" and watch is None:
            reason = inner.strerror or _describe(inner)
            what = f"cannot run {self.config.command!r}: {reason}"
            if isinstance(inner, FileNotFoundError):
                what += " (is it installed, and on the PATH the server sees?)"
        elif isinstance(inner, TimeoutError):
            what = f"no answer to the MCP handshake in {timeout:g} s"
        elif watch is not None and watch.returncode is not None:
            what = f"{watch.exited()} during the MCP handshake"
        parts = [what or _describe(error)]
        if watch is not None and watch.not_json:
            parts.append(watch.wrote())
        return "; ".join(parts)

    def _explain(self, message: str) -> str:
        """What went wrong, with the server's last stderr lines; `${NAME}` values hidden (a
        server may echo its token, an HTTP error its URL)."""
        tail = self._stderr.tail() if self._stderr is not None else ""
        if tail and f"(its stderr: {tail})" not in message:
            message = f"{message} (its stderr: {tail})"
        return redact(message, self.config.secrets)

    def _drop_connection(self) -> None:
        self.session = None
        if self.lost is not None:
            self.lost.set()
        self.lost = None

    async def _transport(self, stack: contextlib.AsyncExitStack, errlog: Any) -> Any:
        """Open the transport on the stack; returns its (read, write, ...) streams."""
        config = self.config
        if config.transport == "stdio":
            watch = _StdioWatch(warn=not self.first_attempt.is_set())
            opened = _stdio_client(config, errlog, watch)
            streams = await stack.enter_async_context(opened)
            self._watch = watch  # the process runs: its exit and output now explain failures
            return streams
        elif config.transport == "sse":
            opened = sse_client(config.url, headers=config.headers or None)
        elif _new_http_client is not None:
            # given a client, the SDK leaves closing it to us
            client = await stack.enter_async_context(
                httpx.AsyncClient(headers=config.headers or None, timeout=HTTP_TIMEOUT)
            )
            opened = _new_http_client(config.url, http_client=client)
        else:  # pragma: no cover - older SDKs
            opened = _old_http_client(config.url, headers=config.headers or None)
        return await stack.enter_async_context(opened)

    async def _connect_and_serve(self) -> None:
        """One connection, from opening to losing it (returns or raises when it is lost)."""
        manager = self.manager
        if not self.error:  # after a failure, it stays "retrying" (in 0 s), with why, until this ends
            self.state = "connecting"
        self._stderr = self._watch = None
        async with contextlib.AsyncExitStack() as stack:
            errlog: Any = sys.stderr
            if self.config.transport == "stdio":
                errlog, self._stderr = await _stderr_pipe(stack, self.name)
            streams = await self._transport(stack, errlog)
            read, write = streams[0], streams[1]
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._on_message)
            )
            with anyio.fail_after(manager.connect_timeout):
                await session.initialize()
                self.refresh_wanted = False
                tools = await self._list_tools(session)
            self.session, self.lost = session, asyncio.Event()
            self.error = self._last_logged = ""
            self._install(tools)
            self.state = "connected"
            self.connected_at = time.monotonic()
            self.first_attempt.set()
            offered = [t.name for t in tools if not requires_tasks(t)]
            logger.info(
                f"marsho: MCP server {self.name} connected ({self.config.transport}), "
                f"{len(offered)} tools: {', '.join(offered) or 'none'}"
            )
            try:
                await self._serve(session, self.lost)
            except _ConnectionLost as lost:
                self.error = self._explain(self._with_exit(str(lost)))
            except Exception as error:
                self.error = self._explain(self._with_exit(f"the connection failed: {_describe(error)}"))
            self._drop_connection()  # calls racing the connection fail now, not after the close

    def _with_exit(self, message: str) -> str:
        exited = self._watch.exited() if self._watch is not None else ""
        return f"{message} ({exited})" if exited else message

    async def _serve(self, session: ClientSession, lost: asyncio.Event) -> None:
        """Refresh the tool list when told and check the server is alive, until it is not."""
        manager = self.manager
        while True:
            # while calls are waiting, check sooner: an HTTP server that died mid-call says nothing
            interval = manager.ping_interval
            if self.in_flight:
                interval = min(interval, manager.busy_ping_interval)
            woken = True
            try:
                await asyncio.wait_for(self.wake.wait(), interval)
            except asyncio.TimeoutError:
                woken = False
            self.wake.clear()
            if lost.is_set():
                raise _ConnectionLost(self.error or "the connection was lost")
            if self.refresh_wanted:
                self.refresh_wanted = False
                with anyio.fail_after(manager.connect_timeout):
                    tools = await self._list_tools(session)
                self._install(tools)
                logger.info(
                    f"marsho: MCP server {self.name} changed its tools: "
                    f"{', '.join(t.name for t in tools) or 'none'}"
                )
                continue
            if woken and not self.check_wanted:  # a call started: only the interval changed
                continue
            self.check_wanted = False
            try:
                with anyio.fail_after(manager.ping_timeout):
                    await session.send_ping()
            except TimeoutError:
                if self.in_flight:  # a busy server may answer late; its calls have timeouts
                    continue
                raise _ConnectionLost(f"it did not answer a ping within {manager.ping_timeout:g} s") from None
            except McpError as error:
                if error.error.code == CONNECTION_CLOSED:
                    raise _ConnectionLost("the connection closed") from None
                # a server that does not know ping is still alive

    async def _list_tools(self, session: ClientSession) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # pages
            result = await session.list_tools(cursor) if cursor else await session.list_tools()
            tools.extend(result.tools)
            cursor = result.nextCursor
            if not cursor:
                break
        return tools

    async def _on_message(self, message: Any) -> None:
        """Runs in the session's receive loop: only flag work for the connection task."""
        if isinstance(message, types.ServerNotification):
            if isinstance(message.root, types.ToolListChangedNotification):
                self.refresh_wanted = True
                self.wake.set()
        elif isinstance(message, Exception):
            logger.warning(f"marsho: MCP server {self.name}: transport error: {_describe(message)}")
            self.check_wanted = True
            self.wake.set()
        await anyio.lowlevel.checkpoint()

    def mark_lost(self, lost: asyncio.Event, reason: str) -> None:
        """A call found the connection dead: wake the connection task to reconnect."""
        if lost is self.lost and not lost.is_set():
            self.error = self._explain(reason)
            lost.set()
            self.wake.set()

    # -- tools ----------------------------------------------------------------------------

    def _install(self, listed: list[types.Tool]) -> None:
        """Replace this server's toolkit in the toolset with the tools just listed."""
        toolset = self.manager.toolset
        self.remove_toolkit()
        prefix = self.config.toolkit_name + SEPARATOR
        toolkit = Toolkit(name=self.config.toolkit_name, source=f"MCP {self.config.transport}")
        toolkit.sends = (
            f"tool arguments to the MCP server at {self.config.url}"
            if self.config.transport != "stdio"
            else ""
        )
        names: set[str] = set()
        unsupported = [item.name for item in listed if requires_tasks(item)]
        if unsupported and unsupported != self.unsupported:
            logger.warning(
                f"marsho: MCP server {self.name}: not offering {', '.join(unsupported)}: "
                "they require MCP tasks (execution.taskSupport \"required\"), which marsho does not run"
            )
        self.unsupported = unsupported
        for item in listed:
            if requires_tasks(item):
                continue
            name = safe_name(prefix + item.name, 64)
            suffix = 2
            while name in names:
                tag = f"_{suffix}"
                name = name[: 64 - len(tag)] + tag
                suffix += 1
            owner = toolset.tools.get(name)
            if owner is not None:
                logger.warning(
                    f"marsho: MCP server {self.name}: tool {item.name} left out, "
                    f"{name} is already the name of a tool of {owner.toolkit or 'another toolkit'}"
                )
                continue
            names.add(name)
            toolkit.tools.append(self._make_tool(name, item))
        toolset.add(toolkit)
        self.toolkit = toolkit

    def remove_toolkit(self) -> None:
        toolset = self.manager.toolset
        old = self.toolkit
        if old is None:
            return
        toolset.toolkits[:] = [t for t in toolset.toolkits if t is not old]
        for tool in old.tools:
            if toolset.tools.get(tool.name) is tool:
                del toolset.tools[tool.name]
        self.toolkit = None

    def _make_tool(self, name: str, listed: types.Tool) -> Tool:
        try:
            schema = normalize_parameters(listed.inputSchema)
        except ValueError as error:  # the server's to fix; its tool stays usable
            logger.warning(
                f"marsho: MCP server {self.name}: tool {listed.name}'s input schema {error}; "
                "its arguments are only checked to be an object"
            )
            schema = normalize_parameters(None)
        description = (listed.description or listed.title or "").strip()
        description = description or f"{listed.name} (from the MCP server {self.name})"
        remote = listed.name

        async def call_mcp_tool(**arguments: Any) -> ToolResponse:
            return await self.call(remote, arguments)

        call_mcp_tool.__name__ = name
        return Tool(
            name=name,
            description=description,
            parameters=schema,
            func=call_mcp_tool,
            toolkit=self.config.toolkit_name,
            permission=self.config.permission,
        )

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResponse:
        """Call a tool on the server; every failure is an error response the model can read."""
        session, lost = self.session, self.lost
        if self.state == "stopped":
            return ToolResponse.error(f"the MCP server {self.name} has been shut down")
        if session is None or lost is None or lost.is_set():
            return ToolResponse.error(
                f"the MCP server {self.name} is not connected ({self.status()}); "
                "it is being reconnected in the background, so try again later"
            )
        timeout = self.timeout
        self.in_flight += 1
        if self.in_flight == 1:
            self.wake.set()  # the connection task checks on the server more often meanwhile
        request = asyncio.ensure_future(session.call_tool(tool, arguments))
        request.add_done_callback(_retrieve)
        watcher = asyncio.ensure_future(lost.wait())
        try:
            done, _ = await asyncio.wait(
                {request, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            self.in_flight -= 1
            watcher.cancel()
            if not request.done():
                request.cancel()
        if request in done:
            try:
                result = request.result()
            except McpError as error:
                if error.error.code == CONNECTION_CLOSED:
                    return self._lost_during_call(tool, lost, "the connection closed")
                return ToolResponse.error(
                    f"the MCP server {self.name} refused the call to {tool}: {error.error.message}"
                )
            except Exception as error:  # noqa: BLE001 - transport errors
                return self._lost_during_call(tool, lost, _describe(error))
            return convert_result(result)
        if watcher in done:
            return self._lost_during_call(tool, lost, self.error or "the connection was lost")
        return ToolResponse.error(
            f"{tool} on the MCP server {self.name} did not answer within {timeout:g} s and "
            "was abandoned; tell the user it timed out, or try again with other arguments"
        )

    def _lost_during_call(self, tool: str, lost: asyncio.Event, reason: str) -> ToolResponse:
        self.mark_lost(lost, f"lost during a call to {tool}: {reason}")
        logger.warning(f"marsho: MCP server {self.name} was lost during a call to {tool}: {reason}")
        return ToolResponse.error(
            f"the MCP server {self.name} stopped answering during the call to {tool} "
            f"({reason}; it may have crashed). It is being reconnected in the background; "
            "the call did not complete, so try again later"
        )


def requires_tasks(tool: types.Tool) -> bool:
    """Whether a listed tool can only be called as an MCP task (which this client cannot do)."""
    execution = getattr(tool, "execution", None)
    support = (execution.get("taskSupport") if isinstance(execution, dict)
               else getattr(execution, "taskSupport", None))
    return support == "required"


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Read an abandoned request's outcome so that asyncio does not warn about it."""
    if not task.cancelled():
        task.exception()


@dataclass
class ServerReport:
    """One server as `python -m nonebot_plugin_marsho tools` lists it."""

    config: ServerConfig
    state: str
    """idle, connecting, connected, retrying, disabled or stopped."""
    status: ServerStatus
    error: str = ""
    tools: list[Tool] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    """Its tools that require MCP tasks, not offered."""


class McpManager:
    """Connects the configured MCP servers and keeps their tools in a Toolset."""

    connect_timeout = 30.0
    """Seconds to connect, initialize and list the tools of a server."""
    ping_timeout = 15.0
    busy_ping_interval = 5.0
    """Seconds between pings while calls are waiting (ping_interval when idle)."""
    start_wait = 10.0
    """Seconds start() waits for the servers' first attempts before leaving them to the background."""
    stable_after = 30.0
    """Seconds a connection must have lasted for the backoff to start over after losing it."""

    def __init__(
        self,
        servers: dict[str, ServerConfig],
        toolset: Toolset,
        *,
        call_timeout: float = 30,
        backoff: tuple[float, float] = (1.0, 60.0),
        ping_interval: float = 30.0,
        retry: bool = True,
    ) -> None:
        self.servers = dict(servers)
        self.toolset = toolset
        self.call_timeout = call_timeout
        self.backoff_initial, self.backoff_max = backoff
        self.ping_interval = ping_interval
        self.retry = retry
        """Reconnect a server whose attempt failed or whose connection was lost (False: one try)."""
        self._servers: dict[str, _Server] = {}
        self._started = False

    async def start(self, *, wait: float | None = None) -> None:
        """Connect every enabled server at once; never raises.

        Returns when each server has connected or failed its first attempt, or after `wait`
        seconds (default: start_wait, 10 s); the rest go on connecting or retrying in the
        background, and their tools appear in the toolset when they connect.
        """
        if self._started:
            return
        self._started = True
        for name, config in self.servers.items():
            server = _Server(self, config)
            self._servers[name] = server
            if config.disabled:
                logger.info(f"marsho: MCP server {name} is disabled")
                continue
            server.state = "connecting"  # "starting" until its first attempt ends
            server.task = asyncio.create_task(server.run(), name=f"marsho-mcp-{name}")
        await self.wait_started(self.start_wait if wait is None else wait)

    async def wait_started(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for every enabled server to connect or fail its first
        attempt; whether they all did."""
        servers = [s for s in self._servers.values() if s.task is not None]
        if all(server.first_attempt.is_set() for server in servers):
            return True
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(asyncio.gather(*(s.first_attempt.wait() for s in servers)), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        """Close every connection, cancel pending retries and take the tools out of the toolset."""
        tasks = []
        for server in self._servers.values():
            server.state = "stopped" if server.state != "disabled" else "disabled"
            if server.task is not None and not server.task.done():
                server.task.cancel()
                tasks.append(server.task)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        for server in self._servers.values():
            server.remove_toolkit()
            server._drop_connection()
            if server.state != "disabled":
                server.state = "stopped"
        self._started = False
        self._servers.clear()

    def report(self) -> list[ServerReport]:
        """Each configured server: its state, its tools, and why it is not connected."""
        reports = []
        for name, config in self.servers.items():
            server = self._servers.get(name)
            if server is None:
                reports.append(ServerReport(config, "disabled" if config.disabled else "idle",
                                            self.status()[name]))
                continue
            reports.append(ServerReport(
                config, server.state, server.status(), error=server.error,
                tools=list(server.toolkit.tools) if server.toolkit else [],
                unsupported=list(server.unsupported),
            ))
        return reports

    def status(self) -> dict[str, ServerStatus]:
        """Each configured server's state: connected (N tools), retrying in N s: why, disabled."""
        if not self._servers:
            return {name: ServerStatus("mcp.disabled" if config.disabled else "mcp.idle")
                    for name, config in self.servers.items()}
        return {name: server.status() for name, server in self._servers.items()}


__all__ = [
    "INHERITED_ENVIRONMENT", "McpManager", "ServerConfig", "ServerReport", "convert_result",
    "read_mcp_config", "requires_tasks",
]
