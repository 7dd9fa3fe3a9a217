"""Attack on the deferred OpenAI SDK (agent/sdk.py, store/deferred.py, issue 30): what another
plugin or an owner's toolkit does with `openai` after the warm-up's `sdk.load()` must behave as
after a plain `import openai`. Each check runs the same code in two fresh interpreters, one with
the SDK deferred as the plugin's warm-up leaves it, one with a plain import, and compares."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.fresh_python import run_json

PRELUDE = """
import json, sys
if sys.argv[1] == "deferred":
    from nonebot_plugin_marsho.agent import sdk
    sdk.load()
"""


def both(code: str, tmp_path: Path) -> tuple[object, object]:
    """What `code` prints last (JSON), after the plugin's warm-up and after a plain import."""
    deferred, plain = (run_json(PRELUDE + textwrap.dedent(code), tmp_path, mode) for mode in ("deferred", "plain"))
    return deferred, plain


def test_module_client_settings_set_before_the_sdk_completes_are_kept(tmp_path: Path) -> None:
    """The SDK's documented module-level client: `openai.api_key = ...` then `openai.chat...`.
    On the placeholder the assignment lands in the module, and the `__init__` that the next
    name runs sets `api_key = None` (and base_url, timeout...) over it."""
    deferred, plain = both("""
        import openai
        openai.api_key = "sk-toolkit-key"
        openai.base_url = "http://127.0.0.1:9/v1/"
        openai.max_retries = 7
        openai.chat  # the module client's resource: any name the light part does not serve
        print(json.dumps([openai.api_key, str(openai.base_url), openai.max_retries]))
    """, tmp_path)
    assert plain == ["sk-toolkit-key", "http://127.0.0.1:9/v1/", 7]
    assert deferred == plain


def test_a_patched_sdk_name_stays_patched_when_the_sdk_completes(tmp_path: Path) -> None:
    """`unittest.mock.patch("openai.AsyncOpenAI", ...)` (another plugin's tests, a toolkit's
    shim) then any other name of the SDK: the completing `__init__` rebinds the name to the
    real class while the patch is on."""
    deferred, plain = both("""
        from unittest import mock
        import openai
        class Fake: pass
        with mock.patch("openai.AsyncOpenAI", Fake):
            openai.AzureOpenAI
            patched = openai.AsyncOpenAI is Fake
        print(json.dumps(patched))
    """, tmp_path)
    assert plain is True
    assert deferred == plain


def test_a_thread_asking_the_sdk_while_another_completes_it_waits_for_it(tmp_path: Path) -> None:
    """One thread runs the SDK's `__init__` (its `from openai import AzureOpenAI`), another asks
    `openai.VERSION` meanwhile. A plain import makes the second wait on the import lock and get
    it; the placeholder's completion takes no import lock and has already dropped its hook, so
    the second thread finds a half-run module and gets AttributeError."""
    deferred, plain = both("""
        import importlib.abc, threading
        inside, go_on = threading.Event(), threading.Event()

        class Pause(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "openai.lib.azure" and threading.current_thread().name == "completer":
                    inside.set()
                    go_on.wait(60)
                return None

        sys.meta_path.insert(0, Pause())
        results = {}

        def complete():
            import openai
            results["azure"] = openai.AzureOpenAI.__name__

        def ask():
            import openai
            try:
                results["version"] = openai.VERSION == openai.__version__
            except AttributeError as error:
                results["version"] = repr(error)

        completer = threading.Thread(target=complete, name="completer")
        completer.start()
        inside.wait(60)
        asker = threading.Thread(target=ask)
        asker.start()
        asker.join(10)  # a waiting asker waits for the completer: let the completer go on
        go_on.set()
        completer.join(60)
        asker.join(60)
        print(json.dumps(results, sort_keys=True))
    """, tmp_path)
    assert plain == {"azure": "AzureOpenAI", "version": True}
    assert deferred == plain


def test_an_sdk_error_class_names_the_package_before_anyone_asks_for_it_by_name(tmp_path: Path) -> None:
    """A plain import makes every exported class's `__module__` "openai" at once; the deferred
    SDK only those asked of it by name, so a base class met through another (RateLimitError's
    APIError, as a traceback or `repr(cls)` shows it) reads `openai._exceptions.APIError`."""
    deferred, plain = both("""
        import openai
        print(json.dumps([repr(c) for c in openai.RateLimitError.__mro__[:4]]))
    """, tmp_path)
    assert plain == ["<class 'openai.RateLimitError'>", "<class 'openai.APIStatusError'>",
                     "<class 'openai.APIError'>", "<class 'openai.OpenAIError'>"]
    assert deferred == plain


def test_openai_resources_is_the_sdks_lazy_proxy_as_after_a_plain_import(tmp_path: Path) -> None:
    """The `__init__` binds `openai.resources` to a proxy that loads the resources when used;
    the placeholder takes the name for its submodule and imports all of it there and then (and
    the name changes to the proxy once the SDK completes)."""
    deferred, plain = both("""
        import openai
        first = type(openai.resources).__name__
        openai.AzureOpenAI
        print(json.dumps([first, type(openai.resources).__name__]))
    """, tmp_path)
    assert plain == ["ResourcesProxy", "ResourcesProxy"]
    assert deferred == plain
