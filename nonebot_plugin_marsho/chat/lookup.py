"""`getattr(event, name, None)` for the names an event may not have, without pydantic's cost.

Marsho reads an event's chat and sender off whichever fields its adapter gives it (`group_id`,
`channel`, `guild`, `author`, `from_`...), so most of those reads ask for a name the event lacks.
On a pydantic model a missing name goes through `BaseModel.__getattr__`, which looks the name up
again on the class, builds an AttributeError and has `getattr` swallow it: about 2 µs a name,
several times per message. `attribute` answers a missing name from the model's own dictionaries
(its fields, its extra fields, its class's attributes), the same value `getattr` would give.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_MODEL_GETATTR = getattr(BaseModel, "__getattr__", None)
_PLAIN: dict[type, bool] = {}
"""Per class: a pydantic model whose missing names go through BaseModel's own __getattr__."""
_ON_CLASS: dict[tuple[type, str], bool] = {}
"""Per class and name: whether the class (or a base) defines it (a property, a method...). Classes
are taken as they were when first asked: an event's class is not changed at run time."""


def attribute(obj: Any, name: str) -> Any:
    """`getattr(obj, name, None)`, the same value, cheaper when `obj` is a pydantic model that
    lacks `name`."""
    kind = type(obj)
    plain = _PLAIN.get(kind)
    if plain is None:
        plain = _PLAIN[kind] = (isinstance(obj, BaseModel) and _MODEL_GETATTR is not None
                                and getattr(kind, "__getattr__", None) is _MODEL_GETATTR)
    if not plain or name.startswith("_") or name in obj.__dict__:
        return getattr(obj, name, None)
    on_class = _ON_CLASS.get((kind, name))
    if on_class is None:
        on_class = _ON_CLASS[(kind, name)] = any(name in klass.__dict__ for klass in kind.__mro__)
    if on_class:
        return getattr(obj, name, None)
    extra = getattr(obj, "__pydantic_extra__", None)  # (unset on a model still being built)
    return extra[name] if extra and name in extra else None
