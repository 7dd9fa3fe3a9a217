"""What the bot learned of models from their refusals, kept across restarts: the models that take
only streamed requests (DashScope's "This model only support stream mode"), and the reasoning
effort a model refused (it is no longer sent to it). Each is logged once, when learned, and
shown in `marsho.status`; the store is the history's settings table (one JSON value)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from ...redaction import logger

LEARNED_SETTING = "learned_models"
"""The settings row the facts are kept in."""

MAX_LEARNED = 256
"""Models remembered per fact at most (a model name chosen again and again cannot fill the row)."""


class SettingsStore(Protocol):
    """Where the facts are kept (store/session.History's settings)."""

    async def get_setting(self, name: str) -> str | None: ...

    async def set_setting(self, name: str, value: str) -> None: ...


class Learned:
    """Per model: whether it takes only streams, and the reasoning effort it refused."""

    def __init__(self) -> None:
        self.stream_only: set[str] = set()
        self.effort_refused: dict[str, str] = {}
        """Model → the MARSHO_REASONING_EFFORT value it refused (another value is tried again)."""
        self.store: SettingsStore | None = None
        self._saving: set[asyncio.Task[None]] = set()

    async def restore(self, store: SettingsStore) -> None:
        """Read what was learned before a restart, and keep what is learned from now on in `store`."""
        self.store = store
        try:
            text = await store.get_setting(LEARNED_SETTING)
            data: Any = json.loads(text) if text else {}
        except Exception as error:  # a store that fails, a row written by hand: start afresh
            logger.warning(f"marsho: what was learned of the models could not be read: {error}")
            return
        if not isinstance(data, dict):
            return
        models = data.get("stream_only")
        self.stream_only |= {m for m in models if isinstance(m, str)} if isinstance(models, list) else set()
        refused = data.get("effort_refused")
        if isinstance(refused, dict):
            self.effort_refused.update({m: v for m, v in refused.items()
                                        if isinstance(m, str) and isinstance(v, str)})

    def learn_stream_only(self, model: str, base_url: str, why: object) -> None:
        """`model` refused a request that was not streamed: it is streamed from now on."""
        if model in self.stream_only or len(self.stream_only) >= MAX_LEARNED:
            return
        self.stream_only.add(model)
        logger.warning(f"marsho: {base_url} takes only streamed requests for model {model} ({why}); "
                       "they are streamed from now on (set MARSHO_STREAM=true to choose yourself)")
        self._save()

    def learn_effort_refused(self, model: str, value: str, base_url: str, why: object) -> None:
        """`model` refused MARSHO_REASONING_EFFORT=`value`: it is not sent to it from now on."""
        if self.effort_refused.get(model) == value or len(self.effort_refused) >= MAX_LEARNED:
            return
        self.effort_refused[model] = value
        logger.warning(f"marsho: {base_url} refused MARSHO_REASONING_EFFORT={value} for model {model} "
                       f"({why}); it is no longer sent to that model (see marsho.status)")
        self._save()

    def effort_for(self, model: str, value: str | None) -> str | None:
        """The effort to send `model`: `value`, unless the model refused it."""
        return None if value is None or self.effort_refused.get(model) == value else value

    def facts(self, model: str) -> list[tuple[str, str]]:
        """What was learned of `model`, for `marsho.status`: ("stream_only", "") and
        ("effort_refused", value)."""
        found = [("stream_only", "")] if model in self.stream_only else []
        if model in self.effort_refused:
            found.append(("effort_refused", self.effort_refused[model]))
        return found

    def dump(self) -> str:
        return json.dumps({"stream_only": sorted(self.stream_only), "effort_refused": self.effort_refused},
                          ensure_ascii=False)

    def _save(self) -> None:
        if self.store is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._write(self.store, self.dump()))
        except RuntimeError:  # no loop (a test's synchronous use): nothing to keep it in
            return
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    async def _write(self, store: SettingsStore, value: str) -> None:
        try:
            await store.set_setting(LEARNED_SETTING, value)
        except Exception as error:  # kept in memory still; the next fact learned writes it again
            logger.warning(f"marsho: what was learned of the models could not be saved: {error}")

    async def settled(self) -> None:
        """Wait for the writes under way (tests, shutdown)."""
        while self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)
