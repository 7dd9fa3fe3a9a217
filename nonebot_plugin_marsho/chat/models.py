"""The bot's models, built from the config: the chat model (with its fallbacks), the judge of
unsolicited replies, and the summary model. app.py asks here, and nowhere else builds one: each
is the Config mapped to ModelSettings, composed by the one factory (agent.llm.build_model)."""

from __future__ import annotations

import dataclasses

from ..agent.gate import RequestGate
from ..agent.llm import Fallback, Gate, LLMClient, ModelSettings, build_model
from ..agent.metering import Meter
from ..config import Config
from ..redaction import logger


def settings_of(config: Config) -> ModelSettings:
    """The chat model's settings: MARSHO_MODEL on MARSHO_BASE_URL, its keys, retries, quirks and
    MARSHO_FALLBACKS."""
    return ModelSettings(
        base_url=config.marsho_base_url,
        api_key=config.marsho_api_key,
        model=config.marsho_model,
        timeout=config.marsho_timeout,
        tool_mode=config.marsho_tool_mode,
        tool_mode_by_model=config.marsho_tool_mode_by_model,
        max_response_bytes=config.marsho_max_response_bytes,
        max_answer_chars=config.marsho_max_answer_chars,
        api_keys=config.marsho_api_keys,
        fallbacks=[Fallback(base_url=f.base_url, model=f.model, api_keys=f.keys, tool_mode=f.tool_mode)
                   for f in config.marsho_fallbacks],
        retries=config.marsho_retries,
        retry_budget=config.marsho_retry_budget,
        retry_after_max=config.marsho_retry_after_max,
        quirks={pattern: given.fields() for pattern, given in config.marsho_model_quirks.items()},
        stream=config.marsho_stream,
        reasoning_effort=config.marsho_reasoning_effort or None,
    )


def _on_chat_endpoint(config: Config, model: str, setting: str) -> ModelSettings:
    """A model of its own on the chat model's endpoint and keys (no fallbacks, native tools)."""
    return ModelSettings(
        base_url=config.marsho_base_url, api_key=config.marsho_api_key, api_keys=config.marsho_api_keys,
        model=model, timeout=config.marsho_timeout, model_setting=setting,
        retry_after_max=config.marsho_retry_after_max,
        turn_model_applies=False,  # its own model, over-quota turns included (status says which)
    )


def chat_model(config: Config, meter: Meter | None = None) -> LLMClient:
    """MARSHO_MODEL on MARSHO_BASE_URL, its keys, retries, quirks and MARSHO_FALLBACKS."""
    # requests in flight across all chats, taken round-robin by chat (the lane of each turn is
    # set in chat/matchers.py)
    llm = build_model(settings_of(config), gate=RequestGate(config.marsho_max_concurrent_requests),
                      meter=meter)
    _warn_without_keys(llm)
    return llm


def _warn_without_keys(llm: LLMClient) -> None:
    """Say once, as the bot starts, which endpoints have no key though they are not on this
    machine or a private network (an Ollama or vLLM there needs none, and is not warned about).
    The primary on OpenAI, which is never sent a request without one, is warned about by
    chat/app.py."""
    for endpoint in llm.endpoints:
        if endpoint.key_missing and not (endpoint.index == 0 and endpoint.needs_key):
            setting = llm.settings_of(endpoint)["key_setting"]
            logger.warning(f"marsho: no API key is set for {endpoint.base_url}: set {setting} in .env, "
                           "unless that endpoint needs none")


def judge_model(config: Config, gate: Gate | None, meter: Meter | None = None) -> LLMClient:
    """MARSHO_ACTIVE_JUDGE_MODEL: on the chat model's endpoint, keys and gate; no retries."""
    settings = dataclasses.replace(
        _on_chat_endpoint(config, config.marsho_active_judge_model, "MARSHO_ACTIVE_JUDGE_MODEL"),
        timeout=min(config.marsho_timeout, 30.0), max_response_bytes=100_000, max_answer_chars=200)
    return build_model(settings, gate=gate, meter=meter)


def summary_model(config: Config, gate: Gate | None, meter: Meter | None = None) -> LLMClient:
    """MARSHO_SUMMARY_MODEL: on the chat model's endpoint, keys and gate."""
    settings = dataclasses.replace(
        _on_chat_endpoint(config, config.marsho_summary_model, "MARSHO_SUMMARY_MODEL"),
        retries=config.marsho_retries, retry_budget=config.marsho_retry_budget,
        max_response_bytes=config.marsho_max_response_bytes,
        quirks={pattern: given.fields() for pattern, given in config.marsho_model_quirks.items()})
    return build_model(settings, gate=gate, meter=meter)
