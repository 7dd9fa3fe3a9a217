"""`python -m nonebot_plugin_marsho`: check toolkits, call one tool, ask once, or import
nonebot-plugin-marshoai's memories, with the settings of `.env` in the current folder, exactly as
the bot would. `tools` starts every MCP server of
mcp.json (and `call` the one it needs), waiting at most `--wait` seconds for each handshake."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = "nonebot_plugin_marsho"
MCP_WAIT = 30.0
"""Default seconds `tools` and `call` give an MCP server to start and answer the handshake
(a first `uvx` or `npx` run downloads the server)."""


def say(*parts: Any, **options: Any) -> None:
    """print(), with the bot's secrets hidden (API keys, tokens, `${NAME}` values)."""
    from nonebot_plugin_marsho.redaction import redact

    print(*(redact(str(part)) for part in parts), **options)


def _load_plugin(verbose: bool) -> Any:
    """Initialise NoneBot from `.env` and load this package as the bot does; returns plugin.py."""
    import importlib
    import warnings

    import nonebot
    from nonebot.log import default_format, logger

    # the CLI talks to no chat platform: no adapter is expected
    warnings.filterwarnings("ignore", message="No adapters found")
    logger.remove()  # the log goes to stderr, so stdout holds only what the command prints
    logger.add(sys.stderr, level="DEBUG" if verbose else "WARNING", format=default_format,
               diagnose=False)
    nonebot.init(driver="~none")
    # runpy imported the package before NoneBot was initialised (so it wired nothing):
    # forget it, and let NoneBot load it as a plugin
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    if nonebot.load_plugin(PACKAGE) is None:
        raise SystemExit(f"{PACKAGE} could not be loaded as a NoneBot plugin (see the log above)")
    return importlib.import_module(f"{PACKAGE}.plugin")


def _signature(tool: Any) -> str:
    """`name(text: string, count?: integer)` from a tool's parameters schema."""
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = set(schema.get("required") or ())
    parts = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type")
        if isinstance(kind, list):
            kind = "|".join(map(str, kind))
        if kind == "array" and isinstance(prop.get("items"), dict) and prop["items"].get("type"):
            kind = f"array of {prop['items']['type']}"
        if not kind and "enum" in prop:
            kind = "|".join(json.dumps(value, ensure_ascii=False) for value in prop["enum"])
        parts.append(f"{name}{'' if name in required else '?'}: {kind or 'any'}")
    return f"{tool.name}({', '.join(parts)})"


def _print_tools(tools: list[Any], schemas: bool, signature: bool = False) -> None:
    for tool in tools:
        mark = "" if tool.permission == "everyone" else f"  [{tool.permission}]"
        say(f"    {_signature(tool) if signature else tool.name}{mark}: {tool.summary}")
        if schemas:
            say(f"        {json.dumps(tool.parameters, ensure_ascii=False)}")


def _print_toolset(toolset: Any, skip: Collection[str] = (), schemas: bool = False) -> None:
    for toolkit in toolset.toolkits:
        if toolkit.name in skip:  # MCP servers: listed by _print_mcp
            continue
        say(f"✓ {toolkit.name}  ({toolkit.source}" + (f": {toolkit.path})" if toolkit.path else ")"))
        _print_tools(toolkit.tools, schemas)
    for name in toolset.disabled:
        say(f"- {name}  (disabled in .env)")
    for name, sends in toolset.available.items():
        say(f"○ {name}  (off until MARSHO_ENABLED_TOOLKITS names it"
              + (f"; sends {sends})" if sends else ")"))
    for problem in toolset.warnings:
        say(f"! {problem.toolkit}: {problem}")
    for name, problems in toolset.failed_toolkits().items():
        say(f"✗ {name or '(toolset folder)'}")
        for problem in problems:
            say(f"    {problem}")


def _mcp_servers(app: Any) -> tuple[Path, dict[str, Any], list[str]]:
    """The MCP servers' file as the bot finds it (Marsho.mcp_file), its servers and its problems;
    a MARSHO_MCP_FILE that names no file is one."""
    from nonebot_plugin_marsho.tools.mcp import read_mcp_config

    path = Path(app.mcp_file())
    if app.config.marsho_mcp_file and not path.is_file():
        return path, {}, [f"MARSHO_MCP_FILE={path} names no file"]
    servers, problems = read_mcp_config(path)
    return path, servers, problems


async def _start_mcp(app: Any, servers: dict[str, Any], toolset: Any, wait: float) -> Any:
    """Start `servers` once each (no retries), waiting at most `wait` seconds for each handshake."""
    from nonebot_plugin_marsho.tools.mcp import McpManager

    manager = McpManager(servers, toolset, call_timeout=app.config.marsho_tool_timeout, retry=False)
    manager.connect_timeout = wait
    await manager.start(wait=wait + 10)  # the handshake, then stopping a server that failed it
    return manager


def _print_mcp(path: Path, problems: list[str], manager: Any, wait: float,
               schemas: bool) -> tuple[int, int]:
    """Each MCP server with its state and tools (or why it did not start); (errors, warnings)."""
    errors, warnings = len(problems), 0
    for problem in problems:
        say(f"✗ {problem}")
    for report in manager.report() if manager is not None else ():
        config = report.config
        where = f"MCP {config.transport}: {config.where}"
        if report.state == "disabled":
            say(f"- {config.name}  ({where}; disabled in {path.name})")
            continue
        if report.state != "connected":
            errors += 1
            say(f"✗ {config.name}  ({where}): "
                f"{report.error or f'no answer to the MCP handshake in {wait:g} s'}")
            continue
        say(f"✓ {config.name}  ({where}): {report.status}")
        _print_tools(report.tools, schemas, signature=True)
        for name in report.unsupported:
            warnings += 1
            say(f"    ✗ {name}: not offered: it requires MCP tasks "
                '(execution.taskSupport "required"), which marsho does not run')
    return errors, warnings


def _builtin_store(app: Any) -> Any:
    """The bot's database for the built-in toolkits, opened only if a tool is called."""
    from nonebot_plugin_marsho.store.sql import SqlStore

    try:
        return SqlStore(app.database_url())
    except Exception:  # a URL SQLAlchemy cannot read: the tools are listed all the same
        return SqlStore("sqlite://")


def _with_memory(app: Any, toolset: Any) -> Any:
    """The built-in memory tools added to `toolset` as the bot adds them (MARSHO_MEMORY), on the
    bot's database, which is opened only if a tool is called; returns that store, to close."""
    if not app.config.marsho_memory:
        return None
    from nonebot_plugin_marsho.store.memory import MemoryStore

    store = _builtin_store(app)
    app.add_memory(toolset, MemoryStore(store))
    return store


def _with_builtins(app: Any, toolset: Any) -> list[Any]:
    """Every built-in toolkit the bot adds at startup, added to `toolset` in the bot's order and
    with its settings (chat/app.py's build_services): memory (MARSHO_MEMORY), group actions
    (MARSHO_GROUP_ACTIONS), reminders; no reminder is sent and no group is read. Returns the
    stores to close."""
    from nonebot_plugin_marsho.agent.reminders import ReminderBook
    from nonebot_plugin_marsho.agent.schedule import zone_named
    from nonebot_plugin_marsho.chat.group_actions import GroupActions
    from nonebot_plugin_marsho.store.reminders import ReminderStore

    config = app.config
    memory = _with_memory(app, toolset)
    store = _builtin_store(app)
    if config.marsho_group_actions:
        actions = GroupActions(store, kick=config.marsho_group_actions_kick,
                               per_hour=config.marsho_group_actions_per_hour)
        app.add_builtin(toolset, actions.toolkit())
    book = ReminderBook(ReminderStore(store), zone=zone_named(config.marsho_timezone),
                        min_interval=config.marsho_reminder_min_interval,
                        per_user=config.marsho_reminders_per_user,
                        per_group=config.marsho_reminders_per_group)
    app.add_builtin(toolset, book.toolkit())
    return [store for store in (memory, store) if store is not None]


async def command_tools(app: Any, wait: float = MCP_WAIT, schemas: bool = False) -> int:
    """List and check every toolkit and MCP server; non-zero when any failed to load or start."""
    from nonebot_plugin_marsho.chat.app import held_secrets
    from nonebot_plugin_marsho.redaction import SECRETS

    toolset = app.load_toolset()
    stores = _with_builtins(app, toolset)
    path, servers, problems = _mcp_servers(app)
    manager = await _start_mcp(app, servers, toolset, wait) if servers else None
    SECRETS.add(*held_secrets(app.config, toolset, manager))
    try:
        _print_toolset(toolset, {server.toolkit_name for server in servers.values()}, schemas)
        mcp_errors, mcp_warnings = _print_mcp(path, problems, manager, wait, schemas)
        errors = len(toolset.errors) + mcp_errors
        say(f"{len(toolset.toolkits)} toolkits, {len(toolset.tools)} tools, {errors} errors, "
            f"{len(toolset.warnings) + mcp_warnings} warnings")
    finally:
        if manager is not None:
            await manager.stop()
        for store in stores:
            await store.close()
    return 1 if errors else 0


def _server_for(name: str, servers: dict[str, Any]) -> Any:
    """The MCP server whose tools are named like `name` (`<server>__<tool>`), if any."""
    from nonebot_plugin_marsho.tools.naming import SEPARATOR

    owners = [s for s in servers.values() if name.startswith(s.toolkit_name + SEPARATOR)]
    return max(owners, key=lambda server: len(server.toolkit_name), default=None)


async def _start_server_of(app: Any, name: str, toolset: Any, wait: float) -> tuple[Any, str]:
    """Start the MCP server that `name` belongs to (when no toolkit has it): (manager, problem)."""
    from nonebot_plugin_marsho.tools.naming import safe_name

    _, servers, problems = _mcp_servers(app)
    server = _server_for(name, servers)
    if server is None:
        return None, "; ".join(problems)  # maybe the server's entry is the broken one
    if server.disabled:
        return None, f"the MCP server {server.name} is disabled in mcp.json"
    manager = await _start_mcp(app, {server.name: server}, toolset, wait)
    report = manager.report()[0]
    if report.state != "connected":
        return manager, f"the MCP server {server.name} did not start: " + (
            report.error or f"no answer to the MCP handshake in {wait:g} s")
    for tool in report.unsupported:
        if safe_name(server.toolkit_name + "__" + tool, 64) == name:
            return manager, (f"{name} requires MCP tasks (execution.taskSupport \"required\"), "
                             "which marsho does not run")
    return manager, ""


async def command_call(app: Any, name: str, arguments: str, wait: float = MCP_WAIT) -> int:
    """Run one tool exactly as a model's call would (as the bot's owner); a tool of an MCP server
    starts that server first."""
    from nonebot_plugin_marsho.chat.app import held_secrets
    from nonebot_plugin_marsho.redaction import SECRETS
    from nonebot_plugin_marsho.tools import OWNER_CONTEXT, ToolCall, ToolRunner

    config = app.config
    toolset = app.load_toolset()
    memory = _with_memory(app, toolset)
    manager, problem = None, ""
    if name not in toolset.tools:
        manager, problem = await _start_server_of(app, name, toolset, wait)
    SECRETS.add(*held_secrets(config, toolset, manager))
    for error in toolset.errors:
        say(f"✗ {error.toolkit}: {error}", file=sys.stderr)
    runner = ToolRunner(toolset, timeout=config.marsho_tool_timeout,
                        max_result_bytes=config.marsho_max_tool_result_bytes)
    try:
        if problem and name not in toolset.tools:
            say(f"✗ {problem}", file=sys.stderr)
            if manager is not None:
                return 1
        result = await runner.run_one(ToolCall("cli", name, arguments), OWNER_CONTEXT)
    finally:
        runner.close()
        if manager is not None:
            await manager.stop()
        if memory is not None:
            await memory.close()
    say(result.content)
    say(f"[{result.status} in {result.seconds:.2f} s]", file=sys.stderr)
    return 0 if result.ok else 1


async def command_ask(app: Any, text: str) -> int:
    """One turn against the configured endpoint, showing each tool call and result."""
    from nonebot_plugin_marsho.agent.turn import TurnFacts, ask
    from nonebot_plugin_marsho.chat.render import reply_text
    from nonebot_plugin_marsho.exceptions import MarshoError
    from nonebot_plugin_marsho.tools import OWNER_CONTEXT

    def progress(call: Any, result: Any) -> None:
        if result is None:
            say(f"→ {call.name}({call.arguments})", flush=True)
        else:
            say(f"← {call.name} [{result.status}, {result.seconds:.2f} s]: {result.content}",
                  flush=True)

    await app.start()
    try:
        engine = app.require_engine()
        if app.mcp is not None:  # the bot does not wait for its MCP servers; one question does
            await app.mcp.wait_started(app.mcp.connect_timeout + 10)
            for report in app.mcp.report():
                if report.state not in ("connected", "disabled"):
                    say(f"! MCP server {report.config.name}: {report.status}", file=sys.stderr)
        # the owner, in a private conversation of their own: a turn as the bot's private chats ask it
        reply = await ask(engine, "cli:local", TurnFacts.asking(text), app.prompt, context=OWNER_CONTEXT,
                          memories=app.memory_book, progress=progress)
    except MarshoError as error:
        say(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        await app.stop()
    say(reply_text(app.texts, reply, engine.max_tool_rounds, app.config.marsho_max_answer_chars))
    return 0


MARSHOAI_MEMORY_FILE = "memory.json"
"""The file nonebot-plugin-marshoai's memory toolkit writes in its data folder:
`{"<user id>": ["memory", ...], ...}`."""


def read_marshoai_memories(path: Path) -> tuple[dict[str, list[str]], list[str]]:
    """The memories of marshoai's memory.json (or of the folder holding it), by user id, and what
    could not be read (each naming where); raises ValueError when the file as a whole cannot be."""
    if path.is_dir():
        path = path / MARSHOAI_MEMORY_FILE
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of user ids, each with a list of memories, "
                         f"found {type(data).__name__}")
    found: dict[str, list[str]] = {}
    problems: list[str] = []
    for user_id, memories in data.items():
        user, texts = _memories_of(path, user_id, memories, problems)
        if texts:
            found.setdefault(user, []).extend(texts)
    return found, problems


def _read_json(path: Path) -> Any:
    """The JSON of the file at `path`, or ValueError saying why it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (marshoai keeps it as {MARSHOAI_MEMORY_FILE} in its "
                         "data folder)") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be marshoai's memory file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON: {error.msg} at line {error.lineno}, "
                         f"column {error.colno}") from None
    except OSError as error:
        raise ValueError(f"{path}: cannot be read: {error.strerror or error}") from None


def _memories_of(path: Path, user_id: Any, memories: Any, problems: list[str]) -> tuple[str, list[str]]:
    """One user's entry of memory.json: their id and the memories that are texts (each one
    cleaned); what is skipped is added to `problems`."""
    from nonebot_plugin_marsho.tools.runner import clean_text

    user = clean_text(str(user_id)).strip()
    if not user or len(user) > 64 or any(c.isspace() or c in ":/\x00" for c in user):
        problems.append(f"{path}: {user_id!r} is not a user id; its memories were skipped")
        return user, []
    if isinstance(memories, str):
        memories = [memories]
    if not isinstance(memories, list):
        problems.append(f"{path}: {user_id!r}: expected a list of memories, found "
                        f"{type(memories).__name__}; skipped")
        return user, []
    texts = []
    for index, memory in enumerate(memories):
        if isinstance(memory, str):  # no NUL (PostgreSQL refuses it), no lone surrogate
            memory = " ".join(clean_text(memory).replace("\x00", " ").split())
        if not isinstance(memory, str) or not memory:
            problems.append(f"{path}: {user_id!r}[{index}]: not a text; skipped")
            continue
        texts.append(memory)
    return user, texts


def adapter_names() -> dict[str, str]:
    """The installed adapters' names (what marsho keys people by), each with its module: every
    module under `nonebot.adapters` (one level down for OneBot's v11 and v12) with an `Adapter`."""
    import importlib
    import pkgutil

    import nonebot.adapters

    names: dict[str, str] = {}

    def walk(package: Any, depth: int) -> None:
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            try:
                loaded = importlib.import_module(module.name)
            except Exception:  # an adapter that does not import cannot have served the bot either
                continue
            adapter = getattr(loaded, "Adapter", None)
            if adapter is not None and callable(getattr(adapter, "get_name", None)):
                names[adapter.get_name()] = module.name
            elif module.ispkg and depth:
                walk(loaded, depth - 1)

    walk(nonebot.adapters, 1)
    return names


def platform_problem(platform: str) -> str | None:
    """Why `platform` cannot be whose ids these are, or None: a memory kept under a name no adapter
    has would never be found by anyone."""
    if platform == "OneBot V11":  # the default, and marshoai's: no need to import every adapter
        return None
    names = adapter_names()
    if platform.startswith("Satori/") and "Satori" in names:
        behind = platform.removeprefix("Satori/")
        # what the Satori server reports: discord, qq, telegram, matrix... in lower case
        if behind and behind == behind.strip().lower() and not any(c.isspace() for c in behind):
            return None
        lower = behind.strip().lower()
        hint = f" (did you mean 'Satori/{lower}'?)" if lower and not any(c.isspace() for c in lower) else ""
        return (f"--platform {platform!r}: a Satori server names its platforms in lower case, without "
                f"spaces (Satori/discord, Satori/qq){hint}")
    if platform in names:
        return None
    near = [name for name in names if name.casefold() == platform.casefold().replace("-", " ")]
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    satori_hint = ("; behind a Satori server, Satori/<platform> (e.g. Satori/discord)"
                   if "Satori" in names else "")
    return (f"--platform {platform!r} is not the name of an installed adapter{hint}. Installed: "
            f"{', '.join(sorted(names))}{satori_hint}")


async def command_import_memory(app: Any, path: Path, platform: str, from_groups: bool) -> int:
    """Import marshoai's memories into marsho's memory, once: a memory already kept is not kept
    twice, so running it again changes nothing."""
    from nonebot_plugin_marsho.exceptions import MarshoError
    from nonebot_plugin_marsho.store.memory import MemoryStore
    from nonebot_plugin_marsho.store.sql import SqlStore

    if refused := _import_refused(app, platform):
        say(f"error: {refused}", file=sys.stderr)
        return 1
    if path.is_dir():
        path = path / MARSHOAI_MEMORY_FILE
    try:
        found, problems = read_marshoai_memories(path)
    except ValueError as error:
        say(f"error: {error}", file=sys.stderr)
        return 1
    for problem in problems:
        say(f"! {problem}", file=sys.stderr)
    store = None
    try:
        store = SqlStore(app.database_url())  # the bot's own database; no endpoint is needed
        counts = await _import_all(app.config, MemoryStore(store), found, platform, from_groups)
    except MarshoError as error:
        say(f"error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # a URL SQLAlchemy cannot read, a driver not installed
        say(f"error: cannot open the database {_database_shown(app)}: {type(error).__name__}: {error}",
            file=sys.stderr)
        return 1
    finally:
        if store is not None:
            await store.close()
    _say_imported(app.config, counts, len(found), f"on {platform} from {path}", from_groups)
    return 1 if problems else 0


def _import_refused(app: Any, platform: str) -> str:
    """Why nothing may be imported ("" if it may): whatever .env says (the database, the
    limits) is what the bot will use, and the ids must be a platform's."""
    if app.config_error:
        return f"{app.config_error}. Fix .env first: nothing was imported."
    if problem := platform_problem(platform):
        return f"{problem}. Nothing was imported."
    return ""


def _database_shown(app: Any) -> str:
    """The bot's database URL with its password hidden (or the setting's name, if unreadable)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(app.database_url()).render_as_string(hide_password=True)
    except Exception:
        return "MARSHO_DATABASE_URL"


@dataclass
class _Imported:
    """What an import did, counted for its summary."""

    kept: int = 0
    again: int = 0
    """Already kept (imported before)."""
    cut: int = 0
    """Longer than MARSHO_MEMORY_CHARS."""
    left_out: int = 0
    """Older than a person's newest MARSHO_MEMORY_PER_USER."""
    moved: int = 0
    """Imported before for private chats only, now used in groups too."""


async def _import_all(config: Any, memories: Any, found: dict[str, list[str]], platform: str,
                      from_groups: bool) -> _Imported:
    """Keep each person's memories (`found`, by user id on `platform`) in `memories`."""
    from nonebot_plugin_marsho.store.memory import IMPORTED, same_text

    limit, chars = config.marsho_memory_per_user, config.marsho_memory_chars
    counts = _Imported()
    for user, texts in found.items():
        owner = f"{platform}:{user}"
        learned_in = "import" if from_groups else f"{platform}:private:{user}"
        # the newest `limit` (the older ones would only push each other out, and running
        # the import again would bring them back in turn)
        counts.left_out += max(0, len(texts) - limit)
        # imported before without --from-groups: that private copy becomes this one
        private_copies = [m for m in await memories.of_owner("user", owner, private=True)
                          if m.author == IMPORTED] if from_groups else []
        for text in texts[-limit:]:
            if len(text) > chars:
                text, counts.cut = text[:chars - 1] + "…", counts.cut + 1
            copies = [m.id for m in private_copies if same_text(m.text, text)]
            counts.moved += await memories.delete(copies) > 0
            added = await memories.add("user", owner, text, learned_in=learned_in,
                                       private=not from_groups, author=IMPORTED, limit=limit)
            counts.again += added.again
            counts.kept += not added.again
    return counts


def _say_imported(config: Any, counts: _Imported, people: int, source: str, from_groups: bool) -> None:
    """The import's summary, and where the memories will be used."""
    limit, chars = config.marsho_memory_per_user, config.marsho_memory_chars
    again = counts.again
    say(f"Imported {_count(counts.kept, 'memory', 'memories')} of {_count(people, 'person', 'people')} "
        f"{source}"
        + (f"; {again} {'was' if again == 1 else 'were'} already kept" if again else "")
        + (f"; {counts.moved} imported before for private chats only now used in groups too"
           if counts.moved else "")
        + (f"; {counts.cut} cut to MARSHO_MEMORY_CHARS={chars} characters" if counts.cut else "")
        + (f"; {counts.left_out} older ones left out by MARSHO_MEMORY_PER_USER={limit}"
           if counts.left_out else "") + ".")
    if from_groups and config.marsho_memory_scope == "chat":
        say("! MARSHO_MEMORY_SCOPE=chat uses a memory only in the chat it was learned in, and marshoai "
            "did not record one: these are unused until the scope is `user` (or import them without "
            "--from-groups, for each person's private chat).", file=sys.stderr)
    elif from_groups:
        say("They are used in the groups of each person and in their private chat (--from-groups).")
    else:
        say("They are used only in each person's private chat: marshoai did not record where it learned "
            "them, and what was told in private must never reach a group (--from-groups if your bot "
            "only ever talked in groups).")


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PACKAGE}",
        description="Use marsho's tools and endpoint from the shell, with the settings of .env.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show NoneBot's log")
    commands = parser.add_subparsers(dest="command", required=True)
    tools = commands.add_parser(
        "tools", help="list and check every toolkit, and start every MCP server of mcp.json; "
                      "exit 1 on any error")
    tools.add_argument("--schemas", action="store_true", help="print each tool's parameters schema")
    call = commands.add_parser("call", help="run one tool as the model's call would (an MCP "
                                            "server's tool: <server>__<tool>)")
    call.add_argument("name", help="full tool name, e.g. clock__now")
    call.add_argument("arguments", nargs="?", default="{}", help="JSON object of arguments")
    for command in (tools, call):
        command.add_argument("--wait", type=float, default=MCP_WAIT, metavar="SECONDS",
                             help=f"seconds an MCP server has to start and answer (default {MCP_WAIT:g})")
    ask = commands.add_parser("ask", help="ask once, printing each tool call as it happens")
    ask.add_argument("text", help="the question")
    memory = commands.add_parser(
        "import-memory", help="import nonebot-plugin-marshoai's memories (its memory.json) once")
    memory.add_argument("path", type=Path, help="marshoai's memory.json, or the folder holding it")
    memory.add_argument("--platform", default="OneBot V11",
                        help="the adapter the user ids belong to (default: OneBot V11, as marshoai's were)")
    memory.add_argument("--from-groups", action="store_true",
                        help="the memories were learned in groups: use them there too (default: only in "
                             "each person's private chat, since marshoai did not record where)")
    args = parser.parse_args(argv)
    app = _load_plugin(args.verbose).marsho
    if args.command == "tools":
        return asyncio.run(command_tools(app, args.wait, args.schemas))
    if args.command == "call":
        return asyncio.run(command_call(app, args.name, args.arguments, args.wait))
    if args.command == "import-memory":
        return asyncio.run(command_import_memory(app, args.path, args.platform, args.from_groups))
    return asyncio.run(command_ask(app, args.text))


if __name__ == "__main__":
    sys.exit(main())
