"""NoneBot wiring: required plugins, metadata, matchers, and building the engine at startup."""

from pathlib import Path
from typing import Any

from nonebot import get_driver, require
from nonebot.log import logger
from nonebot.plugin import PluginMetadata, inherit_supported_adapters

require("nonebot_plugin_localstore")
require("nonebot_plugin_alconna")

import nonebot_plugin_localstore as localstore  # noqa: E402

from .agent.engine import Engine  # noqa: E402
from .agent.llm import LLMClient  # noqa: E402
from .agent.persona import Nicknames, base_prompt  # noqa: E402
from .agent.praises import PraisesFile  # noqa: E402
from .agent.tokens import load_counter  # noqa: E402
from .chat.matchers import MODEL_SETTING, runtime  # noqa: E402
from .chat.poke import poke  # noqa: E402, F401  (registers the poke matcher)
from .chat.render import error_text  # noqa: E402
from .config import Config, config_error, legacy_notes, plugin_config  # noqa: E402
from .exceptions import StoreError  # noqa: E402
from .i18n import t  # noqa: E402
from .store.sql import SqlStore  # noqa: E402
from .tools import (  # noqa: E402
    BUILTIN_TOOLSET,
    LoadProblem,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)
from .tools.webservices import load_webservices  # noqa: E402

__plugin_meta__ = PluginMetadata(
    name="Marsho",
    description="Talk to an LLM that can use tools: `marsho <question>` in groups and private chats",
    usage=(
        "marsho <question>: ask (also /marsho, any case, or an alias such as 小棉)\n"
        "marsho.reset: forget this conversation\n"
        "marsho.tools: loaded tools and toolkits that failed to load\n"
        "marsho.calls: the tool calls of the last answer, with their results\n"
        "marsho.history: how much of this conversation is kept\n"
        "marsho.nickname <name>: what Marsho calls you\n"
        "reply to a message with marsho <question>: the quoted message goes with it\n"
        "marsho.help: this help"
    ),
    type="application",
    homepage="https://github.com/marsho-dev/nonebot-plugin-marsho",
    config=Config,
    supported_adapters=inherit_supported_adapters("nonebot_plugin_alconna"),
)

driver = get_driver()


def user_toolset_dir() -> Path:
    """The toolset folder in the plugin's data folder, where owners put their toolkits."""
    folder = localstore.get_plugin_data_dir() / "tools"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def toolset_sources() -> list[ToolsetSource]:
    """Built-in toolkits, then the user's toolset folder, then MARSHO_TOOLKIT_DIRS, in that order."""
    return [
        ToolsetSource(BUILTIN_TOOLSET, "built-in", must_exist=False),
        ToolsetSource(user_toolset_dir(), "data dir"),
        *(ToolsetSource(path, "MARSHO_TOOLKIT_DIRS") for path in plugin_config.marsho_toolkit_dirs),
    ]


def load_configured_toolset() -> Toolset:
    """Every toolkit the bot loads, with the settings of `.env` applied, and the web services
    of MARSHO_WEBSERVICES_FILE (or the data folder's webservices.json)."""
    toolset = load_toolset(
        toolset_sources(),
        plugin_config.marsho_disabled_toolkits,
        enabled=plugin_config.marsho_enabled_toolkits,
        settings=plugin_config.marsho_toolkit_settings,
        disabled_tools=plugin_config.marsho_disabled_tools,
        permissions=plugin_config.marsho_tool_permissions,
    )
    path = plugin_config.marsho_webservices_file or localstore.get_plugin_data_dir() / "webservices.json"
    if plugin_config.marsho_webservices_file and not path.is_file():
        toolset.problems.append(LoadProblem("", path, "MARSHO_WEBSERVICES_FILE names no file"))
    services, problems = load_webservices(path)
    toolset.problems.extend(problems)
    if services is not None:
        if any(toolkit.name == services.name for toolkit in toolset.toolkits):
            toolset.problems.append(LoadProblem(services.name, path, f"a toolkit named "
                                                f"{services.name!r} is already loaded; rename one"))
        else:
            toolset.add(services)
    return toolset


def log_toolset(toolset: Toolset) -> None:
    """Tell the owner what loaded, what failed and why, and settings that name nothing."""
    logger.info(f"marsho: your own toolkits go in {user_toolset_dir()}")
    for toolkit in toolset.toolkits:
        logger.info(f"marsho: toolkit {toolkit.name} ({toolkit.source}) loaded: "
                    + ", ".join(tool.name for tool in toolkit.tools))
    for problem in toolset.warnings:
        logger.warning(f"marsho: toolkit {problem.toolkit}: {problem}")
    for name, problems in toolset.failed_toolkits().items():
        logger.error(f"marsho: toolkit {name or '(toolset folder)'} not loaded: "
                     + "; ".join(str(p) for p in problems))
    if toolset.available:
        logger.info("marsho: off until MARSHO_ENABLED_TOOLKITS names them: "
                    f"{', '.join(toolset.available)} (what each sends where: "
                    "python -m nonebot_plugin_marsho tools, or the README)")
    loaded = {toolkit.name for toolkit in toolset.toolkits}
    for name in sorted(set(plugin_config.marsho_enabled_toolkits) - loaded):
        logger.warning(f"marsho: MARSHO_ENABLED_TOOLKITS names {name!r}, which did not load")
    for name in sorted(set(plugin_config.marsho_toolkit_settings) - loaded):
        logger.warning(f"marsho: MARSHO_TOOLKIT_SETTINGS names toolkit {name!r}, which is not loaded")
    known = set(toolset.tools) | loaded | set(toolset.disabled)
    for name in sorted(set(plugin_config.marsho_tool_permissions) - known):
        logger.warning(f"marsho: MARSHO_TOOL_PERMISSIONS names {name!r}: no such tool or toolkit")
    for name in sorted(set(plugin_config.marsho_disabled_tools) - set(toolset.disabled)):
        logger.warning(f"marsho: MARSHO_DISABLED_TOOLS names {name!r}: no such tool")


@driver.on_startup
async def start_marsho() -> None:
    """Load toolkits and connect the engine; report, never raise, so the bot always starts."""
    for note in legacy_notes:
        logger.warning(f"marsho: {note}")
    if config_error:
        runtime.problem = t("problem.config", error=config_error)
        logger.error(f"marsho: {config_error}. Fix .env and restart; until then marsho answers "
                     "every chat with this message.")
        return
    try:
        toolset = load_configured_toolset()
    except Exception as error:
        runtime.problem = t("problem.toolkits", error=f"{type(error).__name__}: {error}")
        logger.opt(exception=error).error(f"marsho: {runtime.problem}")
        return
    log_toolset(toolset)
    llm = LLMClient(
        base_url=plugin_config.marsho_base_url,
        api_key=plugin_config.marsho_api_key,
        model=plugin_config.marsho_model,
        timeout=plugin_config.marsho_timeout,
        tool_mode=plugin_config.marsho_tool_mode,
        tool_mode_by_model=plugin_config.marsho_tool_mode_by_model,
    )
    if llm.needs_key:
        logger.warning(f"marsho: MARSHO_API_KEY is not set; {llm.base_url} will refuse requests. "
                       "Set it in .env (chats will be told so until then).")
    runner = ToolRunner(
        toolset,
        timeout=plugin_config.marsho_tool_timeout,
        max_parallel=plugin_config.marsho_max_parallel_tools,
        max_result_bytes=plugin_config.marsho_max_tool_result_bytes,
    )
    store = SqlStore(database_url())
    try:
        await store.start()
        llm.model = await store.get_setting(MODEL_SETTING) or llm.model
    except StoreError as error:
        runtime.problem = t("problem.database", error=error_text(error))
        logger.error(f"marsho: {runtime.problem}. Check MARSHO_DATABASE_URL.")
        await store.close()
        return
    runtime.mcp = await start_mcp(toolset)
    runtime.nicknames = Nicknames(store)
    praises = plugin_config.marsho_praises_file or localstore.get_plugin_data_dir() / "praises.json"
    if plugin_config.marsho_praises_file and not praises.is_file():
        logger.error(f"marsho: MARSHO_PRAISES_FILE={praises} does not exist")
    runtime.praises = PraisesFile(praises, lambda problem: logger.error(f"marsho: {problem}"))
    runtime.engine = Engine(
        llm,
        toolset,
        store,
        runner,
        # the static part; chats add the time and the asker's nickname each turn
        system_prompt=base_prompt(plugin_config.marsho_system_prompt,
                                  plugin_config.marsho_additional_prompt, runtime.praises.people()),
        max_tool_rounds=plugin_config.marsho_max_tool_rounds,
        max_history=plugin_config.marsho_max_history,
        max_tokens=plugin_config.marsho_history_tokens,
        counter=await load_counter(llm.model),
    )
    logger.info(f"marsho: ready, model {llm.model} at {llm.base_url}, {len(toolset.tools)} tools, "
                f"history in {store.safe_url} ({runtime.engine.counter.name} token counts); "
                f"trigger words: {', '.join(plugin_config.trigger_names)}")


def database_url() -> str:
    """MARSHO_DATABASE_URL, or SQLite in the plugin's data folder."""
    if plugin_config.marsho_database_url:
        return plugin_config.marsho_database_url
    return f"sqlite+aiosqlite:///{localstore.get_plugin_data_dir() / 'marsho.db'}"


async def start_mcp(toolset: Toolset) -> Any:
    """Connect the MCP servers of MARSHO_MCP_FILE (or the data folder's mcp.json), if any; a
    server that fails is retried in the background and never keeps the bot from starting."""
    path = plugin_config.marsho_mcp_file or localstore.get_plugin_data_dir() / "mcp.json"
    if not path.is_file():
        if plugin_config.marsho_mcp_file:
            logger.error(f"marsho: MARSHO_MCP_FILE={path} does not exist")
        return None
    from .tools.mcp import McpManager, read_mcp_config  # the MCP SDK is loaded only when used

    servers, problems = read_mcp_config(path)
    for problem in problems:
        logger.error(f"marsho: {problem}")
    if not servers:
        return None
    manager = McpManager(servers, toolset, call_timeout=plugin_config.marsho_tool_timeout)
    await manager.start()
    for name, state in manager.status().items():
        logger.info(f"marsho: MCP server {name}: {state}")
    return manager


@driver.on_shutdown
async def stop_marsho() -> None:
    """Close the endpoint's connections, the tool threads and the database."""
    engine, runtime.engine = runtime.engine, None
    mcp, runtime.mcp = runtime.mcp, None
    if mcp is not None:
        await mcp.stop()
    if engine is not None:
        await engine.llm.close()
        engine.runner.close()
        if isinstance(engine.history, SqlStore):
            await engine.history.close()
