"""SQLAlchemy's asyncio engine without its ORM: AsyncEngine, AsyncConnection and
create_async_engine from `sqlalchemy.ext.asyncio.engine`, the package's `__init__` not run.

Why: that `__init__` also imports the ORM session (`.session`, `.scoping` import
`sqlalchemy.orm`), 6-7 MB resident (issue 30), and the store uses SQLAlchemy Core only. So when
`sqlalchemy.ext.asyncio` is not imported yet, store/deferred.py puts a placeholder of it in its
place; its submodules import as usual, and the first other name asked of it (another plugin's
`from sqlalchemy.ext.asyncio import AsyncSession`, `m.async_sessionmaker`, `dir(m)`, `import *`)
runs the real `__init__` into it. A `sqlalchemy.ext.asyncio` already imported is used as it is."""

from __future__ import annotations

from .deferred import defer_init

defer_init("sqlalchemy.ext.asyncio")

from sqlalchemy.ext.asyncio.engine import (  # noqa: E402  (after the placeholder, on purpose)
    AsyncConnection as AsyncConnection,
)
from sqlalchemy.ext.asyncio.engine import AsyncEngine as AsyncEngine  # noqa: E402
from sqlalchemy.ext.asyncio.engine import create_async_engine as create_async_engine  # noqa: E402

# SQLAlchemy 2.1's `__init__` initialises greenlet at import (and fails there without it); so do
# we. 2.0 has no such step (its engine checks greenlet when used)
from sqlalchemy.util import concurrency as _concurrency  # noqa: E402

_shim = getattr(_concurrency, "_concurrency_shim", None)
if _shim is not None:
    _shim._initialize()

__all__ = ["AsyncConnection", "AsyncEngine", "create_async_engine"]
