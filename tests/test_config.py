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
