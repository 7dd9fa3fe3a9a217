"""NoneBot wiring: required plugins, metadata, the matchers, and the one Marsho assembled from the
config, started with the bot and stopped with it."""

import asyncio
import gc
import threading

from nonebot import get_driver, require
from nonebot.plugin import PluginMetadata

require("nonebot_plugin_localstore")
require("nonebot_plugin_alconna")
require("nonebot_plugin_uninfo")
gc.freeze()  # the required plugins are kept for good, as NoneBot is (see __init__.py)

import nonebot_plugin_localstore as localstore  # noqa: E402

from .agent import sdk  # noqa: E402
from .agent.conversation import Conversation  # noqa: E402
from .chat import matchers, poke  # noqa: E402, F401  (registers the matchers)
from .chat.app import Marsho, running  # noqa: E402
from .config import Config, read_config  # noqa: E402
from .redaction import logger  # noqa: E402

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
    # exactly the adapters tests/test_platforms.py covers (nonebot-plugin-uninfo and alconna
    # know more; each new one gets its row in docs/*/platforms.md's table and the tests first)
    supported_adapters={
        "~onebot.v11", "~onebot.v12", "~qq", "~telegram", "~discord", "~kaiheila", "~feishu", "~satori",
        "~console",
    },
)



def build() -> Marsho:
    """The bot as `.env` describes it (not started)."""
    config, problem, notes = read_config()
    return Marsho(config, localstore.get_plugin_data_dir(), config_error=problem, legacy_notes=notes)


gc.freeze()  # and so are the plugin's modules
marsho = build()
"""The running bot; handlers find it through `chat.app.current_app`."""
running.set(marsho)
Conversation.default_llm = lambda: running.get().require_engine().llm
driver = get_driver()


async def _start() -> None:
    await marsho.start()
    marsho.claim_database()  # the bot's own, not the CLI's (which also starts it)
    # the OpenAI SDK loads at the first request (about 0.4 s of CPU), not at start, so the bot
    # takes connections sooner; once it serves, a thread loads it before a question needs it
    asyncio.get_running_loop().call_later(SDK_WARM_DELAY, _warm_sdk)
    # what the start made lives as long as the bot: out of the collector's sight, a full
    # collection no longer walks it (one took about 100 ms in the middle of a turn, measured by
    # bench/parallel_tools.py: the other group's answer at 104-112 ms instead of 10-16)
    gc.freeze()


SDK_WARM_DELAY = 1.0
"""Seconds after the start before the SDK is loaded in the background."""


def _warm_sdk() -> None:
    threading.Thread(target=_import_sdk, name="marsho-warm-sdk", daemon=True).start()


def _import_sdk() -> None:
    try:
        sdk.load()
    except Exception as error:  # the first request says what is wrong, with its setting
        logger.debug(f"marsho: the OpenAI SDK did not load in the background: {error}")
    gc.freeze()  # the SDK's modules, like the start's, are kept for good


driver.on_startup(_start)
driver.on_shutdown(marsho.stop)
