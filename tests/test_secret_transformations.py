"""Redaction undoes what a hostile web service does to a secret it echoes (issue 25): upper or
lower case, base64 (standard or URL-safe, padded or not, alone or inside a longer encoding), hex,
a line break anywhere in it, halves in two fields of one result; and hides nothing more (short
values, words that half a secret happens to hold)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.chat.app import held_secrets
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.redaction import REDACTED, SECRETS, Secrets, hide
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import ToolRunner, Toolset
from nonebot_plugin_marsho.tools.webservices import load_webservices
from tests.conftest import llm_client
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.fake_webservice import FakeWebService
from tests.fake_webservice import raw as service_raw

TOKEN = "svc-Token-4711-Zq4Wf8YtR2pLm6Nv"
"""A `${SVC_TOKEN}` value: mixed case, long enough to be hidden piece by piece."""


def b64(data: str | bytes, *, urlsafe: bool = False, padded: bool = True) -> str:
    raw = data.encode() if isinstance(data, str) else data
    encoded = (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()
    return encoded if padded else encoded.rstrip("=")


def halves(secret: str) -> tuple[str, str]:
    return secret[:len(secret) // 2], secret[len(secret) // 2:]


FORMS = {
    "upper": TOKEN.upper(),
    "lower": TOKEN.lower(),
    "base64": b64(TOKEN),
    "base64 unpadded": b64(TOKEN, padded=False),
    "base64 url-safe": b64(TOKEN, urlsafe=True),
    "base64 of the upper case": b64(TOKEN.upper()),
    "hex": TOKEN.encode().hex(),
    "hex upper": TOKEN.encode().hex().upper(),
    "split by a newline": TOKEN[:7] + "\n" + TOKEN[7:],
    "split by a CRLF and an indent": TOKEN[:20] + "\r\n    " + TOKEN[20:],
    "split by an escaped newline": TOKEN[:3] + "\\n" + TOKEN[3:],
    "split by a <br>": TOKEN[:25] + "<br/>" + TOKEN[25:],
}


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_a_transformed_secret_is_hidden(form: str) -> None:
    secrets = Secrets([TOKEN])
    assert secrets(f"echo: {form} (done)") == f"echo: {REDACTED} (done)"


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_a_secret_inside_a_longer_base64_is_hidden(offset: int) -> None:
    secrets = Secrets([TOKEN])
    encoded = b64(b"x" * offset + f"Authorization: Bearer {TOKEN}; more".encode())
    hidden = secrets(encoded)
    assert REDACTED in hidden
    left = hidden.replace(REDACTED, "")
    assert len(encoded) - len(left) >= len(b64(TOKEN)) - 4  # all but the characters it shares


def test_a_secret_in_halves_in_one_result_loses_both() -> None:
    first, second = halves(TOKEN)
    secrets = Secrets([TOKEN])
    for result in (json.dumps({"a": first, "b": second}), json.dumps({"b": second, "a": first}),
                   f"{first.upper()} ... {second.lower()}"):
        hidden = secrets(result)
        assert first.lower() not in hidden.lower() and second.lower() not in hidden.lower(), hidden


def test_of_an_uneven_split_the_longer_part_is_hidden() -> None:
    secrets = Secrets([TOKEN])
    assert secrets(json.dumps({"a": TOKEN[:4], "b": TOKEN[4:]})) == json.dumps({"a": TOKEN[:4], "b": REDACTED})


def test_short_values_keep_the_rules_they_had() -> None:
    assert Secrets(["admin", "1234"])("ADMIN admin 1234") == "ADMIN admin 1234"  # under MIN_SECRET
    six = Secrets(["abc123"])
    assert six("ABC123 abc123") == f"{REDACTED} {REDACTED}"  # six: any case, the whole of it
    assert six("abc12 and 123") == "abc12 and 123"  # no pieces of a short one
    # a toolkit's preset of 4 characters is hidden as written only, as before
    assert hide("key abcd, ABCD", ["abcd"], min_length=4) == f"key {REDACTED}, ABCD"


def test_half_of_a_secret_made_of_words_leaves_the_words_alone() -> None:
    secrets = Secrets(["weather-secret-1"])
    said = "the weather-forecast for secret-santa: sunny"
    assert secrets(said) == said
    assert secrets("WEATHER-SECRET-1") == REDACTED


def test_ordinary_text_and_other_encodings_are_left_alone() -> None:
    secrets = Secrets([TOKEN])
    said = (f"{b64('something else entirely')} {'cafe' * 10} svc-Token is the setting's name;\n"
            "a line\nand another")
    assert secrets(said) == said


# --- a web service echoing its ${ENV} header, through the engine -------------------------------


ECHOES = {
    "upper-cased": f"authorization: BEARER {TOKEN.upper()}",
    "base64-encoded": f"authorization: {b64('Bearer ' + TOKEN)}",
    "in halves": json.dumps({"head": halves(TOKEN)[0], "tail": halves(TOKEN)[1]}),
    "split across a line": f"authorization: Bearer {TOKEN[:9]}\n{TOKEN[9:]}",
    "in hex": TOKEN.encode().hex(),
}


@pytest.mark.parametrize("echo", ECHOES.values(), ids=ECHOES.keys())
async def test_a_web_service_echoing_its_secret_transformed_reaches_neither_model_nor_store(
    tmp_path: Path, fake: FakeOpenAI, echo: str
) -> None:
    path = tmp_path / "webservices.json"
    first, second = halves(TOKEN)
    with FakeWebService() as service:
        path.write_text(json.dumps({"toolkit": "svc", "tools": [{
            "name": "echo", "description": "Echo", "url": service.url(),
            "headers": {"Authorization": "Bearer ${SVC_TOKEN}"},
            "parameters": {"type": "object", "properties": {}}}]}), encoding="utf-8")
        services, problems = load_webservices(path, environ={"SVC_TOKEN": TOKEN})
        assert services is not None, problems
        toolset = Toolset()
        toolset.add(services)
        held = held_secrets(Config(), toolset)
        SECRETS.add(*held)
        store = SqlStore("sqlite://")
        runner = ToolRunner(toolset, timeout=5)
        engine = Engine(llm_client(fake), toolset, store, runner)
        try:
            service.push(service_raw(f"# Echo\n\n{echo}", status=200, content_type="text/markdown"))
            fake.push(tool_calls(("svc__echo", {}, "e1")), text("done"))
            reply = await engine.chat("k", "echo please")
            assert service.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
            sent = json.dumps(fake.requests[-1], ensure_ascii=False)
            stored = json.dumps(await store.export("k"), ensure_ascii=False)
            [(_, result)] = reply.calls
            for seen in (sent, stored, result.content):
                folded = seen.lower()
                assert first.lower() not in folded and second.lower() not in folded, seen
                assert b64("Bearer " + TOKEN)[10:-4] not in seen and TOKEN.encode().hex() not in folded
            assert REDACTED in result.content
        finally:
            SECRETS.discard(*held)
            runner.close()
            await store.close()
