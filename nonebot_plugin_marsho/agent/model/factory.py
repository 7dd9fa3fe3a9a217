"""The one place a model is composed from its settings: for each endpoint of the chain, its
client, retried over its key pool, billed, shaped for its model's family, streamed when it
should be and offered tools in its tool mode; then the chain over them. The settings are plain
data (chat/models.py maps the Config to them), so the bot, the CLI and tests build models the
same way."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..metering import Metered
from ..prompt_mode import PromptTools, ToolModes
from ..providers import RETRY_AFTER_MAX, RETRY_BUDGET, Endpoint
from ..quirks import Quirked, QuirkFields
from .endpoint import EndpointClient
from .fallback import FallbackChain
from .learned import Learned
from .retry import Retrying
from .stream import Streaming

if TYPE_CHECKING:
    from ..metering import Meter
    from .base import Gate, Model, StreamMode, ToolMode


@dataclass(frozen=True)
class Fallback:
    """One endpoint of MARSHO_FALLBACKS, tried in order when the ones before it fail."""

    base_url: str
    model: str
    api_keys: list[str] = field(default_factory=list)
    tool_mode: ToolMode | None = None


@dataclass
class ModelSettings:
    """Everything a model is built from, NoneBot-free (the names are the Config's, without
    `marsho_`)."""

    base_url: str
    api_key: str
    model: str
    timeout: float
    """Seconds one HTTP request may take once it has its slot in the gate."""
    tool_mode: ToolMode = "native"
    tool_mode_by_model: Mapping[str, ToolMode] | None = None
    max_response_bytes: int = 4_000_000
    max_answer_chars: int = 20_000
    api_keys: list[str] | None = None
    fallbacks: list[Fallback] | None = None
    retries: int = 0
    retry_budget: float = RETRY_BUDGET
    retry_after_max: float = RETRY_AFTER_MAX
    """Seconds of a Retry-After honoured at most (MARSHO_RETRY_AFTER_MAX)."""
    quirks: Mapping[str, QuirkFields] | None = None
    max_answer_tokens: int | None = None
    model_setting: str = "MARSHO_MODEL"
    """Where the primary endpoint's model was set, named when the endpoint does not know it."""
    turn_model_applies: bool = True
    """Whether a turn's own model (the quota's cheaper one) replaces this one (not for a model
    of its own: the summaries', the judge's)."""
    stream: StreamMode = "auto"
    """MARSHO_STREAM: `auto` streams when a text hook listens or the model takes only streams."""
    reasoning_effort: str | None = None
    """MARSHO_REASONING_EFFORT (None: nothing sent), as each model family takes it (quirks)."""


@dataclass
class Composed:
    """A composed model and the parts whose knobs can change while it runs."""

    chain: FallbackChain
    modes: ToolModes
    retrying: list[Retrying]
    """Each endpoint's retries: their gate and how they wait."""
    metered: list[Metered]
    """Each endpoint's bill: the meter it is told."""
    learned: Learned
    """What the models' refusals taught (streams only, a reasoning effort refused)."""


def compose(settings: ModelSettings, *, gate: Gate | None = None, meter: Meter | None = None) -> Composed:
    """The model `settings` describe, its requests in flight bounded by `gate`, billed to `meter`."""
    keys = [key for key in [settings.api_key, *(settings.api_keys or [])] if key]
    endpoints = [Endpoint(0, settings.base_url, keys)]
    for fallback in settings.fallbacks or []:
        endpoints.append(Endpoint(len(endpoints), fallback.base_url, list(fallback.api_keys),
                                  fallback.model, fallback.tool_mode))
    secrets = sorted({key.value for ep in endpoints for key in ep.pool.keys if len(key.value) >= 4},
                     key=len, reverse=True)
    modes = ToolModes(settings.tool_mode, settings.tool_mode_by_model)
    learned = Learned()
    retrying: list[Retrying] = []
    metered: list[Metered] = []
    models: list[Model] = []
    for ep in endpoints:
        client = EndpointClient(ep.base_url, timeout=settings.timeout, default_key=ep.pool.keys[0].value,
                                secrets=secrets, max_response_bytes=settings.max_response_bytes,
                                max_answer_chars=settings.max_answer_chars)
        retrying.append(Retrying(ep, client, timeout=settings.timeout, retries=settings.retries,
                                 retry_budget=settings.retry_budget, gate=gate,
                                 retry_after_max=settings.retry_after_max))
        metered.append(Metered(retrying[-1], ep.host, meter))
        quirked = Quirked(metered[-1], settings.quirks, settings.max_answer_tokens,
                          reasoning_effort=settings.reasoning_effort, learned=learned, base_url=ep.base_url)
        streaming = Streaming(quirked, learned, settings.stream, base_url=ep.base_url)
        models.append(PromptTools(streaming, modes, ep.tool_mode, base_url=ep.base_url))
    chain = FallbackChain(endpoints, models, model=settings.model, timeout=settings.timeout,
                          retry_budget=settings.retry_budget, model_setting=settings.model_setting,
                          turn_model_applies=settings.turn_model_applies, learned=learned)
    return Composed(chain, modes, retrying, metered, learned)
