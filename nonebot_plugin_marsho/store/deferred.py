"""Packages whose `__init__` runs only when a name it defines is asked for (issue 30, the memory at
start): their submodules import as usual without it.

Importing `a.b.c` runs `a.b`'s `__init__` first, and some packages' `__init__` imports far more
than one submodule needs: `sqlalchemy.ext.asyncio`'s imports the ORM (store/asyncio_engine.py),
`openai`'s every type of every endpoint (agent/sdk.py). `defer_init(name)` puts in its place, in
sys.modules and as its parent's attribute, a package module made from the real package's spec
(the same `__path__`, `__spec__`, `__file__` and `__loader__`) whose `__init__` has not run:

- a submodule asked for as an attribute (`from . import exc`, `pkg.sub`) is imported, as the
  import system would, and nothing else;
- a name of `light` (name → the submodule defining it) is taken from that submodule, given to
  `adopt` first (to finish it as the `__init__` would); when that submodule or name is not
  there (another release of the package keeps it elsewhere), as any other name:
- any other name (`from pkg import X`, `pkg.X`, `dir(pkg)`, `import *` through `__all__`, one of
  the `dunders` the `__init__` sets) runs the real `__init__` into the module, once, so whoever
  else uses the package finds it whole; the names already taken stay the same objects.

A package already imported is left as it is. The placeholder goes in under the import system's
lock for that name (a thread importing the package meanwhile finishes first), the completion
under a lock of its own."""

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

_completing = threading.RLock()


def defer_init(name: str, *, light: Mapping[str, str] | None = None, dunders: Collection[str] = ("__all__",),
               adopt: Callable[[str, Any], None] | None = None) -> ModuleType | None:
    """The placeholder of package `name` (None when the package is imported already, or is not a
    package the import system finds); its parent package is imported (its `__init__` run) first."""
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
        _make_lazy(module, dict(light or {}), frozenset(dunders), adopt)
        sys.modules[name] = module
        if parent:
            setattr(sys.modules[parent], child, module)  # as the import system sets a submodule
        return module


def is_deferred(module: ModuleType) -> bool:
    """Whether `module` is a placeholder whose `__init__` has not run yet."""
    return getattr(module.__dict__.get("__getattr__"), "_marsho_deferred", False)


def _complete(module: ModuleType) -> None:
    """Run the real `__init__` into the placeholder, once."""
    with _completing:
        if not is_deferred(module):
            return
        hooks = {key: module.__dict__.pop(key) for key in ("__getattr__", "__dir__")}
        spec = module.__spec__
        assert spec is not None and spec.loader is not None
        try:
            spec.loader.exec_module(module)
        except BaseException:
            module.__dict__.update(hooks)
            raise


def _make_lazy(module: ModuleType, light: dict[str, str], dunders: frozenset[str],
               adopt: Callable[[str, Any], None] | None) -> None:
    name = module.__name__
    submodules: list[frozenset[str]] = []

    def is_submodule(attribute: str) -> bool:
        if not submodules:
            submodules.append(frozenset(found.name for found in pkgutil.iter_modules(module.__path__)))
        return attribute in submodules[0]

    def missing(attribute: str) -> AttributeError:
        return AttributeError(f"module {name!r} has no attribute {attribute!r}")

    def __getattr__(attribute: str) -> Any:
        if attribute in light:
            try:
                value = getattr(importlib.import_module(light[attribute]), attribute)
                if adopt is not None:
                    adopt(attribute, value)
            except (ImportError, AttributeError):
                pass  # not where this release keeps it: the real `__init__` says where it is
            else:
                module.__dict__.setdefault(attribute, value)
                return module.__dict__[attribute]
        if attribute.startswith("__") and attribute.endswith("__") and attribute not in dunders:
            raise missing(attribute)  # a tool's probe (`__wrapped__`...): not a reason to load it
        if is_submodule(attribute):
            submodule = importlib.import_module(f"{name}.{attribute}")
            return module.__dict__.get(attribute, submodule)
        _complete(module)
        try:
            return module.__dict__[attribute]
        except KeyError:
            hook = module.__dict__.get("__getattr__")  # the package's own, if it has one
            if hook is not None:
                return hook(attribute)
            raise missing(attribute) from None

    def __dir__() -> list[str]:
        _complete(module)
        hook = module.__dict__.get("__dir__")
        return list(hook()) if hook is not None else sorted(module.__dict__)

    __getattr__._marsho_deferred = True  # type: ignore[attr-defined]
    module.__dict__["__getattr__"] = __getattr__
    module.__dict__["__dir__"] = __dir__


def _import_lock(name: str) -> AbstractContextManager[object]:
    """The import system's lock for one module name, the one an ordinary import of it takes; a
    private class of CPython's, so none where it is missing."""
    manager = getattr(sys.modules.get("_frozen_importlib"), "_ModuleLockManager", None)
    return manager(name) if manager is not None else nullcontext()
