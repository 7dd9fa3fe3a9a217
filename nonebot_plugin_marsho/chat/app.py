"""The running bot: one object made from the config (fair use, poke cooldowns, the prompt) whose
services (engine, database, nicknames, MCP servers, web services...) `start` builds whole or not
at all, handed to every handler, torn down at shutdown in reverse order of building. Tests build
their own (`with_config(...)`) and make handlers use it (`running.using(app)`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from nonebot import get_driver
from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema
from sqlalchemy.engine import make_url

from ..agent.chatlog import ChatLog
from ..agent.engine import Engine
from ..agent.group_actions import GROUP_TOOLS
from ..agent.group_actions import TOOLKIT as GROUP_TOOLKIT
from ..agent.knowledge import DOCS_TOOLS, KnowledgeBase
from ..agent.knowledge import TOOLKIT as DOCS_TOOLKIT
from ..agent.llm import LLMClient
from ..agent.memory import MEMORY_TOOLS, TOOLKIT, MemoryBook
from ..agent.metering import Limits, Meter
from ..agent.persona import GroupPersonas, Nicknames, Prompt, clock
from ..agent.praises import PraisesFile
from ..agent.reminders import REMINDER_TOOLS
from ..agent.reminders import TOOLKIT as REMINDERS_TOOLKIT
from ..agent.summary import Summarizer
from ..config import Config, language_alias
from ..exceptions import NotReadyError, StoreError
from ..i18n import LANGUAGES, Language, Texts
from ..redaction import SECRETS, logger
from ..store.memory import MemoryStore
from ..store.sql import SqlStore
from ..store.usage import UsageStore
from ..tools import BUILTIN_TOOLSET, LoadProblem, ToolRunner, Toolset, ToolsetSource, load_toolset
from ..tools.model import Toolkit
from ..tools.runner import SECRET_PRESET
from ..tools.schema import ToolDefinitionError, check_permission
from .active import ActiveReplies
from .debounce import Debounce
from .fairuse import Cooldown, FairUse
from .group_actions import GroupActions
from .models import chat_model, judge_model, summary_model
from .outgoing import Delivery
from .reminders import Reminders, start_reminders
from .render import brief_text, error_text
from .targets import TargetBook

if TYPE_CHECKING:
    from ..tools.mcp import McpManager


MARSHOAI_MCP_FILE = Path("config/marshoai/mcp.json")
"""Where nonebot-plugin-marshoai keeps its MCP servers: in the bot's working directory."""


T = TypeVar("T")


@dataclass
class Services:
    """What the start builds, all of it or none: the handlers' services once the bot is ready.
    Each is torn down, in reverse order of building, by the start's exit stack."""

    engine: Engine
    store: SqlStore
    """The bot's database (the engine's history, and every service's below)."""
    chat_log: ChatLog
    active: ActiveReplies
    meter: Meter
    nicknames: Nicknames
    personas: GroupPersonas
    memories: MemoryStore
    targets: TargetBook
    """Where each chat is, saved, so the bot can speak there later (outside a handler)."""
    summary_llm: LLMClient | None = None
    judge: LLMClient | None = None
    mcp: McpManager | None = None
    memory_book: MemoryBook | None = None
    group_actions: GroupActions | None = None
    reminders: Reminders | None = None
    """The reminders' book (tools, listings, cancels) and the loop that sends them."""
    knowledge: KnowledgeBase | None = None
    """Each chat's documents (MARSHO_KB), None while it is off."""


class Built(Generic[T]):
    """A service of `Marsho.services`, read and set through the app: NotReadyError saying why
    (`Marsho.problem`) until the bot is ready, or None for those a setting may leave out
    (`optional`)."""

    def __init__(self, *, optional: bool = False) -> None:
        self.optional = optional
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, app: None, owner: type | None = None) -> Built[T]: ...

    @overload
    def __get__(self, app: Marsho, owner: type | None = None) -> T: ...

    def __get__(self, app: Marsho | None, owner: type | None = None) -> Built[T] | T:
        if app is None:
            return self
        if app.services is None and self.optional:
            return cast(T, None)
        return cast(T, getattr(app.built(), self.name))

    def __set__(self, app: Marsho, value: T) -> None:
        setattr(app.built(), self.name, value)


class StageFailed(Exception):
    """A stage of the start failed; `stage` names what it was building, `__cause__` why."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Whatever fails in the block fails the start's stage `name`."""
    try:
        yield
    except Exception as error:
        raise StageFailed(name) from error


def language_on_its_own(default: Language) -> Language:
    """MARSHO_LANG read apart from the other settings (as config.read_config reads it for its
    complaint): what a bot whose other settings are broken still speaks; `default` when it is
    broken too."""
    try:
        value = language_alias(getattr(get_driver().config, "marsho_lang", default))
    except ValueError:  # NoneBot not initialised
        return default
    return value if value in LANGUAGES else default


@dataclass(repr=False)
class Marsho:
    """Everything the handlers use, built from one Config; nothing else in the plugin holds state.

    What needs no I/O (texts, prompt, limits, debounce) is made with it; the rest (`Services`)
    by `start`, whole or not at all, and read through the names below (`app.engine`...)."""

    config: Config
    data_dir: Path
    """The plugin's data folder (localstore): toolkits, praises.json, mcp.json, the database."""
    config_error: str = ""
    """Why `.env` could not be read (the config is then the defaults and every chat is told)."""
    legacy_notes: list[str] = field(default_factory=list)
    """marshoai keys read in place of ours or ignored (and why), MARSHO_* keys that are no
    setting: logged at startup (config.read_config)."""
    services: Services | None = None
    """What the start built; None until the bot is ready (and after `stop`)."""
    problem: str = ""
    """Why the bot is not ready (still starting, a broken setting, the database down), in detail."""
    problem_brief: str = ""
    """The catalogue key of what members are told instead of `problem` ("" while starting)."""
    texts: Texts = field(init=False)
    prompt: Prompt = field(init=False)
    fair_use: FairUse = field(init=False)
    poke_cooldown: Cooldown = field(init=False)
    debounce: Debounce = field(init=False)
    """Messages of one person in one chat that join one question (MARSHO_DEBOUNCE_SECONDS)."""
    _standby: ActiveReplies = field(init=False, repr=False)
    _stack: AsyncExitStack | None = field(init=False, default=None, repr=False)
    """What tears the services down; only the app that built them has it (not `with_config`'s)."""
    _delivery: tuple[tuple[Any, ...], Delivery] | None = field(init=False, default=None, repr=False)
    """The last `delivery()` and the settings it was made of."""

    engine = Built[Engine | None](optional=True)
    """The engine; None until the bot is ready (handlers use `require_engine`)."""
    nicknames = Built[Nicknames]()
    chat_log = Built[ChatLog]()
    """The recent chat of groups that share it (`marsho.context`)."""
    personas = Built[GroupPersonas]()
    """Each group's own persona (`marsho.persona`)."""
    meter = Built[Meter]()
    """The owner's bill: usage recorded, quotas checked (`marsho.usage`, `marsho.quota`)."""
    memories = Built[MemoryStore]()
    """What marsho remembers about people and groups (`marsho.memory`), kept even while
    MARSHO_MEMORY is off, so people can still see and delete it."""
    targets = Built[TargetBook]()
    """Each chat's saved target, to speak there later (`send_to`) or after a restart."""
    memory_book = Built[MemoryBook | None](optional=True)
    """The memory tools and the memories recalled beside each question; None while MARSHO_MEMORY
    is off."""
    judge = Built[LLMClient | None](optional=True)
    """The cheap model asked whether to answer unsolicited (MARSHO_ACTIVE_JUDGE_MODEL)."""
    summary_llm = Built[LLMClient | None](optional=True)
    """The model that writes summaries of trimmed history, when it is not the chat model
    (MARSHO_SUMMARY_MODEL)."""
    mcp = Built["McpManager | None"](optional=True)
    group_actions = Built[GroupActions | None](optional=True)
    """The group tools (MARSHO_GROUP_ACTIONS), None while they are off."""
    knowledge = Built[KnowledgeBase | None](optional=True)
    """Each chat's knowledge base (`marsho.kb`, the `docs` tool, the passages beside each
    question); None while MARSHO_KB is off."""

    def __post_init__(self) -> None:
        config = self.config
        # a broken setting leaves the config at its defaults: the chats are still told in the
        # language the owner chose, when that setting is fine
        language = language_on_its_own(config.marsho_lang) if self.config_error else config.marsho_lang
        self.texts = Texts(language)
        self.problem = self.problem or self.texts("problem.starting")
        praises = config.marsho_praises_file or self.data_dir / "praises.json"
        self.prompt = Prompt(
            persona=config.marsho_system_prompt, additional=config.marsho_additional_prompt,
            praises=PraisesFile(praises, lambda problem: logger.error(f"marsho: {problem}")),
            language=config.marsho_lang, time_prompt=config.marsho_time_prompt,
            now=clock(config.marsho_timezone),
        )
        self.fair_use = FairUse.from_config(config)
        self.poke_cooldown = Cooldown(config.marsho_poke_cooldown)
        self.debounce = Debounce(config.marsho_debounce_seconds)
        # off everywhere until the groups' choices are read, so nothing answers unsolicited
        # before the bot is ready; the accounts it ignores are ignored from the first message
        self._standby = ActiveReplies(None, ignored=config.marsho_ignored_users, now=self.prompt.now)

    def __repr__(self) -> str:
        """Short: NoneBot's trace line of every handler run formats the matcher's state, which
        holds the app (the whole config and services, formatted for every turn, otherwise)."""
        return f"<Marsho {'ready' if self.services is not None else 'not ready'}>"

    @property
    def ready(self) -> bool:
        """Whether the services are built (the rules' cheap check before they use one)."""
        return self.services is not None

    def built(self) -> Services:
        """The services, or NotReadyError saying what to fix."""
        if self.services is None:
            raise NotReadyError(self.problem)
        return self.services

    @property
    def active(self) -> ActiveReplies:
        """Replies without being called (`marsho.active`): the groups' choices and the guards
        (off everywhere until the bot is ready)."""
        return self._standby if self.services is None else self.services.active

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # NoneBot checks what a dependency returns against the parameter's type with pydantic:
        # an instance check, not a field-by-field validation of the whole bot
        return core_schema.is_instance_schema(cls)

    def with_config(self, **settings: Any) -> Marsho:
        """This bot with some settings changed (and fresh limits, cooldowns, prompt and recent-chat
        settings built from them), sharing its engine, database, nicknames and MCP servers (which
        its own `stop` leaves alone)."""
        config = Config.model_validate({**self.config.model_dump(), **settings})
        changed = dataclasses.replace(self, config=config)
        if self.services is not None:
            built = self.services
            changed.services = dataclasses.replace(
                built, active=built.active.with_config(config, changed.prompt.now),
                chat_log=built.chat_log.with_settings(
                    size=config.marsho_group_context, ttl=config.marsho_group_context_ttl,
                    default_on=config.marsho_group_context_default == "on"))
        return changed

    def require_engine(self) -> Engine:
        """The engine, or NotReadyError saying what to fix."""
        return self.built().engine

    def delivery(self) -> Delivery:
        """How answers go out, from the settings (made again only when one of them changed: a
        Delivery is frozen, so every turn may share it)."""
        config = self.config
        settings = (config.marsho_long_answer, config.marsho_split_chars, config.marsho_max_split_messages,
                    config.marsho_render_latex, config.marsho_render_inline_latex,
                    config.marsho_render_markdown_images, config.marsho_image_max_bytes,
                    config.marsho_image_timeout, config.marsho_name, config.marsho_max_forward_nodes,
                    self.texts)
        kept = self._delivery
        if kept is not None and kept[0] == settings:
            return kept[1]
        delivery = Delivery(
            long_answer=config.marsho_long_answer, split_chars=config.marsho_split_chars,
            max_split_messages=config.marsho_max_split_messages, render_latex=config.marsho_render_latex,
            render_inline_latex=config.marsho_render_inline_latex,
            render_images=config.marsho_render_markdown_images, image_max_bytes=config.marsho_image_max_bytes,
            image_timeout=config.marsho_image_timeout, name=config.marsho_name,
            max_forward_nodes=config.marsho_max_forward_nodes, texts=self.texts,
        )
        self._delivery = (settings, delivery)
        return delivery

    # assembling

    def user_toolset_dir(self) -> Path:
        """The toolset folder in the plugin's data folder, where owners put their toolkits."""
        folder = self.data_dir / "tools"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def toolset_sources(self) -> list[ToolsetSource]:
        """Built-in toolkits, then the user's toolset folder, then MARSHO_TOOLKIT_DIRS, in that order."""
        return [
            ToolsetSource(BUILTIN_TOOLSET, "built-in", must_exist=False),
            ToolsetSource(self.user_toolset_dir(), "data dir"),
            *(ToolsetSource(path, "MARSHO_TOOLKIT_DIRS") for path in self.config.marsho_toolkit_dirs),
        ]

    def load_toolset(self) -> Toolset:
        """Every toolkit the bot loads, with the settings of `.env` applied, and the web services
        of MARSHO_WEBSERVICES_FILE (or the data folder's webservices.json)."""
        config = self.config
        toolset = load_toolset(
            self.toolset_sources(),
            config.marsho_disabled_toolkits,
            enabled=config.marsho_enabled_toolkits,
            settings=config.marsho_toolkit_settings,
            disabled_tools=config.marsho_disabled_tools,
            permissions=config.marsho_tool_permissions,
        )
        path = config.marsho_webservices_file or self.data_dir / "webservices.json"
        if config.marsho_webservices_file and not path.is_file():
            toolset.problems.append(LoadProblem("", path, "MARSHO_WEBSERVICES_FILE names no file"))
        services: Toolkit | None = None
        problems: list[LoadProblem] = []
        if path.exists():  # the module (its file's pydantic models) loads only for a file
            from ..tools.webservices import load_webservices

            services, problems = load_webservices(path)
        toolset.problems.extend(problems)
        if services is not None:
            if any(toolkit.name == services.name for toolkit in toolset.toolkits):
                toolset.problems.append(LoadProblem(services.name, path, f"a toolkit named "
                                                    f"{services.name!r} is already loaded; rename one"))
            else:
                toolset.add(services)
        return toolset

    def log_toolset(self, toolset: Toolset) -> None:
        """Tell the owner what loaded, what failed and why, and settings that name nothing."""
        config = self.config
        logger.info(f"marsho: your own toolkits go in {self.user_toolset_dir()}")
        for toolkit in toolset.toolkits:
            logger.info(f"marsho: toolkit {toolkit.name} ({toolkit.source}) loaded: "
                        + ", ".join(tool.name for tool in toolkit.tools))
        for problem in toolset.warnings:
            logger.warning(f"marsho: toolkit {problem.toolkit}: {problem}")
        for name, problems in toolset.failed_toolkits().items():
            logger.error(f"marsho: toolkit {name or '(toolset folder)'} not loaded: "
                         + "; ".join(str(p) for p in problems))
        if toolset.available:
            docs = "docs/zh/toolkits.md" if config.marsho_lang == "zh-CN" else "docs/en/toolkits.md"
            logger.info("marsho: off until MARSHO_ENABLED_TOOLKITS names them: "
                        f"{', '.join(toolset.available)} (what each sends where: "
                        f"python -m nonebot_plugin_marsho tools, or {docs})")
        loaded = {toolkit.name for toolkit in toolset.toolkits}
        for name in sorted(set(config.marsho_enabled_toolkits) - loaded):
            logger.warning(f"marsho: MARSHO_ENABLED_TOOLKITS names {name!r}, which did not load")
        for name in sorted(set(config.marsho_toolkit_settings) - loaded):
            logger.warning(f"marsho: MARSHO_TOOLKIT_SETTINGS names toolkit {name!r}, which is not loaded")
        # the memory tools join later (add_memory), and these settings apply to them too
        memory = {TOOLKIT, *MEMORY_TOOLS} if config.marsho_memory else set()
        memory |= {GROUP_TOOLKIT, *GROUP_TOOLS} if config.marsho_group_actions else set()  # add_group_actions
        memory |= {REMINDERS_TOOLKIT, *REMINDER_TOOLS}  # start_reminders
        memory |= {DOCS_TOOLKIT, *DOCS_TOOLS} if config.marsho_kb else set()  # add_knowledge
        known = set(toolset.tools) | loaded | set(toolset.disabled) | memory
        for name in sorted(set(config.marsho_tool_permissions) - known):
            logger.warning(f"marsho: MARSHO_TOOL_PERMISSIONS names {name!r}: no such tool or toolkit")
        for name in sorted(set(config.marsho_disabled_tools) - set(toolset.disabled) - memory):
            logger.warning(f"marsho: MARSHO_DISABLED_TOOLS names {name!r}: no such tool")

    def database_url(self) -> str:
        """MARSHO_DATABASE_URL, or SQLite in the plugin's data folder."""
        if self.config.marsho_database_url:
            return self.config.marsho_database_url
        return f"sqlite+aiosqlite:///{self.data_dir / 'marsho.db'}"

    def mcp_file(self) -> Path:
        """The MCP servers' file: MARSHO_MCP_FILE, else `mcp.json` in the data folder, else, when
        only it exists, nonebot-plugin-marshoai's `config/marshoai/mcp.json` (the same
        `mcpServers` format). Logs which file it is when there is one."""
        path = self.config.marsho_mcp_file or self.data_dir / "mcp.json"
        old = MARSHOAI_MCP_FILE.resolve()
        if not self.config.marsho_mcp_file and not path.is_file() and old.is_file():
            logger.info(f"marsho: MCP servers from nonebot-plugin-marshoai's {old} "
                        f"(copy it to {path} to keep it there)")
            return old
        if path.is_file():
            logger.info(f"marsho: MCP servers from {path}")
        return path

    async def start(self) -> None:
        """Build every service, whole or not at all; report, never raise, so the bot always
        starts. A stage that fails tears down what the stages before it built (last built first)
        and says what failed: in the log, and to every chat until the bot is restarted."""
        if self._stack is not None:  # started again: the first start's services go first
            await self.stop()
        config, t = self.config, self.texts
        SECRETS.add(*held_secrets(config))
        for note in self.legacy_notes:
            logger.warning(f"marsho: {note}")
        if self.config_error:
            self.problem = t("problem.config", error=self.config_error)
            self.problem_brief = "brief.config"
            logger.error(f"marsho: {self.config_error}. Fix .env and restart; until then marsho answers "
                         f"every question and command ({config.marsho_name}.help aside) with this "
                         f"message for superusers, and for everyone else with: "
                         f"{brief_text(t, 'brief.config')}")
            return
        if config.marsho_praises_file and not config.marsho_praises_file.is_file():
            logger.error(f"marsho: MARSHO_PRAISES_FILE={config.marsho_praises_file} does not exist")
        stack = AsyncExitStack()
        try:
            services = await self.build_services(stack)
        except StageFailed as failed:
            self._report(failed.stage, failed.__cause__ or failed)
            await tear_down(stack)
            return
        except BaseException:  # cancelled while starting: nothing it built outlives it
            await tear_down(stack)
            raise
        self.services, self._stack = services, stack
        self._log_ready(services)

    async def build_services(self, stack: AsyncExitStack) -> Services:
        """Every service, stage by stage, each one's teardown pushed on `stack` as it is made;
        a stage that fails raises StageFailed naming it. The one place services are built."""
        config = self.config
        with stage("toolkits"):
            toolset = self.load_toolset()
            self.log_toolset(toolset)
            runner = ToolRunner(
                toolset,
                timeout=config.marsho_tool_timeout,
                max_parallel=config.marsho_max_parallel_tools,
                max_result_bytes=config.marsho_max_tool_result_bytes,
                max_calls=config.marsho_max_tool_calls,
            )
            stack.callback(runner.close)
        with stage("models"):
            llm, summary_llm, judge = self._models(stack)
        with stage("database open"):
            store = self._open_database()
            stack.push_async_callback(store.close)
        with stage("engine"):
            engine = Engine(
                llm, toolset, store, runner,
                max_tool_rounds=config.marsho_max_tool_rounds,
                max_history=config.marsho_max_history,
                max_tokens=config.marsho_history_tokens,
                picture_placeholder=self.texts("image.placeholder"),
            )
            engine.summarizer = self.build_summarizer(engine, summary_llm)
        with stage("database start"):
            await store.start()
            if await engine.restore_model():  # chosen with marsho.model, which wins over .env
                llm.model_setting = f"{config.marsho_name}.model"
        with stage("recent chat"):
            chat_log = ChatLog(store, size=config.marsho_group_context, ttl=config.marsho_group_context_ttl,
                               default_on=config.marsho_group_context_default == "on")
            stack.push_async_callback(chat_log.close)
            await chat_log.load()
        with stage("active replies"):
            active = ActiveReplies.from_config(config, store, self.prompt.now)
            await active.load()
        with stage("usage"):
            meter = Meter(
                UsageStore(store), now=self.prompt.now, counter=lambda: engine.counter,
                limits=Limits(user=config.marsho_user_daily_tokens, group=config.marsho_group_daily_tokens,
                              all=config.marsho_daily_tokens),
                retention_days=config.marsho_usage_retention_days)
            stack.push_async_callback(meter.close)
            bill(meter, llm, summary_llm, judge)
            await meter.roll_up()
        with stage("MCP servers"):
            mcp = await self.start_mcp(toolset, wait=0)  # slow servers join when they are ready
            if mcp is not None:
                stack.push_async_callback(mcp.stop)
            SECRETS.add(*held_secrets(config, toolset, mcp))
        with stage("memory"):
            memories = MemoryStore(store)
            book = self.add_memory(toolset, memories) if config.marsho_memory else None
            if book is not None:
                stack.push_async_callback(book.settled)  # its marks of use, before the database closes
        with stage("group actions"):
            group_actions = (await self.add_group_actions(toolset, store) if config.marsho_group_actions
                             else None)
        with stage("reminders"):
            reminders = start_reminders(self, toolset, store, stack)
        with stage("knowledge base"):
            knowledge = self.add_knowledge(toolset, store) if config.marsho_kb else None
            if knowledge is not None:
                stack.push_async_callback(knowledge.close)
        return Services(engine=engine, store=store, chat_log=chat_log, active=active, meter=meter,
                        nicknames=Nicknames(store), personas=GroupPersonas(store), memories=memories,
                        targets=TargetBook(store),
                        summary_llm=summary_llm, judge=judge, mcp=mcp, memory_book=book,
                        group_actions=group_actions, reminders=reminders, knowledge=knowledge)

    def _models(self, stack: AsyncExitStack) -> tuple[LLMClient, LLMClient | None, LLMClient | None]:
        """The chat model, and the summary model and the judge where settings ask for them (on
        the chat model's endpoint, keys and gate), each closed by `stack`."""
        config = self.config
        llm = chat_model(config)
        stack.push_async_callback(llm.close)
        if llm.needs_key:
            logger.warning(f"marsho: MARSHO_API_KEY is not set; {llm.base_url} will refuse requests. "
                           "Set it in .env (chats will be told so until then).")
        summary_llm: LLMClient | None = None
        judge: LLMClient | None = None
        if config.marsho_summary and config.marsho_summary_model:
            summary_llm = summary_model(config, llm.gate)
            stack.push_async_callback(summary_llm.close)
        if config.marsho_active_judge_model:  # no retries
            judge = judge_model(config, llm.gate)
            stack.push_async_callback(judge.close)
        return llm, summary_llm, judge

    def _open_database(self) -> SqlStore:
        """The bot's database (not yet started), or StoreError naming MARSHO_DATABASE_URL."""
        try:
            return SqlStore(self.database_url())
        except Exception as error:  # a URL SQLAlchemy cannot read, a driver not installed
            detail = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            raise StoreError(code="store.open", url="MARSHO_DATABASE_URL", detail=detail) from None

    def _report(self, failed: str, error: BaseException) -> None:
        """Say that stage `failed` of the start failed: in the log, and to every chat (`problem`)."""
        t = self.texts
        if failed == "toolkits":
            self.problem = t("problem.toolkits", error=f"{type(error).__name__}: {error}")
            self.problem_brief = "brief.toolkits"
            logger.opt(exception=error).error(f"marsho: could not load the toolkits: {error}")
        elif isinstance(error, StoreError):
            self.problem = t("problem.database", error=error_text(t, error))
            self.problem_brief = "brief.database"
            logger.error(f"marsho: cannot use the database: {error}. Check MARSHO_DATABASE_URL.")
        else:
            self.problem = t("problem.start", stage=failed, error=f"{type(error).__name__}: {error}")
            self.problem_brief = "brief.internal"
            logger.opt(exception=error).error(f"marsho: could not start ({failed}): {error}")

    def _log_ready(self, services: Services) -> None:
        engine, config = services.engine, self.config
        llm = engine.llm
        logger.info(f"marsho: ready, model {llm.model} at {llm.base_url}, {len(engine.toolset.tools)} tools, "
                    f"history in {services.store.safe_url} ({engine.counter.name} token counts); "
                    f"trigger words: {', '.join(config.trigger_names)}")
        for fallback in llm.endpoints[1:]:
            logger.info(f"marsho: {fallback.name}: model {fallback.model} at {fallback.base_url} "
                        f"({len(fallback.pool.keys)} key(s))")

    def add_memory(self, toolset: Toolset, memories: MemoryStore) -> MemoryBook:
        """The memory book on `memories`, its tools added to `toolset` (unless a toolkit of the
        user's is already called "memory": it is kept, and the clash reported)."""
        config = self.config
        book = MemoryBook(memories, per_chat=config.marsho_memory_scope == "chat",
                          per_user=config.marsho_memory_per_user, per_group=config.marsho_memory_per_group,
                          per_member=config.marsho_memory_per_member,
                          chars=config.marsho_memory_chars, recall=config.marsho_memory_recall,
                          days=config.marsho_memory_days, language=config.marsho_lang)
        # MARSHO_DISABLED_TOOLS, MARSHO_TOOL_PERMISSIONS and MARSHO_DISABLED_TOOLKITS apply as to
        # any toolkit (`memory__forget` for admins only...)
        self.add_builtin(toolset, book.toolkit(),
                         off_note="; the memories that fit each question are still recalled")
        return book

    async def add_group_actions(self, toolset: Toolset, store: SqlStore) -> GroupActions:
        """The group tools on `store`, added to `toolset` as add_memory adds its own (unless a
        toolkit of the user's is already called "group")."""
        config = self.config
        actions = GroupActions(store, kick=config.marsho_group_actions_kick,
                               per_hour=config.marsho_group_actions_per_hour)
        await actions.load()
        self.add_builtin(toolset, actions.toolkit())
        return actions

    def add_knowledge(self, toolset: Toolset, store: SqlStore) -> KnowledgeBase:
        """The knowledge base on `store` (with MARSHO_EMBEDDING_MODEL's embedder on the chat
        model's endpoint), its `docs` toolkit added to `toolset` as add_memory adds its own."""
        from ..agent.documents import Limits
        from ..agent.embeddings import Embedder
        from ..store.knowledge import KnowledgeStore

        config = self.config
        embedder = None
        if config.marsho_embedding_model:
            key = config.marsho_api_key or next(iter(config.marsho_api_keys), "")
            embedder = Embedder(config.marsho_embedding_model, base_url=config.marsho_base_url, api_key=key,
                                timeout=config.marsho_timeout)
        knowledge = KnowledgeBase(
            KnowledgeStore(store), embedder=embedder,
            limits=Limits(max_bytes=config.marsho_file_max_bytes, max_pages=config.marsho_file_max_pages),
            timeout=config.marsho_file_timeout, passage_chars=config.marsho_kb_passage_chars,
            max_passages=config.marsho_kb_max_passages, max_documents=config.marsho_kb_max_documents,
            recall=config.marsho_kb_recall, language=config.marsho_lang)
        self.add_builtin(toolset, knowledge.toolkit())
        return knowledge

    def add_builtin(self, toolset: Toolset, toolkit: Toolkit, *, off_note: str = "") -> bool:
        """Add a built-in toolkit made at startup to `toolset` with MARSHO_DISABLED_TOOLS,
        MARSHO_TOOL_PERMISSIONS and MARSHO_DISABLED_TOOLKITS applied as to any toolkit; False
        when it is off, or a toolkit of the user's already has its name (reported)."""
        config = self.config
        off = set(config.marsho_disabled_tools)
        toolset.disabled.extend(tool.name for tool in toolkit.tools if tool.name in off)
        toolkit.tools = [tool for tool in toolkit.tools if tool.name not in off]
        for tool in toolkit.tools:
            override = (config.marsho_tool_permissions.get(tool.name)
                        or config.marsho_tool_permissions.get(toolkit.name))
            try:
                if override:
                    tool.permission = check_permission(override, tool.name)
            except ToolDefinitionError as error:  # the tool keeps its own
                logger.warning(f"marsho: toolkit {toolkit.name}: MARSHO_TOOL_PERMISSIONS: {error}")
        clash = next((kit for kit in toolset.toolkits if kit.name == toolkit.name), None)
        if toolkit.name in config.marsho_disabled_toolkits:
            toolset.disabled.append(toolkit.name)
            logger.info(f"marsho: toolkit {toolkit.name} is off (MARSHO_DISABLED_TOOLKITS){off_note}")
            return False
        if clash is not None:
            problem = LoadProblem(toolkit.name, clash.path or Path(toolkit.name),
                                  f"a toolkit named {toolkit.name!r} is already loaded, so the built-in "
                                  "one is not; rename yours to use it")
            toolset.problems.append(problem)
            logger.error(f"marsho: toolkit {toolkit.name}: {problem}")
            return False
        toolset.add(toolkit)
        toolset.toolkits.remove(toolkit)  # listed (marsho.tools) with the other built-in ones
        toolset.toolkits.insert(sum(kit.source == "built-in" for kit in toolset.toolkits), toolkit)
        logger.info(f"marsho: toolkit {toolkit.name} ({toolkit.source}) loaded: "
                    + ", ".join(tool.name for tool in toolkit.tools))
        return True

    def build_summarizer(self, engine: Engine, model: LLMClient | None = None) -> Summarizer | None:
        """What folds trimmed history into summaries (MARSHO_SUMMARY): `model`, MARSHO_SUMMARY_MODEL's
        own client when the start made one, else the chat model itself (its fallbacks too)."""
        config = self.config
        if not config.marsho_summary:
            return None
        llm = model or engine.llm
        # a summary never takes more than a quarter of the history's tokens, so a long one
        # cannot leave a request no room (MARSHO_SUMMARY_TOKENS may be set above that)
        longest = min(config.marsho_summary_tokens, config.marsho_history_tokens // 4)
        # one trim's turns fold in one request (more take several, oldest first)
        return Summarizer(llm, max_tokens=longest, counter=lambda: engine.counter,
                          language=config.marsho_lang, max_input_tokens=config.marsho_history_tokens,
                          own_model=llm is not engine.llm)

    async def start_mcp(self, toolset: Toolset, *, wait: float | None = None) -> McpManager | None:
        """Start the MCP servers of MARSHO_MCP_FILE (or the data folder's mcp.json), if any, and
        wait `wait` seconds (default: McpManager.start_wait) for their first attempts. `start`
        waits for none, so the bot takes connections at once: each server's tools join the
        toolset when it is ready (`marsho.tools` says "starting" until then). A server that fails
        is retried in the background and never keeps the bot from starting."""
        path = self.mcp_file()
        if not path.is_file():
            if self.config.marsho_mcp_file:
                logger.error(f"marsho: MARSHO_MCP_FILE={path} does not exist")
            return None
        from ..tools.mcp import McpManager, read_mcp_config  # the MCP SDK is loaded only when used

        servers, problems = read_mcp_config(path)
        for problem in problems:
            logger.error(f"marsho: {problem}")
        if not servers:
            return None
        manager = McpManager(servers, toolset, call_timeout=self.config.marsho_tool_timeout)
        await manager.start(wait=wait)
        if wait == 0:
            starting = [name for name, server in servers.items() if not server.disabled]
            if starting:
                logger.info(f"marsho: MCP servers starting in the background: {', '.join(starting)} "
                            "(each one's tools join when it is ready)")
        else:
            for name, state in manager.status().items():
                logger.info(f"marsho: MCP server {name}: {state}")
        return manager

    def claim_database(self) -> None:
        """The bot's SQLite file is this process's: when another bot process already uses it
        (started twice, in two terminals, or two bots on one data folder), say so. Conversations
        would then be answered by both at once, each unaware of the other's turns in progress,
        summaries and settings. The CLI does not claim it: it may run beside the bot."""
        store = self.services.store if self.services is not None else None
        if store is not None and store.claim() is False:
            logger.warning(
                f"marsho: another bot process is using the database {store.safe_url}: two processes on "
                "one SQLite file answer a conversation at the same time and miss each other's summaries "
                "and settings. Stop the other one, give each bot its own data folder, or let them share "
                "a PostgreSQL database (MARSHO_DATABASE_URL).")

    async def stop(self) -> None:
        """Tear down what `start` built, last built first (the memory's marks of use, the MCP
        servers, the bill, the recent chat, the database, the models, the tool threads). Safe to
        call twice or after a start that failed; the bot is "starting" again after it."""
        stack, self._stack, self.services = self._stack, None, None
        self.problem, self.problem_brief = self.texts("problem.starting"), ""
        if stack is not None:
            await tear_down(stack)


def bill(meter: Meter, *models: LLMClient | None) -> None:
    """Every request of these models goes on the owner's bill: the one place a model gets its meter."""
    for model in models:
        if model is not None:
            model.meter = meter


async def tear_down(stack: AsyncExitStack) -> None:
    """Close what `stack` holds, last built first; a close that fails is logged, and the others
    still run (an exit stack goes on unwinding)."""
    try:
        await stack.aclose()
    except Exception as error:
        logger.opt(exception=error).error(f"marsho: a service did not close cleanly: {error}")


ADAPTER_SECRET = re.compile(r"token|secret|encrypt_key|passw", re.IGNORECASE)


def adapter_secrets(settings: Mapping[str, Any]) -> list[str]:
    """The adapters' credentials in NoneBot's settings: ONEBOT_ACCESS_TOKEN, and each bot's token
    or secret in TELEGRAM_BOTS, QQ_BOTS, DISCORD_BOTS, KAIHEILA_BOTS, FEISHU_BOTS, SATORI_CLIENTS...
    (a Telegram file address carries its bot's token: it must never reach a log line)."""
    found: list[str] = []

    def walk(value: Any, name: str) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, str(key))
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, name)
        elif isinstance(value, str) and ADAPTER_SECRET.search(name):
            found.append(value)

    for key, value in settings.items():
        if not str(key).lower().startswith("marsho"):  # ours are listed by name above
            walk(value, str(key))
    return found


def held_secrets(config: Config, toolset: Toolset | None = None, mcp: McpManager | None = None) -> list[str]:
    """Every secret the bot holds: the endpoints' API keys (MARSHO_API_KEY, MARSHO_API_KEYS and
    MARSHO_FALLBACKS), the OneBot access token, the values of secret-named toolkit presets, and
    what `${NAME}` put into web services and MCP servers."""
    values: list[Any] = [config.marsho_api_key, *config.marsho_api_keys]
    for fallback in config.marsho_fallbacks:
        values += fallback.keys
    if config.marsho_database_url:
        try:
            values.append(make_url(config.marsho_database_url).password)
        except Exception:  # a URL that does not parse has no password to find
            pass
    try:
        values += adapter_secrets(get_driver().config.model_dump())
    except ValueError:  # NoneBot not initialised (a library use)
        pass
    for presets in config.marsho_toolkit_settings.values():
        values += [value for name, value in presets.items() if SECRET_PRESET.search(name)]
    for tool in (toolset.tools.values() if toolset else ()):
        values += getattr(getattr(tool.func, "service", None), "secrets", ())
    for server in (mcp.servers.values() if mcp else ()):
        values += server.secrets
    return [value for value in values if isinstance(value, str)]


class Running:
    """Which Marsho the handlers use: the one plugin.py built, or a test's own (`using`)."""

    def __init__(self) -> None:
        self._app: Marsho | None = None

    def set(self, app: Marsho) -> None:
        self._app = app

    def get(self) -> Marsho:
        if self._app is None:
            raise RuntimeError("nonebot_plugin_marsho is not loaded")
        return self._app

    @contextmanager
    def using(self, app: Marsho) -> Iterator[Marsho]:
        """Handlers use `app` until the block ends."""
        before, self._app = self._app, app
        try:
            yield app
        finally:
            self._app = before


running = Running()
"""The one piece of module state: where handlers find the running Marsho (`current_app`)."""


def current_app() -> Marsho:
    """The running Marsho. The rules fetch it once per event and hand it to their handlers in
    the state; other code may use `app: Marsho = Depends(current_app)`."""
    return running.get()
