"""The programmatic API (the "AIO" calls of the tool system's spec): Conversation's set_tools, chat,
get_tool_calls, submit_tool_results and get_last_response, against the fake endpoint over loopback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nonebot_plugin_marsho import Conversation, MarshoError, Toolbox, ToolContext
from nonebot_plugin_marsho.agent.llm import LLMClient
from nonebot_plugin_marsho.exceptions import EndpointError
from tests.conftest import llm_client
from tests.fake_openai import FakeOpenAI, error, text, tool_calls

WEATHER_SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather now in a city",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}


class Spy:
    """Tool functions that record their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def functions(self) -> tuple[Any, Any]:
        spy = self

        def get_weather(location: str) -> str:
            """Get the current weather of a city.

            Args:
                location: City name, e.g. Hangzhou.
            """
            spy.calls.append(("get_weather", {"location": location}))
            return f"{location}: 21°C, sunny"

        async def add(a: int, b: int = 1) -> int:
            """Add two integers.

            Args:
                a: The first number.
                b: The second number.
            """
            spy.calls.append(("add", {"a": a, "b": b}))
            return a + b

        return get_weather, add


@pytest.fixture
def spy() -> Spy:
    return Spy()


def llm(fake: FakeOpenAI) -> LLMClient:
    return llm_client(fake)


def conversation(fake: FakeOpenAI, **options: Any) -> Conversation:
    return Conversation(llm=llm(fake), **options)


def names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools", [])]


def roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"]]


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


# --- set_tools -------------------------------------------------------------------------------

async def test_set_tools_with_plain_functions_sends_their_derived_schemas(
    fake: FakeOpenAI, spy: Spy
) -> None:
    get_weather, add = spy.functions()
    conv = conversation(fake)
    conv.set_tools([get_weather, add])
    fake.push(text("hi"))
    await conv.chat("hello")
    sent = {tool["function"]["name"]: tool for tool in fake.requests[0]["tools"]}
    assert list(sent) == ["add", "get_weather"]  # by name: the same list on every turn
    assert sent["get_weather"]["type"] == "function"
    weather = sent["get_weather"]["function"]
    assert weather["description"] == "Get the current weather of a city."
    assert weather["parameters"]["properties"]["location"] == {
        "type": "string", "description": "City name, e.g. Hangzhou.",
    }
    assert weather["parameters"]["required"] == ["location"]
    adding = sent["add"]["function"]["parameters"]
    assert adding["properties"]["a"]["type"] == "integer"
    assert adding["properties"]["b"]["default"] == 1
    assert adding["required"] == ["a"]
    assert conv.tools == fake.requests[0]["tools"]


async def test_set_tools_with_a_toolbox_keeps_presets_from_the_model(fake: FakeOpenAI) -> None:
    seen: list[str] = []

    def search(query: str, api_key: str) -> str:
        """Search the web.

        Args:
            query: What to look for.
            api_key: The service's key.
        """
        seen.append(api_key)
        return f"results for {query}"

    box = Toolbox()
    box.add(search, api_key="sk-preset-secret-123")
    conv = conversation(fake)
    conv.set_tools(box)
    fake.push(tool_calls(("search", {"query": "nonebot"}, "c1")), text("found it"))
    assert await conv.chat("look up nonebot") == "found it"
    assert names(fake.requests[0]) == ["search"]
    assert list(fake.requests[0]["tools"][0]["function"]["parameters"]["properties"]) == ["query"]
    assert seen == ["sk-preset-secret-123"]
    assert tool_messages(fake.requests[1]) == [
        {"role": "tool", "tool_call_id": "c1", "content": "results for nonebot"}
    ]
    assert "sk-preset-secret-123" not in json.dumps(fake.requests)


async def test_raw_schemas_are_sent_as_given_in_manual_mode(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(text("ok"))
    await conv.chat("hi")
    assert fake.requests[0]["tools"] == [WEATHER_SCHEMA]


def test_raw_schemas_are_refused_in_auto_mode_naming_the_fix() -> None:
    conv = Conversation(llm=llm_client("http://127.0.0.1:9/v1", api_key="k",
                                      model="m", timeout=1))
    with pytest.raises(ValueError) as caught:
        conv.set_tools([WEATHER_SCHEMA])
    message = str(caught.value)
    assert "auto_run_tools=False" in message
    assert "submit_tool_results" in message
    assert conv.tools == []


def test_duplicate_tool_names_are_refused_and_the_old_tools_kept(spy: Spy) -> None:
    get_weather, add = spy.functions()
    other = Spy()
    second_weather, _ = other.functions()
    conv = Conversation(llm=llm_client("http://127.0.0.1:9/v1", api_key="k",
                                      model="m", timeout=1))
    conv.set_tools([add])
    with pytest.raises(ValueError, match="get_weather"):
        conv.set_tools([get_weather, second_weather])
    assert [tool["function"]["name"] for tool in conv.tools] == ["add"]
    manual = Conversation(auto_run_tools=False, llm=conv.llm)
    with pytest.raises(ValueError, match="get_weather"):
        manual.set_tools([get_weather, WEATHER_SCHEMA])


@pytest.mark.parametrize("auto", [True, False])
def test_names_endpoints_reject_are_refused_by_set_tools(auto: bool) -> None:
    """OpenAI-compatible endpoints take ^[A-Za-z0-9_-]{1,64}$ (the loader checks it for toolkit
    folders): refused here, not as a 400 at the next chat."""

    def 天气(city: str) -> str:
        """Weather of a city."""
        return city

    conv = Conversation(auto_run_tools=auto, llm=llm_client("http://127.0.0.1:9/v1", timeout=1))
    with pytest.raises(ValueError, match="天气"):
        conv.set_tools([天气])
    if not auto:
        bad_schema = {"type": "function", "function": {"name": "get weather!"}}
        with pytest.raises(ValueError, match="get weather!"):
            conv.set_tools([bad_schema])
    assert conv.tools == []


def test_a_callable_without_a_name_is_refused_with_a_clear_error() -> None:
    import functools

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    conv = Conversation(llm=llm_client("http://127.0.0.1:9/v1", api_key="k",
                                      model="m", timeout=1))
    with pytest.raises(ValueError, match="name"):  # not AttributeError: '__name__'
        conv.set_tools([functools.partial(add, b=1)])


async def test_set_tools_replaces_the_earlier_tools(fake: FakeOpenAI, spy: Spy) -> None:
    get_weather, add = spy.functions()
    conv = conversation(fake)
    conv.set_tools([get_weather])
    conv.set_tools([add])
    fake.push(text("ok"))
    await conv.chat("hi")
    assert names(fake.requests[0]) == ["add"]


# --- chat in auto mode -------------------------------------------------------------------------

async def test_auto_mode_runs_the_tools_and_returns_the_final_text(
    fake: FakeOpenAI, spy: Spy
) -> None:
    get_weather, add = spy.functions()
    conv = conversation(fake)
    conv.set_tools([get_weather, add])
    fake.push(
        tool_calls(("get_weather", {"location": "Paris"}, "call_1"),
                   ("add", {"a": 2, "b": 3}, "call_2")),
        text("Sunny in Paris, and 2+3=5"),
    )
    assert await conv.chat("weather in Paris, and 2+3?") == "Sunny in Paris, and 2+3=5"
    assert spy.calls == [("get_weather", {"location": "Paris"}), ("add", {"a": 2, "b": 3})]
    assert roles(fake.requests[1]) == ["user", "assistant", "tool", "tool"]
    assert tool_messages(fake.requests[1]) == [
        {"role": "tool", "tool_call_id": "call_1", "content": "Paris: 21°C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "5"},
    ]
    assert conv.get_last_response() == "Sunny in Paris, and 2+3=5"


async def test_get_tool_calls_after_an_auto_turn_is_seed_001s_array(
    fake: FakeOpenAI, spy: Spy
) -> None:
    get_weather, _ = spy.functions()
    conv = conversation(fake)
    conv.set_tools([get_weather])
    fake.push(tool_calls(("get_weather", {"location": "Oslo"}, "call_9")), text("cold"))
    await conv.chat("weather in Oslo?")
    raw = conv.get_tool_calls()
    assert isinstance(raw, str)
    calls = json.loads(raw)
    assert calls == [{
        "id": "call_9",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"location": "Oslo"})},
    }]
    assert isinstance(calls[0]["function"]["arguments"], str)
    # the next response made no calls: an empty string, not "[]"
    fake.push(text("you're welcome"))
    await conv.chat("thanks")
    assert conv.get_tool_calls() == ""


async def test_get_tool_calls_is_empty_before_any_chat_and_without_calls(fake: FakeOpenAI) -> None:
    conv = conversation(fake)
    assert conv.get_tool_calls() == ""
    fake.push(text("plain"))
    await conv.chat("hi")
    assert conv.get_tool_calls() == ""


async def test_auto_mode_keeps_the_conversation_across_chats(fake: FakeOpenAI, spy: Spy) -> None:
    get_weather, _ = spy.functions()
    conv = conversation(fake)
    conv.set_tools([get_weather])
    fake.push(tool_calls(("get_weather", {"location": "Rome"}, "r")), text("warm"),
              text("yes, warm"))
    await conv.chat("Rome?")
    await conv.chat("sure?")
    assert roles(fake.requests[2]) == ["user", "assistant", "tool", "assistant", "user"]


# --- manual mode -------------------------------------------------------------------------------

async def test_manual_mode_stops_at_tool_calls_without_running_them(
    fake: FakeOpenAI, spy: Spy
) -> None:
    get_weather, add = spy.functions()
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([get_weather, add])
    fake.push(tool_calls(("get_weather", {"location": "Paris"}, "call_a"),
                         ("add", {"a": 1, "b": 2}, "call_b")))
    assert await conv.chat("weather, and 1+2?") == ""
    assert spy.calls == []  # nothing ran
    assert len(fake.requests) == 1  # and nothing was sent back
    assert json.loads(conv.get_tool_calls()) == [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
    ]


async def test_manual_mode_submit_by_id_mapping(fake: FakeOpenAI, spy: Spy) -> None:
    get_weather, add = spy.functions()
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([get_weather, add])
    fake.push(tool_calls(("get_weather", {"location": "Paris"}, "call_a"),
                         ("add", {"a": 1, "b": 2}, "call_b")),
              text("Paris is sunny; 1+2=3"))
    await conv.chat("weather, and 1+2?")
    # given in another order than the calls: the messages still follow the calls
    answer = await conv.submit_tool_results({"call_b": 3, "call_a": "Paris: sunny"})
    assert answer == "Paris is sunny; 1+2=3"
    assert spy.calls == []
    second = fake.requests[1]
    assert roles(second) == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in second["messages"][1]["tool_calls"]] == ["call_a", "call_b"]
    assert tool_messages(second) == [
        {"role": "tool", "tool_call_id": "call_a", "content": "Paris: sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "3"},
    ]
    assert names(second) == ["add", "get_weather"]
    assert conv.get_last_response() == "Paris is sunny; 1+2=3"
    assert conv.get_tool_calls() == ""


async def test_manual_mode_submit_by_list_in_call_order(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(tool_calls(("get_weather", {"location": "Oslo"}, "o"),
                         ("get_weather", {"location": "Rome"}, "r")),
              text("Oslo is colder"))
    await conv.chat("compare Oslo and Rome")
    answer = await conv.submit_tool_results(["Oslo: -3°C", {"city": "Rome", "celsius": 18}])
    assert answer == "Oslo is colder"
    assert tool_messages(fake.requests[1]) == [
        {"role": "tool", "tool_call_id": "o", "content": "Oslo: -3°C"},
        {"role": "tool", "tool_call_id": "r", "content": '{"city": "Rome", "celsius": 18}'},
    ]


async def test_manual_mode_a_submit_may_lead_to_more_calls(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(tool_calls(("get_weather", {"location": "Oslo"}, "first")),
              tool_calls(("get_weather", {"location": "Rome"}, "second")),
              text("done"))
    await conv.chat("go")
    assert await conv.submit_tool_results(["cold"]) == ""
    assert [c["id"] for c in json.loads(conv.get_tool_calls())] == ["second"]
    assert await conv.submit_tool_results({"second": "warm"}) == "done"
    assert roles(fake.requests[2]) == ["user", "assistant", "tool", "assistant", "tool"]


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        ({"call_a": "x"}, "missing"),                             # an id left out
        ({"call_a": "x", "call_b": "y", "call_z": "z"}, "call_z"),  # an id never called
        ({"call_a": "x", "nope": "y"}, "nope"),                     # a wrong id
        (["only one"], "2 calls"),                                  # too few in order
        (["a", "b", "c"], "3 results"),                             # too many in order
        ([], "0 results"),
    ],
)
async def test_wrong_results_raise_and_leave_the_conversation_usable(
    fake: FakeOpenAI, results: Any, expected: str
) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(tool_calls(("get_weather", {"location": "A"}, "call_a"),
                         ("get_weather", {"location": "B"}, "call_b")),
              text("A and B"))
    await conv.chat("A and B?")
    with pytest.raises(ValueError, match=expected):
        await conv.submit_tool_results(results)
    assert len(fake.requests) == 1  # nothing was sent
    assert [c["id"] for c in json.loads(conv.get_tool_calls())] == ["call_a", "call_b"]
    assert await conv.submit_tool_results({"call_a": "a", "call_b": "b"}) == "A and B"
    assert [m["tool_call_id"] for m in tool_messages(fake.requests[1])] == ["call_a", "call_b"]


async def test_chat_while_calls_are_pending_raises(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(tool_calls(("get_weather", {"location": "Paris"}, "p")), text("sunny"))
    await conv.chat("Paris?")
    with pytest.raises(MarshoError, match="submit_tool_results"):
        await conv.chat("never mind")
    assert len(fake.requests) == 1
    assert await conv.submit_tool_results(["sunny"]) == "sunny"
    # the refused question was not added to the conversation
    assert [m.get("content") for m in fake.requests[1]["messages"] if m["role"] == "user"] == [
        "Paris?"
    ]


async def test_submitting_with_nothing_pending_raises(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    with pytest.raises(MarshoError, match="no tool calls"):
        await conv.submit_tool_results([])
    fake.push(text("hello"))
    await conv.chat("hi")
    with pytest.raises(MarshoError, match="no tool calls"):
        await conv.submit_tool_results({"x": 1})
    assert len(fake.requests) == 1


async def test_submitting_in_auto_mode_raises(fake: FakeOpenAI, spy: Spy) -> None:
    get_weather, _ = spy.functions()
    conv = conversation(fake)
    conv.set_tools([get_weather])
    fake.push(tool_calls(("get_weather", {"location": "X"}, "x")), text("done"))
    await conv.chat("X?")
    with pytest.raises(MarshoError):
        await conv.submit_tool_results({"x": "again"})


# --- get_last_response, system prompt, failures ---------------------------------------------------

async def test_get_last_response_returns_the_last_text(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    assert conv.get_last_response() == ""
    fake.push(text("first"), text("second"))
    assert await conv.chat("one") == "first"
    assert conv.get_last_response() == "first"
    await conv.chat("two")
    assert conv.get_last_response() == "second"


async def test_get_last_response_in_manual_mode_is_the_text_beside_the_calls(
    fake: FakeOpenAI
) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(tool_calls(("get_weather", {"location": "Oslo"}, "o"), content="Let me check."))
    assert await conv.chat("Oslo?") == "Let me check."
    assert conv.get_last_response() == "Let me check."
    assert conv.get_tool_calls() != ""


async def test_the_system_prompt_is_sent_first(fake: FakeOpenAI) -> None:
    conv = conversation(fake, system_prompt="You are a weather bot.")
    fake.push(text("a"), text("b"))
    await conv.chat("hi")
    await conv.chat("again")
    for body in fake.requests:
        assert body["messages"][0] == {"role": "system", "content": "You are a weather bot."}
    assert roles(fake.requests[1]) == ["system", "user", "assistant", "user"]


async def test_no_system_message_without_a_system_prompt(fake: FakeOpenAI) -> None:
    conv = conversation(fake)
    fake.push(text("a"))
    await conv.chat("hi")
    assert fake.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in fake.requests[0]  # no tools set: none offered


async def test_a_failed_chat_leaves_the_conversation_as_it_was(fake: FakeOpenAI) -> None:
    """Like the engine's turns: the question of a failed request is not kept."""
    conv = conversation(fake)
    fake.push(text("first answer"), error(500, "upstream broke"), text("third answer"))
    await conv.chat("first")
    with pytest.raises(EndpointError, match="upstream broke"):
        await conv.chat("second")
    assert await conv.chat("third") == "third answer"
    assert fake.requests[-1]["messages"] == [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "third"},
    ]


async def test_a_failed_submit_can_be_retried(fake: FakeOpenAI) -> None:
    conv = conversation(fake, auto_run_tools=False)
    conv.set_tools([WEATHER_SCHEMA])
    fake.push(tool_calls(("get_weather", {"location": "Oslo"}, "o")),
              error(503, "overloaded"), text("Oslo is cold"))
    await conv.chat("Oslo?")
    with pytest.raises(EndpointError, match="overloaded"):
        await conv.submit_tool_results(["cold"])
    assert await conv.submit_tool_results(["cold"]) == "Oslo is cold"
    assert roles(fake.requests[-1]) == ["user", "assistant", "tool"]


# --- context and permissions ----------------------------------------------------------------------

def _restricted_box(ran: list[str]) -> Toolbox:
    box = Toolbox()

    def status() -> str:
        """Show the bot's status."""
        ran.append("status")
        return "fine"

    def shutdown() -> str:
        """Shut the bot down."""
        ran.append("shutdown")
        return "bye"

    box.add(status)
    box.add(shutdown, permission="superuser")
    return box


async def test_a_member_conversation_is_not_offered_a_superuser_tool(fake: FakeOpenAI) -> None:
    ran: list[str] = []
    conv = conversation(fake, context=ToolContext(role="member"))
    conv.set_tools(_restricted_box(ran))
    assert [tool["function"]["name"] for tool in conv.tools] == ["status"]
    # the model calls it anyway: checked again in code, and not run
    fake.push(tool_calls(("shutdown", {}, "s")), text("I may not do that"))
    assert await conv.chat("shut down") == "I may not do that"
    assert names(fake.requests[0]) == ["status"]
    assert ran == []
    (message,) = tool_messages(fake.requests[1])
    assert message["tool_call_id"] == "s" and "superuser" in message["content"]


async def test_a_superuser_conversation_is_offered_every_tool(fake: FakeOpenAI) -> None:
    ran: list[str] = []
    conv = conversation(fake, context=ToolContext(role="superuser"))
    conv.set_tools(_restricted_box(ran))
    fake.push(tool_calls(("shutdown", {}, "s")), text("bye"))
    await conv.chat("shut down")
    assert names(fake.requests[0]) == ["shutdown", "status"]
    assert ran == ["shutdown"]


async def test_a_tool_taking_the_context_receives_the_conversations(fake: FakeOpenAI) -> None:
    seen: list[ToolContext] = []

    def whoami(context: ToolContext) -> str:
        """Say who is asking."""
        seen.append(context)
        return context.user_id

    asker = ToolContext(session_key="other-plugin:1", user_id="42", role="admin")
    conv = conversation(fake, context=asker)
    conv.set_tools([whoami])
    fake.push(tool_calls(("whoami", {}, "w")), text("you are 42"))
    await conv.chat("who am I?")
    assert fake.requests[0]["tools"][0]["function"]["parameters"]["properties"] == {}
    assert seen == [asker]


# --- the default endpoint: the running plugin's ------------------------------------------------

async def test_the_default_llm_is_the_running_plugins(fake: FakeOpenAI, marsho) -> None:
    conv = Conversation(system_prompt="short answers")
    assert conv.llm is marsho.require_engine().llm
    fake.push(text("from the plugin's endpoint"))
    assert await conv.chat("hi") == "from the plugin's endpoint"
    (body,) = fake.requests
    assert body["model"] == "fake-model"
    assert body["_headers"]["authorization"] == "Bearer test-key"
    assert body["messages"] == [
        {"role": "system", "content": "short answers"}, {"role": "user", "content": "hi"},
    ]


def test_without_a_bot_a_conversation_needs_its_own_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Conversation, "default_llm", None)  # as outside a bot
    conv = Conversation(system_prompt="short answers")
    with pytest.raises(MarshoError, match=r"pass Conversation\(llm=LLMClient\(\.\.\.\)\)"):
        conv.llm  # noqa: B018
