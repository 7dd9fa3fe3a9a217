"""The per-turn cuts of the agent and store layers (issue 30): what is kept or reused between
turns gives each turn the same values as building them afresh did."""

from __future__ import annotations

import json

from nonebot_plugin_marsho.store.recent import RecentTurns

KEY = "test:group:1"


def _kept(messages: list[dict]) -> RecentTurns:
    recent = RecentTurns()
    recent.read_started(KEY)
    recent.read_ended(KEY, [("t1", [json.dumps(m) for m in messages], [5] * len(messages))],
                      max_messages=40, complete=True)
    return recent


def test_changing_a_read_tool_call_or_content_part_changes_nothing_kept() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": "ok"},
    ]
    recent = _kept(messages)
    [got] = recent.get(KEY, 40) or []
    got.messages[0]["content"][0]["text"] = "changed"
    got.messages[1]["tool_calls"][0]["function"]["name"] = "changed"
    got.messages[2]["content"] = "changed"
    got.messages[3]["extra"] = "changed"
    [again] = recent.get(KEY, 40) or []
    assert again.messages == messages


def test_each_read_gets_messages_of_its_own() -> None:
    recent = _kept([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    [first] = recent.get(KEY, 40) or []
    [second] = recent.get(KEY, 40) or []
    assert first == second
    assert all(a is not b for a, b in zip(first.messages, second.messages, strict=True))
