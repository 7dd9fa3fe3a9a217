"""Through bot.py and the OneBot simulator (issue 25): a provider that answers
`429 Retry-After: 999999` four times and then recovers is answered again at once, not after an
hour (MARSHO_RETRY_AFTER_MAX, short here); `marsho.status` said why it rested; and a superuser's
`marsho.export` in a group posts no content, its path going to them privately."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CHAT_TOOLSET
from tests.fake_openai import Answer, FakeOpenAI, error, text, tool_calls
from tests.onebot_sim import BotProcess, OneBotSim, output_if_failed, wait_for_quiet

OWNER_ID = 10099
BUSY = ("Sorry, I could not answer: the model's service is busy, try again in a moment. The bot's owner "
        "has the details in the log.")
OUTAGE = 4
"""429s the provider answers before it recovers."""


class Outage:
    """A provider down for OUTAGE requests (429, `Retry-After: 999999`), then answering."""

    def __init__(self) -> None:
        self.refused = 0

    def __call__(self, body: dict[str, Any]) -> Answer:
        if self.refused < OUTAGE:
            self.refused += 1
            return error(429, "Rate limit reached, come back tomorrow", headers={"Retry-After": "999999"})
        return text("back again")


@pytest.fixture(scope="module")
async def outage_bot(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> AsyncIterator[OneBotSim]:
    """A bot.py with two keys, Retry-After honoured up to 1 s, and its simulator."""
    process = BotProcess(base_url=endpoint.base_url, toolkit_dirs=[CHAT_TOOLSET], env={
        "MARSHO_API_KEYS": json.dumps(["test-key-2"]), "MARSHO_RETRY_AFTER_MAX": "1",
        "SUPERUSERS": f'["{OWNER_ID}"]'})
    async with process:
        with output_if_failed(process, request):
            async with process.simulator(self_id=2233445577) as sim:
                yield sim


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_question_after_a_day_long_retry_after_provider_recovered_is_answered(
    endpoint: FakeOpenAI, outage_bot: OneBotSim
) -> None:
    sim = outage_bot
    endpoint.reset()
    outage = Outage()
    endpoint.responder = outage
    _, first = await sim.ask("marsho are you there?", group_id=32001, user_id=10001)
    assert first.text == BUSY
    # the four 429s came to both keys, each rested as long as the cap, then tried again
    assert await wait_for_quiet(lambda: len(endpoint.requests), until=lambda: outage.refused == OUTAGE)
    keys = {body["_headers"]["authorization"] for body in endpoint.requests}
    assert keys == {"Bearer test-key", "Bearer test-key-2"}
    _, status = await sim.ask("marsho.status", group_id=32001, user_id=OWNER_ID)
    assert "errors: rate limit 4" in status.text, status.text
    _, answer = await sim.ask("marsho and now?", group_id=32001, user_id=10002)
    assert answer.text == "back again"
    assert len(endpoint.requests) == OUTAGE + 1


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_export_in_a_group_posts_no_content_and_tells_the_owner_privately(
    endpoint: FakeOpenAI, outage_bot: OneBotSim
) -> None:
    sim = outage_bot
    endpoint.reset()
    endpoint.push(tool_calls(("marshoai-example__get_weather", {"location": "Hangzhou"}, "w1")),
                  text("Hot in Hangzhou"))
    group = 32002
    await sim.ask("marsho weather?", group_id=group, user_id=OWNER_ID)
    event, reply = await sim.ask("marsho.export", group_id=group, user_id=OWNER_ID)
    assert reply.text == "4 messages exported; where the file is was sent to you privately."
    private = await sim.wait_send(where=lambda action: action.params.get("message_type") == "private")
    assert int(private.params["user_id"]) == OWNER_ID
    found = re.fullmatch(rf"4 messages of OneBot V11:group:{group} exported to (.+?\.json)", private.text)
    assert found, private.text
    saved = Path(found.group(1)).read_text(encoding="utf-8")
    assert "114514" in saved  # the weather tool's result: in the file, never in the group
    in_group = [action.text for action in sim.actions
                if action.params.get("message_type") != "private" and int(action.params.get("group_id", 0)) == group]
    assert not any("114514" in said or ".json" in said for said in in_group), in_group
