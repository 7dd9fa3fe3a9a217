"""The OpenAI SDK loaded without the types of every endpoint (agent/sdk.py, store/deferred.py):
the requests Marsho sends work through it, the rest of the SDK loads when something asks for it,
and the package is then what a plain `import openai` makes. Each check runs in a fresh
interpreter (sys.modules as a bot's)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.fresh_python import REPO_ROOT, run_json

SNAPSHOT = """
import json, sys
import openai, openai.lib, openai.types
print(json.dumps({"dir": sorted(dir(openai)), "types": sorted(dir(openai.types)),
                  "lib": sorted(dir(openai.lib)),
                  "modules": sorted(m for m in sys.modules if m.startswith("openai")),
                  "module_of": {n: getattr(getattr(openai, n), "__module__", None)
                                for n in openai.__all__ if hasattr(openai, n)}}))
"""


def run_child(code: str, tmp_path: Path) -> dict[str, object]:
    result: dict[str, object] = run_json(textwrap.dedent(code), tmp_path)
    return result


def test_what_a_request_needs_loads_without_the_types_of_every_endpoint(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        from nonebot_plugin_marsho.agent import sdk
        sdk.load()
        import openai, openai._client, openai._exceptions
        print(json.dumps({
            "responses": "openai.types.responses" in sys.modules,
            "few": len([m for m in sys.modules if m.startswith("openai")]) < 150,
            "same": [openai.AsyncOpenAI is openai._client.AsyncOpenAI,
                     openai.APIConnectionError is openai._exceptions.APIConnectionError],
            "module": [openai.AsyncOpenAI.__module__, openai.APITimeoutError.__module__],
            "version": openai.__version__ == openai._version.__version__,
        }))
    """, tmp_path)
    assert result == {"responses": False, "few": True, "same": [True, True],
                      "module": ["openai", "openai"], "version": True}


def test_the_plugins_warm_up_loads_the_deferred_sdk(tmp_path: Path) -> None:
    """Nothing of the SDK is in sys.modules after the plugin's import (not even a placeholder);
    plugin.py's warm-up thread loads the light part of it."""
    env_code = """
        import json, os, sys
        for key, value in {"LOCALSTORE_DATA_DIR": "data", "LOCALSTORE_CACHE_DIR": "cache",
                           "LOCALSTORE_CONFIG_DIR": "config", "MARSHO_BASE_URL": "http://127.0.0.1:9/v1",
                           "MARSHO_API_KEY": "k", "MARSHO_MODEL": "gpt-4o-mini"}.items():
            os.environ[key] = value
        import nonebot
        from nonebot.adapters.onebot.v11 import Adapter
        nonebot.init(driver="~fastapi+~httpx+~websockets")
        nonebot.get_driver().register_adapter(Adapter)
        nonebot.load_plugin("nonebot_plugin_marsho")
        before = [name for name in sys.modules if name.startswith("openai")]
        from nonebot_plugin_marsho import plugin
        plugin._import_sdk()
        print(json.dumps({"before": before, "client": "openai._client" in sys.modules,
                          "responses": "openai.types.responses" in sys.modules}))
    """
    assert run_child(env_code, tmp_path) == {"before": [], "client": True, "responses": False}


def test_any_other_name_loads_the_whole_sdk_as_a_plain_import_makes_it(tmp_path: Path) -> None:
    deferred = run_child(textwrap.dedent("""
        from nonebot_plugin_marsho.agent import sdk
        sdk.load()
        from openai import AzureOpenAI  # not one of sdk.LIGHT: the package's __init__ runs
    """) + SNAPSHOT, tmp_path)
    plain = run_child(SNAPSHOT, tmp_path)
    assert deferred == plain


def test_an_sdk_imported_before_is_left_as_it_is(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        import openai
        from nonebot_plugin_marsho.agent import sdk
        from nonebot_plugin_marsho.store.deferred import is_deferred
        sdk.load()
        print(json.dumps({"same": sys.modules["openai"] is openai, "deferred": is_deferred(openai),
                          "responses": "openai.types.responses" in sys.modules}))
    """, tmp_path)
    assert result == {"same": True, "deferred": False, "responses": True}


def test_the_endpoint_client_posts_streams_and_reads_errors_through_the_deferred_sdk(
        tmp_path: Path) -> None:
    result = run_child("""
        import asyncio, json, sys
        from nonebot_plugin_marsho.agent import sdk
        sdk.load()
        from nonebot_plugin_marsho.agent.model.endpoint import EndpointClient
        from nonebot_plugin_marsho.exceptions import EndpointError
        from tests.fake_openai import FakeOpenAI, error, streamed_text, text

        async def main(fake):
            client = EndpointClient(fake.base_url, timeout=10, default_key="k", secrets=["k"])
            request = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
            fake.push(text("plain answer"), streamed_text("stre", "amed"), error(500, "broken"))
            body = json.loads(await client.post(request, None, 10))
            streamed = await client.stream({**request, "stream": True}, None, 10)
            try:
                await client.post(request, None, 10)
                failed = ""
            except EndpointError as failure:
                failed = failure.code
            await client.client.close()
            return [body["choices"][0]["message"]["content"], streamed.content, failed]

        fake = FakeOpenAI().start()
        try:
            answers = asyncio.run(main(fake))
        finally:
            fake.stop()
        print(json.dumps({"answers": answers, "responses": "openai.types.responses" in sys.modules}))
    """, tmp_path)
    answers = result["answers"]
    assert isinstance(answers, list)
    assert answers[:2] == ["plain answer", "streamed"] and answers[2].startswith("endpoint.")
    assert result["responses"] is False


def test_every_sdk_name_the_package_uses_is_one_served_without_the_sdks_init() -> None:
    """A new `openai.X` in agent/model/endpoint.py or agent/embeddings.py that is not in
    sdk.LIGHT would load the whole SDK with the first request: it goes into LIGHT (and NEEDED)."""
    import re

    from nonebot_plugin_marsho.agent import sdk

    package = REPO_ROOT / "nonebot_plugin_marsho"
    used = set()
    for path in package.rglob("*.py"):
        if path.name == "sdk.py" or "toolkits" in path.parts:
            continue
        code = "\n".join(line.split("#")[0] for line in path.read_text(encoding="utf-8").splitlines())
        used |= set(re.findall(r"(?<![\w.\"'/])openai\.([A-Za-z]\w*)", code))
    assert used, "the scan found no use of the SDK"
    assert used <= set(sdk.NEEDED) <= set(sdk.LIGHT), used


def test_a_submodule_asked_for_as_an_attribute_is_imported_alone(tmp_path: Path) -> None:
    result = run_child("""
        import json, sys
        from nonebot_plugin_marsho.agent import sdk
        from nonebot_plugin_marsho.store.deferred import is_deferred
        sdk.load()
        import openai
        before = "openai.types.chat" in sys.modules
        completion = openai.types.chat.ChatCompletion.__name__
        print(json.dumps({"before": before, "completion": completion,
                          "deferred": [is_deferred(openai), is_deferred(openai.types)],
                          "responses": "openai.types.responses" in sys.modules}))
    """, tmp_path)
    assert result == {"before": False, "completion": "ChatCompletion", "deferred": [True, True],
                      "responses": False}


def test_a_name_another_release_keeps_elsewhere_comes_from_the_real_init(tmp_path: Path) -> None:
    """A light name whose submodule or attribute is not where the map says (a later SDK moved
    it) is not an error: the real `__init__` runs and gives it, as a plain import would."""
    result = run_child("""
        import json, sys
        from nonebot_plugin_marsho.agent import sdk
        sdk.LIGHT["AsyncOpenAI"] = "openai._no_such_module"
        sdk.LIGHT["APIStatusError"] = "openai._client"  # a module that does not define it
        sdk.load()
        import openai
        # sys.modules: the SDK's `__init__` has a module-level `_client` (None) of its own
        client, errors = sys.modules["openai._client"], sys.modules["openai._exceptions"]
        print(json.dumps({
            "client": openai.AsyncOpenAI is client.AsyncOpenAI,
            "error": openai.APIStatusError is errors.APIStatusError,
            "whole": "openai.types.responses" in sys.modules,
        }))
    """, tmp_path)
    assert result == {"client": True, "error": True, "whole": True}
