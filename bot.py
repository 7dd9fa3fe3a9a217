"""A runnable bot for local use, with marsho.

    python bot.py            OneBot v11 over reverse WebSocket at /onebot/v11/ws (QQ through
                             NapCat, LLOneBot, Lagrange...)
    python bot.py --console  in this terminal (nonebot-adapter-console): type `marsho hello` and
                             read the answer, no chat account needed; you are a superuser there

Settings come from `.env` (copy `.env.example`) and the environment: HOST and PORT say where the
bot listens; the MARSHO_* keys configure the plugin. Other platforms (Telegram, Discord, the QQ
official API...): see the README's "Platforms" section.
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
else:
    from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter

    nonebot.init(driver=os.environ.get("DRIVER", "~fastapi+~httpx+~websockets"))
    nonebot.get_driver().register_adapter(OneBotV11Adapter)
nonebot.load_plugin("nonebot_plugin_marsho")

if __name__ == "__main__":
    nonebot.run()
