"""The bot's models, built from the config: the chat model (with its fallbacks), the judge of
unsolicited replies, and the summary model. app.py asks here, and nowhere else builds one."""

from __future__ import annotations

from ..agent.gate import RequestGate
from ..agent.llm import Fallback, Gate, LLMClient
from ..config import Config


def chat_model(config: Config) -> LLMClient:
    """MARSHO_MODEL on MARSHO_BASE_URL, its keys, retries, quirks and MARSHO_FALLBACKS."""
    return LLMClient(
        base_url=config.marsho_base_url,
        api_key=config.marsho_api_key,
        model=config.marsho_model,
        timeout=config.marsho_timeout,
        tool_mode=config.marsho_tool_mode,
        tool_mode_by_model=config.marsho_tool_mode_by_model,
        max_response_bytes=config.marsho_max_response_bytes,
        max_answer_chars=config.marsho_max_answer_chars,
        # requests in flight across all chats, taken round-robin by chat (the lane of each
        # turn is set in chat/matchers.py)
        gate=RequestGate(config.marsho_max_concurrent_requests),
        api_keys=config.marsho_api_keys,
        fallbacks=[Fallback(base_url=f.base_url, model=f.model, api_keys=f.keys, tool_mode=f.tool_mode)
                   for f in config.marsho_fallbacks],
        retries=config.marsho_retries,
        retry_budget=config.marsho_retry_budget,
        quirks={pattern: given.fields() for pattern, given in config.marsho_model_quirks.items()},
    )


def judge_model(config: Config, gate: Gate | None) -> LLMClient:
    """MARSHO_ACTIVE_JUDGE_MODEL: on the chat model's endpoint, keys and gate; no retries."""
    return LLMClient(base_url=config.marsho_base_url, api_key=config.marsho_api_key,
                     api_keys=config.marsho_api_keys, model=config.marsho_active_judge_model,
                     timeout=min(config.marsho_timeout, 30.0), gate=gate,
                     max_response_bytes=100_000, max_answer_chars=200,
                     model_setting="MARSHO_ACTIVE_JUDGE_MODEL", turn_model_applies=False)


def summary_model(config: Config, gate: Gate | None) -> LLMClient:
    """MARSHO_SUMMARY_MODEL: on the chat model's endpoint, keys and gate."""
    return LLMClient(
        base_url=config.marsho_base_url, api_key=config.marsho_api_key,
        api_keys=config.marsho_api_keys, model=config.marsho_summary_model,
        timeout=config.marsho_timeout, gate=gate, retries=config.marsho_retries,
        retry_budget=config.marsho_retry_budget,
        max_response_bytes=config.marsho_max_response_bytes, model_setting="MARSHO_SUMMARY_MODEL",
        turn_model_applies=False,  # its own model, over-quota turns included (status says which)
        quirks={pattern: given.fields() for pattern, given in config.marsho_model_quirks.items()})
