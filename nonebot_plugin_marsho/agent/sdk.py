"""The OpenAI SDK without the types of every endpoint it knows (issue 30, the memory after start).

`import openai` runs a package `__init__` that imports `openai.types` (every type of every
endpoint: the Responses API's alone are 247 modules) and `openai.lib` (whose `__init__` imports
them again): about 520 modules and 21 MB resident, where the requests Marsho sends (a raw POST
to /chat/completions, its answer read as bytes, agent/model/endpoint.py) need the client, its
transport and its exceptions: about 65 modules, 10 MB less.

`load()` (plugin.py's warm-up thread, a second after the start) first makes `openai`,
`openai.lib` and `openai.types` packages whose `__init__` has not run (store/deferred.py), which
serve the client's names (`LIGHT`) from the submodules defining them, finished as the
`__init__` finishes them (their `__module__` is "openai", the SDK's logging set up), and then
imports those a request needs. Any other name asked of the package (another plugin's `from
openai import AzureOpenAI`, `openai.types.Batch`...) runs its `__init__`, and the whole SDK is
there as before. An SDK imported before (a question in the first second) stays as it is; before
the warm-up nothing of the SDK is in sys.modules, not even the placeholders (tests/test_start.py)."""

from __future__ import annotations

from typing import Any

from ..store.deferred import defer_init

LIGHT: dict[str, str] = {
    **{name: "openai._client" for name in (
        "Client", "OpenAI", "Stream", "Timeout", "Transport", "AsyncClient", "AsyncOpenAI", "AsyncStream",
        "RequestOptions")},
    **{name: "openai._exceptions" for name in (
        "APIError", "OpenAIError", "ConflictError", "NotFoundError", "APIStatusError", "RateLimitError",
        "APITimeoutError", "BadRequestError", "APIConnectionError", "AuthenticationError",
        "InternalServerError", "PermissionDeniedError", "UnprocessableEntityError",
        "APIResponseValidationError")},
    **{name: "openai._base_client" for name in ("DefaultHttpxClient", "DefaultAioHttpClient",
                                                "DefaultAsyncHttpxClient")},
    "__version__": "openai._version",
    "__title__": "openai._version",
}
"""Names of `openai` (all in its `__all__`) served without its `__init__`, and where they live."""

NEEDED = ("AsyncOpenAI", "AsyncStream", "DefaultAioHttpClient", "OpenAIError", "APIStatusError",
          "APIConnectionError", "APITimeoutError")
"""What agent/model/endpoint.py and agent/embeddings.py use: what `load()` imports."""

_logging_set_up: list[bool] = []


def _adopt(name: str, value: Any) -> None:
    """Finish a name as the SDK's `__init__` does: logging set up once (OPENAI_LOG), and the
    exported name's `__module__` made "openai" (so errors read `openai.APIConnectionError`)."""
    if not _logging_set_up:
        from openai._utils._logs import setup_logging

        setup_logging()
        _logging_set_up.append(True)
    if not name.startswith("__"):
        try:
            value.__module__ = "openai"
        except (TypeError, AttributeError):  # not every export takes one
            pass


def defer() -> None:
    """`openai` and the two packages its client needs without their `__init__` (unless the SDK
    is imported already: then it stays as it is)."""
    # `resources`: the `__init__` binds it to a proxy that imports the resources when used
    if defer_init("openai", light=LIGHT, adopt=_adopt, rebinds=("resources",)) is None:
        return
    defer_init("openai.lib")
    defer_init("openai.types")


def load() -> None:
    """The SDK deferred (unless it is imported already), and what a request needs imported."""
    defer()
    import openai

    # every light name, not just NEEDED: each made the package's as the `__init__` makes it
    # (RateLimitError's base APIError reads `openai.APIError` in a traceback): a few classes more
    # of the modules NEEDED imports anyway
    for name in LIGHT:
        getattr(openai, name)
