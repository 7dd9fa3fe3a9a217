"""The thinnest NoneBot plugin that does Marsho's job (issue 30), for bench/floor.py.

One `on_message` rule for `marsho …`, one OpenAI-compatible request per question through the
openai SDK the plugin uses (one client, made at startup, on the same aiohttp transport with the
SDK's own retries off, as the plugin makes its own), and the answer sent quoting the question.
No history, no tools, no store: what NoneBot and the SDK cost, and nothing of ours.

It reads the settings the benchmarks' bot processes get (`MARSHO_BASE_URL`, `MARSHO_API_KEY`,
`MARSHO_MODEL`, from the environment or `.env` through NoneBot's config). Run as a script, it is
the repository's `bot.py` with this file loaded instead of the plugin, so the floor starts as
the bot does (the same drivers, the same OneBot v11 reverse WebSocket):

    python bench/floor_plugin.py
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    # bot.py as it is, its `nonebot.load_plugin("nonebot_plugin_marsho")` loading this file
    REPO_ROOT = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(REPO_ROOT))
    import nonebot

    _load_plugin = nonebot.load_plugin
    nonebot.load_plugin = lambda name: _load_plugin("bench.floor_plugin")  # type: ignore[assignment]
    runpy.run_path(str(REPO_ROOT / "bot.py"), run_name="__main__")
else:
    import openai
    from nonebot import get_driver, get_plugin_config, on_message
    from nonebot.adapters.onebot.v11 import Bot, MessageEvent
    from nonebot.rule import Rule
    from pydantic import BaseModel

    class Config(BaseModel):
        marsho_base_url: str = "https://api.openai.com/v1"
        marsho_api_key: str = ""
        marsho_model: str = "gpt-4o-mini"

    config = get_plugin_config(Config)
    client: openai.AsyncOpenAI | None = None

    @get_driver().on_startup
    async def _make_client() -> None:
        global client
        client = openai.AsyncOpenAI(base_url=config.marsho_base_url, api_key=config.marsho_api_key or "none",
                                    http_client=openai.DefaultAioHttpClient(), max_retries=0)

    @get_driver().on_shutdown
    async def _close_client() -> None:
        if client is not None:
            await client.close()

    async def _for_marsho(event: MessageEvent) -> bool:
        # async: NoneBot runs a plain function's check in a worker thread (run_sync)
        return event.get_plaintext().startswith("marsho ")

    ask = on_message(rule=Rule(_for_marsho), block=True)

    @ask.handle()
    async def _answer(bot: Bot, event: MessageEvent) -> None:
        assert client is not None
        question = event.get_plaintext().removeprefix("marsho ").strip()
        completion = await client.chat.completions.create(
            model=config.marsho_model, messages=[{"role": "user", "content": question}]
        )
        await bot.send(event, completion.choices[0].message.content or "", reply_message=True)
