"""SQLAlchemy's asyncio engine without its ORM: AsyncEngine, AsyncConnection and
create_async_engine from `sqlalchemy.ext.asyncio.engine`, the package's `__init__` not run.

Why: that `__init__` also imports the ORM session (`.session`, `.scoping` import
`sqlalchemy.orm`), 6-8 MB resident and a tenth of the plugin's import, and the store uses
SQLAlchemy Core only. Importing a submodule runs its package's `__init__` first, so when
`sqlalchemy.ext.asyncio` is not imported yet, this module puts in its place (in sys.modules and
as `sqlalchemy.ext.asyncio`) a package module made from the real package's spec, with the same
`__path__`, `__spec__`, `__file__` and `__loader__`, whose `__init__` has not run. Its submodules
import as usual; the first name looked up on it that it does not have yet (another plugin's
`from sqlalchemy.ext.asyncio import AsyncSession`, `m.async_sessionmaker`, `dir(m)`, `import *`)
runs the real `__init__` into it, once, and the name is there. A `sqlalchemy.ext.asyncio`
already imported is used as it is.

Thread-safe: the placeholder goes in under the import system's lock for that name, and the
completion runs once under a lock of its own (the `__init__`'s imports take the import system's
locks as any import does)."""

from __future__ import annotations

import importlib.util
import sys
import threading
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

PACKAGE = "sqlalchemy.ext.asyncio"

_completing = threading.RLock()


def _complete(module: ModuleType) -> None:
    """Run the real `__init__` into the placeholder, once (the attributes it sets stay)."""
    with _completing:
        if "__getattr__" not in module.__dict__:
            return
        del module.__dict__["__getattr__"]
        del module.__dict__["__dir__"]
        spec = module.__spec__
        assert spec is not None and spec.loader is not None
        try:
            spec.loader.exec_module(module)
        except BaseException:
            _make_lazy(module)
            raise


def _make_lazy(module: ModuleType) -> None:
    submodules: list[set[str]] = []

    def is_submodule(name: str) -> bool:
        """`from . import exc` asks the package for `exc` before importing it: not a reason to
        run the `__init__` (which imports `.engine`, the submodule importing `exc`)."""
        if not submodules:
            import pkgutil

            submodules.append({found.name for found in pkgutil.iter_modules(module.__path__)})
        return name in submodules[0]

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name != "__all__" or is_submodule(name):
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")
        _complete(module)
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}") from None

    def __dir__() -> list[str]:
        _complete(module)
        return sorted(module.__dict__)

    module.__dict__["__getattr__"] = __getattr__
    module.__dict__["__dir__"] = __dir__


def _install_placeholder() -> None:
    """`sqlalchemy.ext.asyncio` in sys.modules without its `__init__` run, unless it is there."""
    if PACKAGE in sys.modules:
        return
    import sqlalchemy.ext

    with _import_lock(PACKAGE):
        if PACKAGE in sys.modules:
            return
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return  # not a package we know: let the ordinary import decide
        module = importlib.util.module_from_spec(spec)
        _make_lazy(module)
        sys.modules[PACKAGE] = module
        sqlalchemy.ext.asyncio = module  # as the import system sets a submodule


def _import_lock(name: str) -> AbstractContextManager[object]:
    """The import system's lock for one module name, the one an ordinary import of it takes (so
    a thread importing `sqlalchemy.ext.asyncio` meanwhile finishes first, or waits); a private
    class of CPython's, so none where it is missing."""
    manager = getattr(sys.modules.get("_frozen_importlib"), "_ModuleLockManager", None)
    return manager(name) if manager is not None else nullcontext()


_install_placeholder()

from sqlalchemy.ext.asyncio.engine import (  # noqa: E402  (after the placeholder, on purpose)
    AsyncConnection as AsyncConnection,
)
from sqlalchemy.ext.asyncio.engine import AsyncEngine as AsyncEngine  # noqa: E402
from sqlalchemy.ext.asyncio.engine import create_async_engine as create_async_engine  # noqa: E402

# the package's `__init__` initialises greenlet at import (and fails there without it); so do we
from sqlalchemy.util import concurrency as _concurrency  # noqa: E402

_concurrency._concurrency_shim._initialize()

__all__ = ["AsyncConnection", "AsyncEngine", "create_async_engine"]
