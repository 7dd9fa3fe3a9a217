"""What the log says as the bot starts, for the owner who reads it: the docs in their language."""

from __future__ import annotations

import pytest

from nonebot_plugin_marsho.redaction import logger
from tests.conftest import configured


@pytest.mark.parametrize(("language", "page"), [("zh-CN", "docs/zh/toolkits.md"), ("en", "docs/en/toolkits.md")])
def test_the_startup_log_points_to_the_toolkits_page_in_the_bots_language(
    marsho, language: str, page: str
) -> None:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message).rstrip("\n")), level="INFO", format="{message}")
    try:
        with configured(marsho_lang=language) as app:
            toolset = app.load_toolset()
            assert toolset.available  # the built-in toolkits that send data out are off by default
            app.log_toolset(toolset)
    finally:
        logger.remove(sink)
    [line] = [line for line in lines if "off until MARSHO_ENABLED_TOOLKITS" in line]
    assert line.endswith(f"python -m nonebot_plugin_marsho tools, or {page})")
