"""The fallback chain: the primary endpoint's model, then MARSHO_FALLBACKS' in order, each with a
circuit breaker that skips it after failures in a row; one deadline for the whole chain, and a
Route that keeps a turn's tool rounds on the endpoint that answered (pydantic-ai's
models/fallback.py is the shape: a list of models and which failures move on)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...exceptions import EndpointError
from ...redaction import logger
from ..metering import turn_model
from ..providers import Deadline, Endpoint, EndpointStatus, falls_back, named

if TYPE_CHECKING:
    from .base import Completion, Model, ModelRequest
    from .learned import Learned


@dataclass
class Route:
    """One turn's way through the endpoints: its tool rounds stay on the endpoint that answered
    unless it fails mid-turn, and its requests share one retry budget."""

    endpoint: int | None = None
    spent: float = 0.0
    """Seconds of the retry budget the turn's requests used (failed attempts and waits)."""
    reasoning: dict[str, int] = field(default_factory=dict)
    """The reasoning of the turn's tool-call answers, by the endpoint that gave it: it goes back
    to that endpoint only, never to another provider the turn moved to."""
    extras: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    """By call id: the endpoint that made the call and what it attached to it (Gemini's
    `extra_content` with its thought signature); sent back, exactly, to that endpoint only."""

    def keep_extras(self, completion: Completion) -> None:
        """Remember what the endpoint that answered (`endpoint`) attached to the calls of
        `completion` (their ids as the turn's messages carry them)."""
        if self.endpoint is None:
            return
        for call, extra in zip(completion.tool_calls, completion.extras, strict=False):
            if extra:
                self.extras[call.id] = (self.endpoint, extra)

    def with_extras(self, messages: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
        """`messages` with what endpoint `index` attached to its own calls put back on them;
        the messages themselves (stored history) stay plain."""
        if not self.extras:
            return messages
        out: list[dict[str, Any]] = []
        for message in messages:
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") in self.extras
                                               for c in calls):
                message = {**message, "tool_calls": [self._extended(call, index) for call in calls]}
            out.append(message)
        return out

    def _extended(self, call: Any, index: int) -> Any:
        kept = self.extras.get(str(call.get("id"))) if isinstance(call, dict) else None
        if kept is None or kept[0] != index:
            return call
        return {**call, **kept[1]}

    def foreign_reasoning(self, messages: list[dict[str, Any]], index: int) -> frozenset[str]:
        """The `reasoning_content` of `messages` that endpoint `index` did not give itself."""
        return frozenset(
            reasoning for message in messages
            if isinstance(reasoning := message.get("reasoning_content"), str)
            and self.reasoning.get(reasoning) != index)


class FallbackChain:
    """Asks each endpoint's model in turn until one answers, within `timeout` + `retry_budget`."""

    def __init__(self, endpoints: list[Endpoint], models: list[Model], *, model: str, timeout: float,
                 retry_budget: float, model_setting: str = "MARSHO_MODEL",
                 turn_model_applies: bool = True, learned: Learned | None = None) -> None:
        self.endpoints = endpoints
        self.models = models
        """The model of each endpoint, in the same order."""
        self.model = model
        """The primary endpoint's model (`marsho.model` switches it)."""
        self.timeout = timeout
        self.retry_budget = retry_budget
        """Seconds retries, waits and fallbacks may take beyond `timeout`: per request, and per
        turn when the turn's requests share a Route."""
        self.model_setting = model_setting
        """Where the primary endpoint's model was set, named when the endpoint does not know it:
        MARSHO_SUMMARY_MODEL for the summaries' own model, `marsho.model` once it chose one."""
        self.turn_model_applies = turn_model_applies
        """Whether a turn's own model (the quota's cheaper one) replaces this chain's: not for a
        model of its own (the summaries', the judge's)."""
        self.learned = learned
        """What was learned of the models from their refusals (shown by `status`)."""

    def _turn_model(self) -> str:
        return turn_model() if self.turn_model_applies else ""

    def model_of(self, ep: Endpoint) -> str:
        """The model `ep` is asked with: the turn's (the quota's cheaper model) while one is set
        and applies here, else its own, else the primary's."""
        return self._turn_model() or ep.model or self.model

    async def request(self, request: ModelRequest) -> Completion:
        """Ask the endpoints in order until one answers; a failure another endpoint may not do
        better with (see `falls_back`) is the answer at once, else the first failure is.

        While endpoints are left to try, the retries of one leave min(`timeout`, the budget) of
        the deadline to the ones after it; reasoning goes back only to the endpoint that gave it."""
        route = request.route
        budget = max(0.0, self.retry_budget - (route.spent if route is not None else 0.0))
        deadline = Deadline(self.timeout + budget)
        reserve = min(self.timeout, budget)
        first_error: EndpointError | None = None
        order = self._order(route)
        skipping = any(not ep.breaker.is_open for ep in order)  # else every one is tried
        for position, ep in enumerate(order):
            if first_error is not None and deadline.left() <= 0:
                break
            trial = skipping and ep.breaker.is_open
            if trial and not ep.breaker.take_trial():
                continue  # another question is trying it, or it was tried a moment ago
            more = position < len(order) - 1
            foreign = frozenset() if route is None else route.foreign_reasoning(request.messages, ep.index)
            messages = request.messages if route is None else route.with_extras(request.messages, ep.index)
            sent = request.but(messages=messages, model=self.model_of(ep), deadline=deadline,
                              more=more, keep=reserve if more else 0.0, foreign=foreign,
                              settings=self.settings_of(ep))
            tried = ep.breaker.now()
            try:
                completion = await self._ask(ep, sent)
            except EndpointError as error:
                if not falls_back(error):
                    raise
                self._failed(ep, error, tried)
                first_error = first_error or error
                continue
            finally:
                if trial:
                    ep.breaker.tried()
            self._answered(ep, sent, completion, deadline)
            return completion
        assert first_error is not None
        raise first_error

    async def _ask(self, ep: Endpoint, request: ModelRequest) -> Completion:
        try:
            return await self.models[ep.index].request(request)
        except EndpointError as error:
            named(error, request.settings)  # raised by any part, not only the retries
            raise

    def _failed(self, ep: Endpoint, error: EndpointError, tried: float) -> None:
        ep.breaker.last = error
        if ep.breaker.failed(tried) and len(self.endpoints) > 1:
            logger.warning(f"marsho: endpoint {ep.name} ({ep.base_url}) failed "
                           f"{ep.breaker.failures} requests in a row; skipped for "
                           f"{ep.breaker.cooldown:g} s")
        if len(self.endpoints) > 1:
            logger.warning(f"marsho: endpoint {ep.name} ({ep.base_url}) failed: {error}")

    def _answered(self, ep: Endpoint, request: ModelRequest, completion: Completion,
                  deadline: Deadline) -> None:
        ep.breaker.succeeded()
        route = request.route
        if route is not None:
            route.endpoint = ep.index
            route.spent += deadline.spent
            if completion.tool_calls and completion.reasoning:
                route.reasoning[completion.reasoning] = ep.index
        if ep.index:
            logger.info(f"marsho: answered by {ep.name} ({ep.base_url}, {self.model_of(ep)})")

    def _order(self, route: Route | None) -> list[Endpoint]:
        """The endpoints to try: the turn's own first, then the chain in order, without those
        whose breaker is open but for those due a trial, last (one request at a time tries them,
        see `request`); unless every one's is open: then all, in order. While the turn has a
        model of its own (the quota's cheaper model), a fallback with another model is not
        tried: its model is another provider's, full price or not knowing the cheaper one."""
        cheaper = self._turn_model()
        chain = [ep for ep in self.endpoints if not cheaper or ep.model is None or ep.model == cheaper]
        if route is not None and route.endpoint is not None:
            chain = sorted(chain, key=lambda ep: ep.index != route.endpoint)  # stable: the rest in order
        closed = [ep for ep in chain if not ep.breaker.is_open]
        if not closed:
            return chain
        return closed + [ep for ep in chain if ep.breaker.is_open and ep.breaker.trial_due()]

    def settings_of(self, ep: Endpoint) -> dict[str, str]:
        """Where the owner set `ep`'s model, keys and URL, for the hints of its errors: a
        fallback's or the summary model's mistake is not looked for in MARSHO_MODEL."""
        model = "MARSHO_QUOTA_FALLBACK_MODEL" if self._turn_model() else self.model_setting
        if ep.index:
            # written without words of either language: the hints around them are in MARSHO_LANG
            entry = f"MARSHO_FALLBACKS #{ep.index}"  # #1: the first entry
            if ep.model and not self._turn_model():
                model = f"{entry} model"
            return {"model_setting": model, "key_setting": f"{entry} api_key / api_keys",
                    "url_setting": f"{entry} base_url"}
        return {"model_setting": model, "key_setting": "MARSHO_API_KEY / MARSHO_API_KEYS",
                "url_setting": "MARSHO_BASE_URL"}

    def status(self) -> list[EndpointStatus]:
        """Each endpoint and key with its state, requests, errors by kind and latency
        (p50, p95 over the last hour), for `marsho.status`."""
        alone = len(self.endpoints) == 1  # alone, it is never skipped
        shown = [ep.status(self.model_of(ep), skipped=ep.breaker.is_open and not alone)
                 for ep in self.endpoints]
        if self.learned is None:
            return shown
        learned = self.learned
        return [dataclasses.replace(status, learned=tuple(learned.facts(status.model)))
                if learned.facts(status.model) else status for status in shown]

    async def close(self) -> None:
        """Close every endpoint's connection pool."""
        for model in self.models:
            await model.close()
