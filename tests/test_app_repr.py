"""The app's repr is short: NoneBot's trace line of every handler run formats the matcher's state,
which holds the app, so a long one (the whole config) would be built on every turn."""

from __future__ import annotations

from pathlib import Path

from nonebot_plugin_marsho.chat.app import Marsho
from nonebot_plugin_marsho.config import Config


def test_the_apps_repr_says_whether_it_is_ready_and_nothing_of_its_config(tmp_path: Path) -> None:
    app = Marsho(Config(marsho_api_key="sk-secret-key-1234", marsho_model="some-model"), tmp_path)
    shown = repr(app)
    assert shown == "<Marsho not ready>"
    assert "sk-secret" not in f"{ {'marsho.app': app} }"
