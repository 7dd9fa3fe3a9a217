"""Packages whose `__init__` runs only when a name it defines is asked for (issue 30, the memory at
start): their submodules import as usual without it.

Importing `a.b.c` runs `a.b`'s `__init__` first, and some packages' `__init__` imports far more
than one submodule needs: `sqlalchemy.ext.asyncio`'s imports the ORM (store/asyncio_engine.py),
`openai`'s every type of every endpoint (agent/sdk.py). `defer_init(name)` puts in its place, in
sys.modules and as its parent's attribute, a package module made from the real package's spec
(the same `__path__`, `__spec__`, `__file__` and `__loader__`) whose `__init__` has not run:

- a submodule asked for as an attribute (`from . import exc`, `pkg.sub`) is imported, as the
  import system would, and nothing else (unless it is one of the names the `__init__` binds to
  something else, `rebinds`: openai's `resources` is a proxy);
- a name of `light` (name → the submodule defining it) is taken from that submodule, given to
  `adopt` first (to finish it as the `__init__` would); when that submodule or name is not
  there (another release of the package keeps it elsewhere), as any other name:
- any other name (`from pkg import X`, `pkg.X`, `dir(pkg)`, `import *` through `__all__`, one of
  the `dunders` the `__init__` sets) runs the real `__init__` into the module, once, so whoever else uses the
  package finds it whole; the names already taken stay the same objects, and what others set on
  the placeholder before stays set.

A package already imported is left as it is. The placeholder goes in, and its `__init__` runs,
under the import system's lock for that name, the module marked as initialising while it runs:
a thread importing the package or asking it for a name meanwhile waits for it, as for any
import."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import threading
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

_NOT_THERE = object()


def defer_init(name: str, *, light: Mapping[str, str] | None = None, dunders: Collection[str] = ("__all__",),
               adopt: Callable[[str, Any], None] | None = None,
               rebinds: Collection[str] = ()) -> ModuleType | None:
    """The placeholder of package `name` (None when the package is imported already, or is not a
    package the import system finds); its parent package is imported (its `__init__` run) first.
    `rebinds`: submodules' names the `__init__` binds to something else, which complete it."""
    if name in sys.modules:
        return None
    parent, _, child = name.rpartition(".")
    if parent:
        importlib.import_module(parent)
    with _import_lock(name):
        if name in sys.modules:
            return None
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return None
        module = importlib.util.module_from_spec(spec)
        _make_lazy(module, dict(light or {}), frozenset(dunders), adopt, frozenset(rebinds))
        sys.modules[name] = module
        if parent:
            setattr(sys.modules[parent], child, module)  # as the import system sets a submodule
        return module


def is_deferred(module: ModuleType) -> bool:
    """Whether `module` is a placeholder whose `__init__` has not run yet."""
    state = getattr(module.__dict__.get("__getattr__"), "_marsho_deferred", None)
    return state is not None and not state.done


class _State:
    """A placeholder's completion: done once its `__init__` has run; `by` the thread running it."""

    def __init__(self) -> None:
        self.done = False
        self.by: int | None = None


def _complete(module: ModuleType, state: _State, hooks: dict[str, Any]) -> None:
    """Run the real `__init__` into the placeholder, once, as the import system runs one: under
    the import lock for its name and marked as initialising (a thread importing it or asking it
    for a name meanwhile waits for it), the placeholder's hooks still there for the names asked
    of it while it runs. What others set on the placeholder before (a toolkit
    setting the SDK's module-level api_key, a test's mock.patch) is put back over what the `__init__` set."""
    spec = module.__spec__
    assert spec is not None and spec.loader is not None
    with _import_lock(module.__name__):
        if state.done or state.by is not None:  # done meanwhile, or asked while it runs (its own thread)
            return
        before = {key: value for key, value in module.__dict__.items()
                  if not (key.startswith("__") and key.endswith("__")) and not isinstance(value, ModuleType)}
        state.by = threading.get_ident()
        spec._initializing = True  # type: ignore[attr-defined]
        try:
            spec.loader.exec_module(module)
        finally:
            spec._initializing = False  # type: ignore[attr-defined]
            state.by = None
        for key, value in before.items():
            module.__dict__[key] = value
        for key, hook in hooks.items():  # the package's own hook, if its `__init__` made one, stays
            if module.__dict__.get(key) is hook:
                del module.__dict__[key]
        state.done = True


def _make_lazy(module: ModuleType, light: dict[str, str], dunders: frozenset[str],
               adopt: Callable[[str, Any], None] | None, rebinds: frozenset[str]) -> None:
    name = module.__name__
    submodules: list[frozenset[str]] = []
    state = _State()
    hooks: dict[str, Any] = {}

    def is_submodule(attribute: str) -> bool:
        if not submodules:
            submodules.append(frozenset(found.name for found in pkgutil.iter_modules(module.__path__)))
        return attribute in submodules[0]

    def missing(attribute: str) -> AttributeError:
        return AttributeError(f"module {name!r} has no attribute {attribute!r}")

    def light_value(attribute: str) -> Any:
        try:
            value = getattr(importlib.import_module(light[attribute]), attribute)
            if adopt is not None:
                adopt(attribute, value)
        except (ImportError, AttributeError):
            return _NOT_THERE  # not where this release keeps it: the real `__init__` says where it is
        module.__dict__.setdefault(attribute, value)
        return module.__dict__[attribute]

    def __getattr__(attribute: str) -> Any:
        if not state.done and state.by is None:
            if attribute in light and (value := light_value(attribute)) is not _NOT_THERE:
                return value
            if attribute.startswith("__") and attribute.endswith("__") and attribute not in dunders:
                raise missing(attribute)  # a tool's probe (`__wrapped__`...): not a reason to load it
            # a submodule alone (the SDK's own `from . import _exceptions`), unless the `__init__`
            # binds its name to something else (openai.resources is a proxy there)
            if attribute not in rebinds and is_submodule(attribute):
                submodule = importlib.import_module(f"{name}.{attribute}")
                return module.__dict__.get(attribute, submodule)
        if state.by != threading.get_ident():
            _complete(module, state, hooks)
        if attribute in module.__dict__:
            return module.__dict__[attribute]
        hook = module.__dict__.get("__getattr__")  # the package's own, if it has one
        if state.done and hook is not None and hook is not __getattr__:
            return hook(attribute)
        if state.by is not None and is_submodule(attribute):  # asked by its own `__init__` as it runs
            return importlib.import_module(f"{name}.{attribute}")
        raise missing(attribute)

    def __dir__() -> list[str]:
        if state.by != threading.get_ident():
            _complete(module, state, hooks)
        hook = module.__dict__.get("__dir__")
        return list(hook()) if hook is not None and hook is not __dir__ else sorted(module.__dict__)

    __getattr__._marsho_deferred = state  # type: ignore[attr-defined]
    hooks.update(__getattr__=__getattr__, __dir__=__dir__)
    module.__dict__.update(hooks)


def _import_lock(name: str) -> AbstractContextManager[object]:
    """The import system's lock for one module name, the one an ordinary import of it takes; a
    private class of CPython's, so none where it is missing."""
    manager = getattr(sys.modules.get("_frozen_importlib"), "_ModuleLockManager", None)
    return manager(name) if manager is not None else nullcontext()
