"""The provider recipes of the documentation site (docs/<lang>/recipes/*.md) hold as written.

Each `.env` block of a recipe is read as the bot reads `.env` and must give a valid Config with
MARSHO_* settings only; the model quirks, tool modes and picture support the plugin picks for
the models a recipe names are the ones its page describes; and every block, with only its base
URLs and keys pointed at a fake endpoint on loopback, answers a question that calls a tool end to
end (the fake refuses a request the real provider of that model would refuse). The proxy page's
fallback answers when the proxy fails.
"""

from __future__ import annotations

import io
import json
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs_blocks import LANGUAGES, Block, blocks
from tests.fake_openai import FakeOpenAI, error, text, tool_calls

RECIPES = ("deepseek", "dashscope", "gemini", "ollama", "vllm", "proxy")
TEST_KEY = "sk-recipe-test-0001"


def recipe_blocks() -> list[Block]:
    """Every dotenv block of every recipe, in both languages."""
    found = [block for lang in LANGUAGES for recipe in RECIPES
             for block in blocks(f"{lang}/recipes/{recipe}.md") if block.language == "dotenv"]
    assert found, "no recipe has a .env block"
    return found


BLOCKS = recipe_blocks()


def ids(block: Block) -> str:
    return block.where


def settings_of_block(text: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the bot's plugin reads from `text` as its `.env` (NoneBot's parser, JSON values
    decoded), the process environment left out."""
    import nonebot.config

    from nonebot_plugin_marsho.config import _RawSettings

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".env"
    path.write_text(text, encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(os, "environ", {})
        settings = nonebot.config.Config(_env_file=(str(path),), _env_file_encoding="utf-8").model_dump()
    return _RawSettings.model_validate(settings).model_dump(exclude_unset=True)


def config_of(block: Block, folder: Path, monkeypatch: pytest.MonkeyPatch, **replaced: Any) -> Any:
    """The Config of a recipe block, with `replaced` settings (lower-case names) put in."""
    from nonebot_plugin_marsho.config import Config

    data = settings_of_block(block.text, folder, monkeypatch)
    data.update(replaced)
    return Config.model_validate(data)


def keys_of(block: Block) -> list[str]:
    from dotenv import dotenv_values

    return [key.lower() for key in dotenv_values(stream=io.StringIO(block.text))]


def page_of(block: Block, lang: str) -> str:
    return f"{lang}/{block.page.split('/', 1)[1]}"


@pytest.mark.parametrize("block", BLOCKS, ids=ids)
def test_each_recipe_env_is_a_valid_config_of_marsho_settings_only(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.config import Config

    unknown = [key.upper() for key in keys_of(block) if key not in Config.model_fields]
    assert not unknown, f"{block.where}: not settings of Config: {unknown}"
    config = config_of(block, tmp_path, monkeypatch)
    assert config.marsho_base_url.startswith(("http://", "https://"))
    assert config.marsho_api_key, f"{block.where}: a recipe sets a key (a placeholder at least)"


@pytest.mark.parametrize("recipe", RECIPES)
def test_both_languages_of_a_recipe_set_the_same_settings(
    recipe: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configs = {
        lang: [config_of(block, tmp_path / lang / str(block.line), monkeypatch).model_dump()
               for block in blocks(f"{lang}/recipes/{recipe}.md") if block.language == "dotenv"]
        for lang in LANGUAGES
    }
    assert configs["zh"] == configs["en"]


# --- what the pages say about each model ---------------------------------------------------------

DEFAULT: dict[str, Any] = {"reasoning_back": True, "reasoning_required": False, "merge_same_role": False,
                           "system_as_user": False, "tool_call_content": "null", "token_field": "max_tokens"}
QWEN = {**DEFAULT, "tool_call_content": "empty"}
DEEPSEEK_THINKING = {**DEFAULT, "reasoning_required": True, "merge_same_role": True}

QUIRKS_SAID: dict[str, dict[str, Any]] = {
    # deepseek.md: deepseek-chat gets the default, the reasoner its reasoning back and merged roles
    "deepseek-chat": DEFAULT,
    "deepseek-reasoner": DEEPSEEK_THINKING,
    # dashscope.md: "" as the text of a message that only calls tools
    "qwen-plus": QWEN,
    "qwen-max": QWEN,
    "qwq-plus": QWEN,
    # gemini.md: nothing special
    "gemini-2.5-flash": DEFAULT,
    "gemini-3-flash-preview": DEFAULT,
    # ollama.md: qwen3:8b matches qwen*; gemma3 the default
    "qwen3:8b": QWEN,
    "gemma3:12b": DEFAULT,
    # vllm.md: */qwen* and */deepseek-r1*
    "Qwen/Qwen3-8B": QWEN,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": DEEPSEEK_THINKING,
    # proxy.md: the alias gets what MARSHO_MODEL_QUIRKS gives it (checked with the block below)
    "ds-think": DEFAULT,
}
"""The quirks each recipe page says the plugin uses for a model (the built-in profiles)."""


def models_of(config: Any) -> list[str]:
    return [config.marsho_model, *(fallback.model for fallback in config.marsho_fallbacks)]


@pytest.mark.parametrize(("model", "said"), QUIRKS_SAID.items())
def test_the_built_in_quirks_of_each_recipe_model_are_what_its_page_says(model: str, said: dict[str, Any]) -> None:
    from nonebot_plugin_marsho.agent.quirks import quirks_for

    assert quirks_for(model).model_dump() == said
    pages = [page for page in (f"{lang}/recipes/{recipe}.md" for lang in LANGUAGES for recipe in RECIPES)
             if model in (Path("docs") / page).read_text(encoding="utf-8")]
    assert pages or model.startswith("deepseek-ai/"), f"no recipe names {model}"


@pytest.mark.parametrize("block", BLOCKS, ids=ids)
def test_every_model_a_recipe_sets_gets_the_quirks_its_page_says(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.agent.quirks import quirks_for
    from nonebot_plugin_marsho.chat.models import settings_of

    config = config_of(block, tmp_path, monkeypatch)
    overrides = settings_of(config).quirks
    for model in models_of(config):
        assert model in QUIRKS_SAID, f"{block.where}: say which quirks {model} gets (QUIRKS_SAID)"
        expected = dict(QUIRKS_SAID[model])
        for pattern, fields in (overrides or {}).items():
            if pattern.casefold() == model.casefold():
                expected.update(fields)
        assert quirks_for(model, overrides).model_dump() == expected, block.where


def test_the_proxy_alias_gets_the_deepseek_thinking_quirks_from_marsho_model_quirks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.agent.quirks import quirks_for
    from nonebot_plugin_marsho.chat.models import settings_of

    for lang in LANGUAGES:
        [aliased] = [b for b in blocks(f"{lang}/recipes/proxy.md")
                     if b.language == "dotenv" and "MARSHO_MODEL_QUIRKS" in b.text]
        config = config_of(aliased, tmp_path / lang, monkeypatch)
        assert config.marsho_model == "ds-think"
        assert quirks_for("ds-think", settings_of(config).quirks).model_dump() == DEEPSEEK_THINKING


PICTURES_SAID = {
    ("deepseek", "deepseek-chat"): False,
    ("dashscope", "qwen-plus"): False,
    ("dashscope", "qwen-vl-max"): True,
    ("gemini", "gemini-2.5-flash"): True,
    ("ollama", "gemma3:12b"): True,
    ("ollama", "qwen2.5vl:7b"): True,
    ("ollama", "qwen3:8b"): False,
    ("vllm", "Qwen/Qwen2.5-VL-7B-Instruct"): True,
    ("vllm", "Qwen/Qwen3-8B"): False,
}
"""Whether each page says a model is sent pictures, with the recipe's first .env."""


@pytest.mark.parametrize(("recipe", "model"), PICTURES_SAID)
def test_pictures_go_to_the_models_each_recipe_says(
    recipe: str, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.chat.incoming import sees_pictures

    for lang in LANGUAGES:
        first = next(b for b in blocks(f"{lang}/recipes/{recipe}.md") if b.language == "dotenv")
        config = config_of(first, tmp_path / lang, monkeypatch)
        assert sees_pictures(model, config.marsho_vision_models) is PICTURES_SAID[(recipe, model)], lang


def test_gemini_3_gets_its_tools_in_prompt_mode_and_gemini_2_5_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.agent.prompt_mode import ToolModes

    for lang in LANGUAGES:
        first = next(b for b in blocks(f"{lang}/recipes/gemini.md") if b.language == "dotenv")
        config = config_of(first, tmp_path / lang, monkeypatch)
        modes = ToolModes(config.marsho_tool_mode, config.marsho_tool_mode_by_model)
        assert modes.of("gemini-2.5-flash") == "native"
        assert modes.of("gemini-3-flash-preview") == modes.of("gemini-3-pro-preview") == "prompt"


def test_the_tool_refusals_the_recipes_describe_are_told_apart_as_they_say() -> None:
    """ollama.md: its "does not support tools" switches the model to prompt mode; vllm.md and
    gemini.md: vLLM's missing flags and Gemini 3's missing signature do not."""
    from nonebot_plugin_marsho.agent.prompt_mode import _refuses_tools
    from nonebot_plugin_marsho.exceptions import EndpointError

    def refusal(detail: str) -> EndpointError:
        return EndpointError(code="endpoint.4xx", status=400, detail=detail)

    assert _refuses_tools(refusal("registry.ollama.ai/library/gemma3:12b does not support tools"))
    assert not _refuses_tools(refusal('"auto" tool choice requires --enable-auto-tool-choice and '
                                      "--tool-call-parser to be set"))
    assert not _refuses_tools(refusal("Function call is missing a thought_signature in functionCall "
                                      "parts. This is required for tools to work correctly"))


# --- end to end against the fake endpoint --------------------------------------------------------


def pointed_at(config: Any, primary: str, fallback: str) -> dict[str, Any]:
    """The settings that move a recipe to the test's endpoints: its base URLs and keys only."""
    return {
        "marsho_base_url": primary, "marsho_api_key": TEST_KEY, "marsho_api_keys": [],
        "marsho_fallbacks": [{**entry.model_dump(), "base_url": fallback, "api_key": TEST_KEY, "api_keys": []}
                             for entry in config.marsho_fallbacks],
    }


def recipe_config(block: Block, folder: Path, monkeypatch: pytest.MonkeyPatch, primary: str,
                  fallback: str) -> Any:
    from nonebot_plugin_marsho.config import Config

    config = config_of(block, folder / "as-written", monkeypatch)
    return Config.model_validate({**config.model_dump(), **pointed_at(config, primary, fallback),
                                  "marsho_retries": 0, "marsho_timeout": 10})


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@pytest.fixture
async def strict_fake() -> AsyncIterator[FakeOpenAI]:
    with FakeOpenAI(strict=True) as fake:
        yield fake


async def ask_with_a_tool(config: Any) -> str:
    from nonebot_plugin_marsho.agent.conversation import Conversation
    from nonebot_plugin_marsho.chat.models import chat_model

    client = chat_model(config)
    try:
        conversation = Conversation(llm=client, system_prompt="You are Marsho.")
        conversation.set_tools([add])
        return await conversation.chat("what is 2+3?")
    finally:
        await client.close()


@pytest.mark.parametrize("block", BLOCKS, ids=ids)
async def test_each_recipe_answers_a_question_with_a_tool_call_end_to_end(
    block: Block, strict_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = recipe_config(block, tmp_path, monkeypatch, strict_fake.base_url, strict_fake.base_url)
    strict_fake.push(tool_calls(("add", {"a": 2, "b": 3}), reasoning="2 and 3: call add"), text("2+3=5"))

    assert await ask_with_a_tool(config) == "2+3=5"
    first, second = strict_fake.requests
    assert first["model"] == config.marsho_model
    sent = "tools" in first
    assert sent or "add" in first["messages"][0]["content"]  # native, or described in prompt mode
    assert any(m["role"] == "tool" or "5" in str(m.get("content")) for m in second["messages"][1:])
    assert all(m.get("content") != TEST_KEY for m in second["messages"])


async def test_gemini_3_asked_in_prompt_mode_gets_no_native_tools(
    strict_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.agent.conversation import Conversation
    from nonebot_plugin_marsho.chat.models import chat_model

    first = next(b for b in blocks("zh/recipes/gemini.md") if b.language == "dotenv")
    config = recipe_config(first, tmp_path, monkeypatch, strict_fake.base_url, strict_fake.base_url)
    strict_fake.push(text('```json\n[{"name": "add", "arguments": {"a": 2, "b": 3}}]\n```'), text("5"))
    client = chat_model(config)
    client.model = "gemini-3-flash-preview"  # as `marsho.model gemini-3-flash-preview` does
    try:
        conversation = Conversation(llm=client, system_prompt="You are Marsho.")
        conversation.set_tools([add])
        assert await conversation.chat("what is 2+3?") == "5"
    finally:
        await client.close()
    assert [r["model"] for r in strict_fake.requests] == ["gemini-3-flash-preview"] * 2
    assert all("tools" not in r for r in strict_fake.requests)
    assert all(m.get("role") != "tool" and not m.get("tool_calls")
               for r in strict_fake.requests for m in r["messages"])


async def test_deepseek_reasoner_on_the_deepseek_recipe_gets_its_reasoning_back_in_the_turn(
    strict_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deepseek.md: switched to `deepseek-reasoner`, its reasoning goes back with the turn's tool
    calls (the strict fake refuses the second request without it, as DeepSeek does)."""
    from nonebot_plugin_marsho.agent.conversation import Conversation
    from nonebot_plugin_marsho.chat.models import chat_model

    first = next(b for b in blocks("en/recipes/deepseek.md") if b.language == "dotenv")
    config = recipe_config(first, tmp_path, monkeypatch, strict_fake.base_url, strict_fake.base_url)
    strict_fake.push(tool_calls(("add", {"a": 2, "b": 3}), reasoning="2 and 3: call add"), text("5"))
    client = chat_model(config)
    client.model = "deepseek-reasoner"  # as `marsho.model deepseek-reasoner` does
    try:
        conversation = Conversation(llm=client, system_prompt="You are Marsho.")
        conversation.set_tools([add])
        assert await conversation.chat("what is 2+3?") == "5"
    finally:
        await client.close()
    sent_back = [m for m in strict_fake.requests[1]["messages"] if m.get("tool_calls")]
    assert [m.get("reasoning_content") for m in sent_back] == ["2 and 3: call add"]


def nothing_listens() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


def proxy_fallback_blocks() -> list[Block]:
    return [b for b in BLOCKS if b.page.endswith("recipes/proxy.md") and "MARSHO_FALLBACKS" in b.text]


@pytest.mark.parametrize("block", proxy_fallback_blocks(), ids=ids)
@pytest.mark.parametrize("failure", ["proxy down", "key refused", "no connected db"])
async def test_the_proxy_recipes_fallback_answers_when_the_proxy_fails(
    block: Block, failure: str, strict_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI() as proxy:
        if failure == "key refused":
            proxy.responder = lambda body: error(401, "Authentication Error, Invalid proxy server token passed.")
        if failure == "no connected db":  # LiteLLM without a database answers a wrong key so
            proxy.responder = lambda body: error(400, "No connected db.")
        primary = nothing_listens() if failure == "proxy down" else proxy.base_url
        config = recipe_config(block, tmp_path, monkeypatch, primary, strict_fake.base_url)
        assert config.marsho_fallbacks, "the proxy page's fallback example has a fallback"
        strict_fake.push(tool_calls(("add", {"a": 2, "b": 3})), text("2+3=5"))
        assert await ask_with_a_tool(config) == "2+3=5"
        asked_proxy = len(proxy.requests)
    assert [r["model"] for r in strict_fake.requests] == [config.marsho_fallbacks[0].model] * 2
    # the turn stays on the fallback that answered: the proxy is asked once at most
    assert asked_proxy == (0 if failure == "proxy down" else 1)


def test_the_proxy_fallback_example_goes_straight_to_the_provider() -> None:
    for block in proxy_fallback_blocks():
        fallbacks = json.loads(block.text.split("MARSHO_FALLBACKS=", 1)[1].splitlines()[0])
        assert fallbacks[0]["base_url"] == "https://api.deepseek.com/v1", block.where


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_ollama_recipe_with_its_key_left_empty_is_answered(
    lang: str, strict_fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages say a local server's key may stay empty: Marsho sends the request anyway."""
    block = next(b for b in blocks(f"{lang}/recipes/ollama.md") if b.language == "dotenv")
    local = config_of(block, tmp_path, monkeypatch, marsho_api_key="", marsho_base_url=strict_fake.base_url,
                      marsho_retries=0, marsho_timeout=10)
    assert local.marsho_api_key == "" and not local.marsho_api_keys
    strict_fake.push(tool_calls(("add", {"a": 2, "b": 3})), text("2+3=5"))
    assert await ask_with_a_tool(local) == "2+3=5"
