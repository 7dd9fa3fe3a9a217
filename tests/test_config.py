"""Settings from .env: defaults, and a clear message naming each bad key."""

from __future__ import annotations

import json
import re

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


ONE_LINE_EXCEPTIONS = {
    "marsho_vision_models": "its default is a long list; the line shows an example",
    "marsho_system_prompt": "unset is Marsho's persona; the line shows the empty value (no persona)",
}
"""Keys whose commented line in .env.example is not their default, and why."""


def example_lines() -> dict[str, str]:
    """`# MARSHO_X=value` lines of .env.example: lower-case key -> value as written."""
    from pathlib import Path

    example = (Path(__file__).parent.parent / ".env.example").read_text(encoding="utf-8")
    lines = {}
    for line in example.splitlines():
        match = re.fullmatch(r"# (MARSHO_[A-Z_]+)=(.*)", line)
        if match:
            lines[match[1].lower()] = match[2]
    return lines


def test_every_key_is_documented_in_env_example_as_a_commented_line() -> None:
    lines = example_lines()
    for field in Config.model_fields:
        assert field in lines, f"# {field.upper()}=... is missing from .env.example"
    assert set(lines) <= set(Config.model_fields), "a line of .env.example is no setting"


def test_env_example_sets_no_marsho_key_so_copying_it_changes_nothing() -> None:
    from pathlib import Path

    from dotenv import dotenv_values

    values = dotenv_values(Path(__file__).parent.parent / ".env.example")
    assert [key for key in values if key.upper().startswith("MARSHO")] == []


def test_each_commented_line_of_env_example_shows_the_default() -> None:
    defaults = Config()
    for field, written in example_lines().items():
        if field in ONE_LINE_EXCEPTIONS:
            continue
        try:
            value = json.loads(written) if written else written
        except ValueError:
            value = written  # as NoneBot reads it: JSON when it can be, else the text
        if Config.model_fields[field].default is None:  # unset: the line is the empty value
            assert written == "", f"{field.upper()}={written} should be left empty"
            continue
        assert getattr(Config(**{field: value}), field) == getattr(defaults, field), (
            f"# {field.upper()}={written} in .env.example is not the default"
        )


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
    assert ("MARSHOAI_DEFAULT_NAME (from nonebot-plugin-marshoai) is ignored: MARSHO_NAME is set"
            in notes)


def test_read_config_applies_the_marshoai_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_marsho import config as config_module

    monkeypatch.setenv("MARSHOAI_DEFAULT_NAME", "neko")
    monkeypatch.setenv("MARSHOAI_AT", "true")
    monkeypatch.setenv("MARSHOAI_ALIASES", '["喵"]')  # JSON from the environment, like ours
    monkeypatch.setenv("MARSHOAI_DEFAULT_MODEL", "m1")  # MARSHO_MODEL is set by the tests: it wins
    config, error, notes = config_module.read_config()
    assert error == ""
    assert config.marsho_name == "neko" and config.marsho_at is True and config.marsho_aliases == ["喵"]
    assert config.marsho_model == "fake-model"
    assert sorted(notes) == [
        "MARSHOAI_ALIASES (from nonebot-plugin-marshoai) is read as MARSHO_ALIASES; rename it in .env",
        "MARSHOAI_AT (from nonebot-plugin-marshoai) is read as MARSHO_AT; rename it in .env",
        "MARSHOAI_DEFAULT_MODEL (from nonebot-plugin-marshoai) is ignored: MARSHO_MODEL is set",
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


def test_a_marshoai_token_alone_is_sent_to_marshoais_default_endpoint_not_ours() -> None:
    from nonebot_plugin_marsho.config import MARSHOAI_DEFAULT_ENDPOINT, apply_legacy_keys

    data, notes = apply_legacy_keys({"marshoai_token": "ghp_abcdefgh12345678"})
    assert data["marsho_api_key"] == "ghp_abcdefgh12345678"
    assert data["marsho_base_url"] == MARSHOAI_DEFAULT_ENDPOINT == "https://models.inference.ai.azure.com"
    assert any("marshoai's default endpoint" in note for note in notes)
    data, _ = apply_legacy_keys({"marshoai_token": "ghp_x12345678", "marsho_base_url": "https://api.example/v1"})
    assert data["marsho_base_url"] == "https://api.example/v1"  # an endpoint the owner set wins


def test_ids_written_as_numbers_are_read_as_ids() -> None:
    config = Config(marsho_allowed_groups=[123456, "7890"], marsho_denied_users=[42])
    assert config.marsho_allowed_groups == ["123456", "7890"] and config.marsho_denied_users == ["42"]


def module_level_imports(module: str) -> set[str]:
    """The package's modules `module` loads when it is imported, itself included: its imports at
    module level and theirs, not those inside functions or under TYPE_CHECKING. The package's own
    `__init__` (the public API, loaded whatever is imported) is left out."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = root / name.replace(".", "/")
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        if name in seen or "." not in name or not path.is_file():
            continue
        seen.add(name)
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        # a submodule's import runs its packages' __init__ first
        todo += [".".join(name.split(".")[:i]) for i in range(2, len(name.split(".")))]
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
                target = ".".join(filter(None, [base, node.module]))
                todo += [target, *(f"{target}.{alias.name}" for alias in node.names)]
    return seen


def test_reading_the_settings_loads_no_endpoint_client() -> None:
    """config.py only needs the names of the tool modes (agent/model/base.py): neither the model
    client (agent/llm.py and the parts it composes) nor the endpoint's."""
    loaded = module_level_imports("nonebot_plugin_marsho.config")
    assert {"nonebot_plugin_marsho.config", "nonebot_plugin_marsho.agent.model.base"} <= loaded
    assert not loaded & {"nonebot_plugin_marsho.agent.llm", "nonebot_plugin_marsho.agent.model.factory",
                         "nonebot_plugin_marsho.agent.model.endpoint"}
