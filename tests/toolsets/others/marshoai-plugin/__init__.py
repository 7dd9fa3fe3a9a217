from nonebot_plugin_marshoai.plugin import PluginMetadata, String, on_function_call

from . import codes

__marsho_meta__ = PluginMetadata(
    name="Codes",
    description="Turns text into other alphabets",
    author="someone",
)


@on_function_call(description="Text in capitals").params(msg=String(description="the text"))
async def shout(msg: str) -> str:
    return codes.shout(msg)
