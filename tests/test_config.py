"""Settings from .env: defaults, and a clear message naming each bad key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nonebot_plugin_marsho.config import Config, describe_validation_error


def test_defaults_match_the_documented_ones() -> None:
    config = Config()
    assert config.marsho_base_url == "https://api.openai.com/v1"
    assert config.marsho_name == "marsho"
    assert config.marsho_aliases == ["小棉"]
    assert config.marsho_at is False
    assert config.marsho_max_tool_rounds == 8
    assert config.marsho_tool_timeout == 30


def test_every_key_is_documented_in_env_example() -> None:
    from pathlib import Path

    example = (Path(__file__).parent.parent / ".env.example").read_text(encoding="utf-8")
    for field in Config.model_fields:
        assert field.upper() in example, f"{field.upper()} is missing from .env.example"


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"marsho_timeout": "soon"}, "MARSHO_TIMEOUT='soon'"),
        ({"marsho_max_tool_rounds": -1}, "MARSHO_MAX_TOOL_ROUNDS=-1"),
        ({"marsho_base_url": "api.openai.com"}, "not an http(s) URL"),
        ({"marsho_base_url": "https://x/v1/chat/completions"}, "without /chat/completions"),
        ({"marsho_name": "  "}, "trigger word cannot be empty"),
    ],
)
def test_a_bad_value_names_the_key_and_the_problem(settings: dict, named: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Config(**settings)
    assert named in describe_validation_error(caught.value)


def test_trigger_names_drop_duplicates_whatever_their_case() -> None:
    config = Config(marsho_name="Marsho", marsho_aliases=["marsho", "小棉", " "])
    assert config.trigger_names == ["Marsho", "小棉"]


def test_marshoai_keys_are_read_when_ours_are_absent() -> None:
    from nonebot_plugin_marsho.config import apply_legacy_keys

    data, notes = apply_legacy_keys({
        "marshoai_token": "sk-old", "marshoai_azure_endpoint": "https://models.example/v1",
        "marshoai_default_model": "old-model", "marshoai_aliases": ["小棉", "棉棉"],
        "marshoai_at": True, "marsho_name": "kept", "marshoai_default_name": "ignored",
        "marshoai_toolset_dir": ["/srv/marsho/tools"],
    })
    config = Config.model_validate(data)
    assert config.marsho_api_key == "sk-old"
    assert config.marsho_base_url == "https://models.example/v1"
    assert config.marsho_model == "old-model"
    assert config.marsho_aliases == ["小棉", "棉棉"] and config.marsho_at is True
    assert config.marsho_name == "kept"  # our key wins
    assert [str(p) for p in config.marsho_toolkit_dirs] == ["/srv/marsho/tools"]
    assert "MARSHOAI_TOKEN (from nonebot-plugin-marshoai) is read as MARSHO_API_KEY; rename it in .env" in notes
    assert not any("MARSHOAI_DEFAULT_NAME" in note for note in notes)


def test_read_config_applies_the_marshoai_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_marsho import config as config_module

    monkeypatch.setenv("MARSHOAI_DEFAULT_NAME", "neko")
    monkeypatch.setenv("MARSHOAI_AT", "true")
    monkeypatch.setenv("MARSHOAI_DEFAULT_MODEL", "m1")  # MARSHO_MODEL is set by the tests: it wins
    config, error, notes = config_module.read_config()
    assert error == ""
    assert config.marsho_name == "neko" and config.marsho_at is True
    assert config.marsho_model == "fake-model"
    assert sorted(notes) == [
        "MARSHOAI_AT (from nonebot-plugin-marshoai) is read as MARSHO_AT; rename it in .env",
        "MARSHOAI_DEFAULT_NAME (from nonebot-plugin-marshoai) is read as MARSHO_NAME; rename it in .env",
    ]


def test_pictures_that_would_fill_the_token_budget_are_refused_with_both_keys_named() -> None:
    from nonebot_plugin_marsho.config import describe_validation_error

    with pytest.raises(ValidationError) as caught:
        Config(marsho_max_images=16)
    text = describe_validation_error(caught.value)
    assert "MARSHO_MAX_IMAGES=16" in text and "MARSHO_HISTORY_TOKENS=8000" in text
    assert Config(marsho_max_images=16, marsho_history_tokens=32000).marsho_max_images == 16


def test_an_empty_praises_file_setting_means_the_default_and_a_folder_is_refused(tmp_path) -> None:
    from nonebot_plugin_marsho.config import describe_validation_error

    assert Config(marsho_praises_file="").marsho_praises_file is None
    with pytest.raises(ValidationError) as caught:
        Config(marsho_praises_file=str(tmp_path))
    assert "MARSHO_PRAISES_FILE" in describe_validation_error(caught.value)
