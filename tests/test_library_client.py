"""The documented library call, `LLMClient(base_url=..., api_key=..., model=...)`
(docs/*/plugin-api.md), works as written: a timeout left out is MARSHO_TIMEOUT's default."""

from __future__ import annotations

from nonebot_plugin_marsho.agent.llm import LLMClient
from nonebot_plugin_marsho.config import Config
from tests.fake_openai import FakeOpenAI, text


async def test_a_client_made_as_the_docs_say_answers(fake: FakeOpenAI) -> None:
    client = LLMClient(base_url=fake.base_url, api_key="k", model="fake-model")
    try:
        assert client.timeout == Config.model_fields["marsho_timeout"].default
        fake.push(text("hello"))
        answer = await client.complete([{"role": "user", "content": "hi"}])
        assert answer.content == "hello"
    finally:
        await client.close()


def test_a_timeout_given_is_kept() -> None:
    assert LLMClient(base_url="http://127.0.0.1:9/v1", api_key="k", model="m", timeout=7).timeout == 7
