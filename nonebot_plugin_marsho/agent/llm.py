"""The model other code holds: `LLMClient`, the composed parts of agent/model/ behind the names
the engine, the chat layer and the tests use (`complete`, `model`, `status()`, `gate`...).

Importing it loads neither the OpenAI SDK nor httpx2: the endpoint client does, when it sends
its first request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .model.base import Completion, Gate, ModelRequest, TextHook, ToolMode, split_reasoning
from .model.factory import Fallback, ModelSettings, compose
from .model.fallback import Route

if TYPE_CHECKING:
    from .metering import Meter
    from .model.learned import Learned, SettingsStore
    from .providers import Endpoint, EndpointStatus

__all__ = ["Completion", "Fallback", "Gate", "LLMClient", "ModelSettings", "Route", "TextHook",
           "ToolMode", "build_model", "split_reasoning"]

DEFAULT_TIMEOUT = 60.0
"""Seconds one request may take when `LLMClient(...)` is given no `timeout`: MARSHO_TIMEOUT's
default (tests/test_library_client.py keeps the two the same)."""


class LLMClient:
    """Talks to one OpenAI-compatible endpoint, and to its fallbacks when it fails; make it inside
    the running loop and reuse it. `LLMClient(base_url=..., model=..., ...)` takes the fields of
    ModelSettings (`timeout` defaults to DEFAULT_TIMEOUT); `build_model(settings)` is the same
    from a ModelSettings."""

    def __init__(self, *, gate: Gate | None = None, meter: Meter | None = None, **settings: Any) -> None:
        settings.setdefault("timeout", DEFAULT_TIMEOUT)
        self._adopt(ModelSettings(**settings), gate=gate, meter=meter)

    @classmethod
    def from_settings(cls, settings: ModelSettings, *, gate: Gate | None = None,
                      meter: Meter | None = None) -> LLMClient:
        """The model `settings` describe, its requests bounded by `gate`, billed to `meter`."""
        client = cls.__new__(cls)
        client._adopt(settings, gate=gate, meter=meter)
        return client

    def _adopt(self, settings: ModelSettings, *, gate: Gate | None, meter: Meter | None) -> None:
        self._parts = compose(settings, gate=gate, meter=meter)
        self._chain = self._parts.chain
        self.base_url = settings.base_url.rstrip("/")
        self.timeout = settings.timeout
        """Seconds one HTTP request may take once it has its slot in the gate."""
        self._gate = gate
        self._meter = meter

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
        *, route: Route | None = None, on_text: TextHook | None = None,
    ) -> Completion:
        """Ask the model, offering `tools` in the model's tool mode; calls come back as
        ToolCalls whatever the mode, and `messages` are always in the native format.

        Each endpoint is retried MARSHO_RETRIES times for failures a retry may fix, then the
        next one of MARSHO_FALLBACKS is asked; all of it within `timeout` + `retry_budget`.
        `route` keeps a turn on the endpoint that answered its first request, and spreads one
        `retry_budget` over all the turn's requests. `on_text`, when given, is told the answer's
        text as it arrives (the request is streamed unless MARSHO_STREAM=false; see
        agent/model/stream.py for what it is told)."""
        return await self._chain.request(ModelRequest(messages, tools, route, on_text=on_text))

    async def request(self, request: ModelRequest) -> Completion:
        """The model interface (agent/model/base.py's Model)."""
        return await self._chain.request(request)

    def status(self) -> list[EndpointStatus]:
        """Each endpoint and key with its state, requests, errors by kind and latency
        (p50, p95 over the last hour), and what was learned of its model, for `marsho.status`."""
        return self._chain.status()

    @property
    def learned(self) -> Learned:
        """What the models' refusals taught: the models that take only streams, the reasoning
        effort a model refused."""
        return self._parts.learned

    async def restore_learned(self, store: SettingsStore) -> None:
        """Read what was learned before a restart from `store`, and keep it there from now on."""
        await self._parts.learned.restore(store)

    async def close(self) -> None:
        """Close the connection pools."""
        await self._chain.close()

    @property
    def endpoints(self) -> list[Endpoint]:
        return self._chain.endpoints

    @property
    def model(self) -> str:
        """The primary endpoint's model (`marsho.model` switches it)."""
        return self._chain.model

    @model.setter
    def model(self, value: str) -> None:
        self._chain.model = value

    @property
    def model_setting(self) -> str:
        """Where the primary endpoint's model was set, named when the endpoint does not know it:
        MARSHO_SUMMARY_MODEL for the summaries' own client, `marsho.model` once it chose one."""
        return self._chain.model_setting

    @model_setting.setter
    def model_setting(self, value: str) -> None:
        self._chain.model_setting = value

    @property
    def tool_mode(self) -> ToolMode:
        """How the current model gets tools: configured per model, else learned, else default."""
        return self._parts.modes.of(self.model)

    @property
    def needs_key(self) -> bool:
        """True when no key is set and the endpoint is one that always wants one."""
        return self.endpoints[0].needs_key

    def settings_of(self, endpoint: Endpoint) -> dict[str, str]:
        """Where the owner set `endpoint`'s model, keys and URL (`model_setting`, `key_setting`,
        `url_setting`), as its errors' hints name them."""
        return self._chain.settings_of(endpoint)

    @property
    def gate(self) -> Gate | None:
        """Requests in flight across all chats: every endpoint's requests take a slot of it."""
        return self._gate

    @gate.setter
    def gate(self, value: Gate | None) -> None:
        self._gate = value
        for part in self._parts.retrying:
            part.gate = value

    @property
    def sleep(self) -> Callable[[float], Awaitable[None]]:
        """How a retry waits (tests record the waits instead of taking them)."""
        return self._parts.retrying[0].sleep

    @sleep.setter
    def sleep(self, value: Callable[[float], Awaitable[None]]) -> None:
        for part in self._parts.retrying:
            part.sleep = value

    @property
    def meter(self) -> Meter | None:
        """Told each answered request's usage (the owner's bill), when set."""
        return self._meter

    @meter.setter
    def meter(self, value: Meter | None) -> None:
        self._meter = value
        for part in self._parts.metered:
            part.meter = value


def build_model(settings: ModelSettings, *, gate: Gate | None = None,
                meter: Meter | None = None) -> LLMClient:
    """The factory: the model `settings` describe, composed of its parts (agent/model/factory.py)."""
    return LLMClient.from_settings(settings, gate=gate, meter=meter)
