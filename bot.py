"""A runnable bot for local use: OneBot v11 over reverse WebSocket at /onebot/v11/ws, with marsho.

Settings come from `.env` (copy `.env.example`) and the environment: HOST and PORT say where the
bot listens; the MARSHO_* keys configure the plugin.
"""

import os

import nonebot
from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter

nonebot.init(driver=os.environ.get("DRIVER", "~fastapi+~httpx+~websockets"))
nonebot.get_driver().register_adapter(OneBotV11Adapter)
nonebot.load_plugin("nonebot_plugin_marsho")

if __name__ == "__main__":
    nonebot.run()
