"""A runnable bot for local use, with marsho.

    python bot.py            OneBot v11 over reverse WebSocket at /onebot/v11/ws (QQ through
                             NapCat, LLOneBot, Lagrange...)
    python bot.py --console  in this terminal (nonebot-adapter-console): Ctrl+/ to reach the
                             input line, type `marsho hello` and read the answer, no chat account
                             needed; you are a superuser there; Ctrl+Q to leave

Settings come from `.env` (copy `.env.example`) and the environment: HOST and PORT say where the
bot listens; the MARSHO_* keys configure the plugin. Other platforms (Telegram, Discord, the QQ
official API...): see docs/en/platforms.md.
"""

import os
import sys

import nonebot

CONSOLE = "--console" in sys.argv[1:]

if CONSOLE:
    from nonebot.adapters.console import Adapter as ConsoleAdapter

    # no server to run: the terminal is the chat
    nonebot.init(driver="~none")
    # the person at the bot's terminal: nonebot-adapter-console names its user "user"
    nonebot.get_driver().config.superusers.add("user")
    nonebot.get_driver().register_adapter(ConsoleAdapter)

    @nonebot.get_driver().on_startup
    async def _stop_with_the_console() -> None:
        """Ctrl+Q closes the console's screen; nonebot-adapter-console 0.10 then keeps the bot
        running ("Press Ctrl-C for Application exit"): here the bot stops with its screen."""
        screen = getattr(nonebot.get_adapter(ConsoleAdapter), "_task", None)  # the screen's task
        if screen is not None:  # made by the adapter's own startup hook, which runs before this one
            screen.add_done_callback(lambda _: nonebot.get_driver().exit())
else:
    from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter

    nonebot.init(driver=os.environ.get("DRIVER", "~fastapi+~httpx+~websockets"))
    nonebot.get_driver().register_adapter(OneBotV11Adapter)
nonebot.load_plugin("nonebot_plugin_marsho")

if __name__ == "__main__":
    nonebot.run()
