"""The owner's first hour (issue 13): copying .env.example changes nothing, a marshoai owner's old
keys are read (or named as ignored, with why), a misspelled MARSHO_* key is named with the
closest real one, and marshoai's config/marshoai/mcp.json is used when ours is absent.

Settings are read the way the bot reads them at startup (`read_config` on NoneBot's config,
made here from a `.env` written by the test), and once by `bot.py` itself with that `.env` in its
working directory. Nothing reads the developer's `.env` or environment.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nonebot_plugin_marsho.config import Config, apply_legacy_keys, misspelled_keys, settings_keys

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / ".env.example"
MCP_SERVER = Path(__file__).resolve().parent / "mcp_server.py"

OLD_KEYS = """
# nonebot-plugin-marshoai's settings, appended as they were
MARSHOAI_TOKEN=sk-old-token-1234
MARSHOAI_AZURE_ENDPOINT={endpoint}
MARSHOAI_DEFAULT_MODEL=old-model
MARSHOAI_DEFAULT_NAME=neko
MARSHOAI_ALIASES=["喵喵"]
MARSHOAI_ENABLE_RICHTEXT_PARSE=false
MARSHOAI_POKE_SUFFIX=揉了揉你的猫耳
MARSHOAI_TEMPERATURE=0.7
MARSHOAI_SOMETHING_NEW=1
MARSHO_MODLE=typo-model
"""
"""What a marshoai owner appends to a copy of .env.example (with one typo of ours)."""


@pytest.fixture
def nonebot_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Make NoneBot's config the one a `.env` (written by the test into tmp_path) gives, as at
    startup; the tests' own settings come back afterwards."""
    from nonebot import get_driver
    from nonebot.config import Config as NoneBotConfig

    env_file = tmp_path / ".env"

    def use(text: str) -> Path:
        env_file.write_text(text, encoding="utf-8")
        monkeypatch.setattr(get_driver(), "config", NoneBotConfig(_env_file=(str(env_file),)))
        return env_file

    yield use


def example_with_old_keys(endpoint: str = "https://models.example/v1") -> str:
    return EXAMPLE.read_text(encoding="utf-8") + OLD_KEYS.format(endpoint=endpoint)


# .env.example --------------------------------------------------------------------------------


def test_copying_env_example_gives_nonebot_the_settings_of_no_env_file(tmp_path: Path) -> None:
    from nonebot.config import Config as NoneBotConfig

    copied = NoneBotConfig(_env_file=(str(EXAMPLE),)).model_dump()
    without = NoneBotConfig(_env_file=(str(tmp_path / "absent.env"),)).model_dump()
    assert copied == without


def test_copying_env_example_gives_the_plugin_its_defaults(nonebot_config) -> None:
    from nonebot_plugin_marsho.config import read_config

    nonebot_config(EXAMPLE.read_text(encoding="utf-8"))
    config, problem, notes = read_config()
    assert (config, problem, notes) == (Config(), "", [])


# marshoai's keys -----------------------------------------------------------------------------


def test_an_empty_marsho_key_gives_way_to_the_marshoai_key_with_a_value() -> None:
    data, notes = apply_legacy_keys({
        "marsho_api_key": "", "marshoai_token": "sk-old",
        "marsho_at": None, "marshoai_at": "true",  # a bare `MARSHO_AT` line
        "marsho_model": "  ", "marshoai_default_model": "old-model",
    })
    config = Config.model_validate(data)
    assert (config.marsho_api_key, config.marsho_at, config.marsho_model) == ("sk-old", True, "old-model")
    assert notes == [
        "MARSHOAI_TOKEN (from nonebot-plugin-marshoai) is read as MARSHO_API_KEY; rename it in .env",
        "MARSHOAI_DEFAULT_MODEL (from nonebot-plugin-marshoai) is read as MARSHO_MODEL; rename it in .env",
        "MARSHOAI_AT (from nonebot-plugin-marshoai) is read as MARSHO_AT; rename it in .env",
        # no endpoint given: the token goes where marshoai sends it, not to MARSHO_BASE_URL's default
        "MARSHOAI_TOKEN (from nonebot-plugin-marshoai) is used with marshoai's default endpoint "
        "https://models.inference.ai.azure.com, as no endpoint is set; set MARSHO_BASE_URL to change it",
    ]


def test_a_marsho_key_with_a_value_wins_and_the_old_key_is_named_as_ignored() -> None:
    data, notes = apply_legacy_keys({"marsho_model": "new", "marshoai_default_model": "old"})
    assert Config.model_validate(data).marsho_model == "new"
    assert notes == ["MARSHOAI_DEFAULT_MODEL (from nonebot-plugin-marshoai) is ignored: MARSHO_MODEL is set"]


def test_an_empty_marshoai_key_is_ignored_and_says_so() -> None:
    data, notes = apply_legacy_keys({"marshoai_token": "", "marshoai_at": None})
    assert Config.model_validate(data) == Config()
    assert sorted(notes) == [
        "MARSHOAI_AT (from nonebot-plugin-marshoai) is ignored: it is empty",
        "MARSHOAI_TOKEN (from nonebot-plugin-marshoai) is ignored: it is empty",
    ]


def test_of_two_old_endpoint_keys_the_first_is_read_and_the_other_named() -> None:
    data, notes = apply_legacy_keys({
        "marshoai_endpoint": "https://a.example/v1", "marshoai_azure_endpoint": "https://b.example/v1",
    })
    assert Config.model_validate(data).marsho_base_url == "https://a.example/v1"
    assert "MARSHOAI_AZURE_ENDPOINT (from nonebot-plugin-marshoai) is ignored: MARSHOAI_ENDPOINT is read as " \
           "MARSHO_BASE_URL" in notes


def test_one_old_key_read_as_two_of_ours_says_which_it_filled() -> None:
    data, notes = apply_legacy_keys({"marshoai_enable_richtext_parse": False, "marsho_render_latex": True})
    config = Config.model_validate(data)
    assert config.marsho_render_latex is True and config.marsho_render_markdown_images is False
    assert notes == [
        "MARSHOAI_ENABLE_RICHTEXT_PARSE (from nonebot-plugin-marshoai) is read as "
        "MARSHO_RENDER_MARKDOWN_IMAGES; rename it in .env",
        "MARSHOAI_ENABLE_RICHTEXT_PARSE (from nonebot-plugin-marshoai) is not read as those: "
        "MARSHO_RENDER_LATEX is set",
    ]


def test_marshoai_keys_without_an_equivalent_are_named_with_why() -> None:
    _, notes = apply_legacy_keys({
        "marshoai_temperature": 0.7, "marshoai_poke_suffix": "揉了揉你的猫耳",
        "marshoai_use_yaml_config": True, "marshoai_invented_later": 1,
    })
    assert notes == [
        "MARSHOAI_INVENTED_LATER (from nonebot-plugin-marshoai) is ignored: Marsho has no equivalent",
        "MARSHOAI_POKE_SUFFIX (from nonebot-plugin-marshoai) is ignored: pokes are answered as MARSHO_POKE "
        "says (model, fixed or off)",
        "MARSHOAI_TEMPERATURE (from nonebot-plugin-marshoai) is ignored: Marsho sends no sampling parameters "
        "(temperature, top_p, max_tokens...)",
        "MARSHOAI_USE_YAML_CONFIG (from nonebot-plugin-marshoai) is ignored: Marsho reads .env only, never "
        "config/marshoai/config.yaml",
    ]


def test_no_key_is_both_read_and_listed_as_unsupported() -> None:
    from nonebot_plugin_marsho.config import LEGACY_KEYS, UNSUPPORTED_LEGACY_KEYS

    read = {old for legacy in LEGACY_KEYS.values() for old in legacy}
    assert read.isdisjoint(UNSUPPORTED_LEGACY_KEYS)
    assert all(key.startswith("marshoai_") for key in {*read, *UNSUPPORTED_LEGACY_KEYS})


# misspelled keys -----------------------------------------------------------------------------


def test_a_misspelled_key_is_named_with_the_closest_setting() -> None:
    warnings = misspelled_keys(settings_keys({"marsho_modle": "x", "marsho_max_histroy": 3}, {}))
    assert warnings == [
        "MARSHO_MAX_HISTROY is not a setting; did you mean MARSHO_MAX_HISTORY?",
        "MARSHO_MODLE is not a setting; did you mean MARSHO_MODEL?",
    ]


def test_a_key_from_the_environment_is_checked_too_and_may_be_a_json_file_variable() -> None:
    warnings = misspelled_keys(settings_keys({}, {"MARSHO_TOKEN": "x", "MARSHO_QWERTYUIOP": "y"}))
    assert warnings == [
        "MARSHO_QWERTYUIOP is not a setting; see .env.example for the settings (if a ${MARSHO_QWERTYUIOP} "
        "in mcp.json or webservices.json uses it, ignore this)",
        "MARSHO_TOKEN is not a setting; did you mean MARSHO_API_KEY? (if a ${MARSHO_TOKEN} in mcp.json or "
        "webservices.json uses it, ignore this)",
    ]


def test_real_keys_nested_parts_and_marshoai_keys_are_not_called_misspelled() -> None:
    settings = {name: None for name in Config.model_fields} | {"marshoai_token": "x", "host": "127.0.0.1"}
    environ = {"MARSHO_TOOLKIT_SETTINGS__weather__api_key": "k", "MARSHOAI_AT": "true", "PATH": "/bin"}
    assert misspelled_keys(settings_keys(settings, environ)) == []


# the whole of it, as at startup --------------------------------------------------------------


def test_a_marshoai_owner_appending_old_keys_to_the_example_gets_them_read(nonebot_config) -> None:
    from nonebot_plugin_marsho.config import read_config

    nonebot_config(example_with_old_keys())
    config, problem, notes = read_config()
    assert problem == ""
    assert config.marsho_api_key == "sk-old-token-1234"
    assert config.marsho_base_url == "https://models.example/v1"
    assert config.marsho_model == "old-model"  # not MARSHO_MODLE's: that key is no setting
    assert config.marsho_name == "neko" and config.marsho_aliases == ["喵喵"]
    assert config.marsho_render_latex is False and config.marsho_render_markdown_images is False
    assert "MARSHOAI_TOKEN (from nonebot-plugin-marshoai) is read as MARSHO_API_KEY; rename it in .env" in notes
    assert ("MARSHOAI_TEMPERATURE (from nonebot-plugin-marshoai) is ignored: Marsho sends no sampling "
            "parameters (temperature, top_p, max_tokens...)") in notes
    assert "MARSHOAI_SOMETHING_NEW (from nonebot-plugin-marshoai) is ignored: Marsho has no equivalent" in notes
    assert "MARSHO_MODLE is not a setting; did you mean MARSHO_MODEL?" in notes
    assert len(notes) == 10  # one line per old key (6 read, 3 ignored) and the typo


def test_an_old_key_under_an_uncommented_empty_line_of_ours_is_still_read(nonebot_config) -> None:
    from nonebot_plugin_marsho.config import read_config

    nonebot_config("MARSHO_API_KEY=\nMARSHO_AT=\nMARSHO_ALIASES=\nMARSHOAI_TOKEN=sk-1\nMARSHOAI_AT=true\n"
                   'MARSHOAI_ALIASES=["a"]\n')
    config, problem, _ = read_config()
    assert problem == ""
    assert (config.marsho_api_key, config.marsho_at, config.marsho_aliases) == ("sk-1", True, ["a"])


def test_a_list_that_is_not_json_is_a_named_problem_not_a_crash(nonebot_config) -> None:
    from nonebot_plugin_marsho.config import read_config

    nonebot_config("MARSHO_ALIASES=小棉\nMARSHO_MODLE=x\n")
    config, problem, notes = read_config()
    assert config == Config() and "MARSHO_ALIASES='小棉'" in problem
    assert notes == ["MARSHO_MODLE is not a setting; did you mean MARSHO_MODEL?"]  # still said


# marshoai's MCP file -------------------------------------------------------------------------


def marsho_in(data_dir: Path, **settings: object):
    from nonebot_plugin_marsho.chat.app import Marsho

    return Marsho(Config(**settings), data_dir)


def write_marshoai_mcp(folder: Path) -> Path:
    path = folder / "config" / "marshoai" / "mcp.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"mcpServers": {"old": {
        "type": "stdio", "command": sys.executable, "args": [str(MCP_SERVER)], "env": {},
    }}}), encoding="utf-8")
    return path


def test_marshoai_mcp_file_is_used_when_ours_is_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_marsho.tools.mcp import read_mcp_config

    monkeypatch.chdir(tmp_path)  # marshoai keeps it under the bot's working directory
    old = write_marshoai_mcp(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    assert marsho_in(data_dir).mcp_file() == old
    servers, problems = read_mcp_config(old)  # its format is ours
    assert problems == [] and servers["old"].transport == "stdio"
    ours = data_dir / "mcp.json"
    ours.write_text('{"mcpServers": {}}', encoding="utf-8")
    assert marsho_in(data_dir).mcp_file() == ours  # ours first
    named = tmp_path / "named.json"
    assert marsho_in(data_dir, marsho_mcp_file=named).mcp_file() == named  # even when missing


def test_which_mcp_file_is_used_is_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nonebot_plugin_marsho.chat import app as app_module

    lines: list[str] = []
    monkeypatch.setattr(app_module.logger, "info", lines.append)
    monkeypatch.chdir(tmp_path)
    old = write_marshoai_mcp(tmp_path)
    marsho_in(tmp_path / "data").mcp_file()
    assert len(lines) == 1 and f"nonebot-plugin-marshoai's {old}" in lines[0]


# bot.py with that .env -----------------------------------------------------------------------


@pytest.mark.e2e
async def test_bot_py_with_the_example_and_old_keys_answers_on_the_old_endpoint() -> None:
    from tests.fake_openai import FakeOpenAI
    from tests.onebot_sim import BotProcess

    with FakeOpenAI() as endpoint:
        bot = BotProcess(base_url=endpoint.base_url)
        for ours in ("MARSHO_BASE_URL", "MARSHO_API_KEY", "MARSHO_MODEL", "MARSHO_TOOLKIT_DIRS"):
            del bot.env[ours]  # from the .env below only, as an owner has them
        (bot.workdir / ".env").write_text(example_with_old_keys(endpoint.base_url), encoding="utf-8")
        write_marshoai_mcp(bot.workdir)
        async with bot:  # stopping it removes its folder, log included
            try:
                async with bot.simulator(self_id=4242) as sim:
                    _, reply = await sim.ask("neko hello", timeout=30)
                assert reply.text == "ok"
                log = bot.output()
            except BaseException:
                sys.__stderr__.write("\n---- bot.py output ----\n" + bot.output()[-6000:])
                raise
        [request] = endpoint.requests
        assert request["_headers"]["authorization"] == "Bearer sk-old-token-1234"
        assert request["model"] == "old-model"
        assert "MARSHOAI_TOKEN (from nonebot-plugin-marshoai) is read as MARSHO_API_KEY" in log
        assert "MARSHOAI_POKE_SUFFIX (from nonebot-plugin-marshoai) is ignored" in log
        assert "MARSHO_MODLE is not a setting; did you mean MARSHO_MODEL?" in log
        assert "MCP servers from nonebot-plugin-marshoai's" in log
        assert "sk-old-token-1234" not in log
