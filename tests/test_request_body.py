"""The request body the endpoint sends: byte for byte what the OpenAI SDK would write, with the
tools' JSON kept per toolset (agent/model/endpoint.py's request_body and ToolsJson)."""

from __future__ import annotations

import copy
import json
from typing import Any

from openai._utils._json import openapi_dumps

from nonebot_plugin_marsho.agent.model.endpoint import ToolsJson, request_body


def _tool(name: str, description: str = "does it", **properties: Any) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties or {"x": {"type": "string"}}}}}


def _request(tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "model": "gpt-x", "temperature": 0.5,
        "messages": [{"role": "system", "content": "你好, Marsho"},
                     {"role": "user", "content": [{"type": "text", "text": "hi ✨"}]}],
    }
    if tools is not None:
        request["tools"] = tools
        request["tool_choice"] = "auto"
    request["max_tokens"] = 100
    return request


def test_the_body_is_the_sdks_byte_for_byte_with_and_without_tools() -> None:
    for request in (_request(), _request([_tool("clock"), _tool("calc", "算 1+1")]), _request([])):
        assert request_body(request) == openapi_dumps(request)


def test_the_same_tools_twice_are_encoded_once() -> None:
    cache = ToolsJson()
    first = cache.encoded([_tool("clock")])
    assert cache.encoded([_tool("clock")]) is first  # an equal list (new dicts): the kept bytes


def test_a_schema_changed_in_place_makes_new_json() -> None:
    cache = ToolsJson()
    tools = [_tool("clock")]
    before = cache.encoded(tools)
    tools[0]["function"]["parameters"]["properties"]["zone"] = {"type": "string"}
    after = cache.encoded(tools)
    assert after != before
    assert json.loads(after) == tools


def test_another_toolset_gets_its_own_json_and_each_is_kept() -> None:
    cache = ToolsJson()
    members, admins = [_tool("clock")], [_tool("clock"), _tool("kick", "removes a member")]
    for_members, for_admins = cache.encoded(members), cache.encoded(admins)
    assert json.loads(for_members) == members and json.loads(for_admins) == admins
    assert cache.encoded(copy.deepcopy(members)) is for_members
    assert cache.encoded(copy.deepcopy(admins)) is for_admins


def test_a_description_changed_makes_new_json() -> None:
    cache = ToolsJson()
    cache.encoded([_tool("clock", "tells the time")])
    assert json.loads(cache.encoded([_tool("clock", "说出时间")]))[0]["function"]["description"] == "说出时间"


def test_only_the_last_few_toolsets_are_kept() -> None:
    cache = ToolsJson()
    for index in range(ToolsJson.SIZE + 5):
        cache.encoded([_tool(f"t{index}")])
    assert len(cache._entries) == ToolsJson.SIZE
