"""Reading the JSON files that owners and toolkit authors write (tools.json, toolkit.json,
webservices.json, mcp.json, praises.json): comments and a UTF-8 BOM allowed, each format a
pydantic model kept beside the code that uses it, and every mistake one English sentence of the
form `file: entry: 'field' what is wrong`.

`read_file(path, Model)` is the whole job. Readers that keep the good entries of a file whose
other entries are broken read the file with a model whose entries are left raw (`list[Any]`),
then `validate` each entry under its label (`entry_label`): the messages are the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .exceptions import MarshoError

M = TypeVar("M", bound=BaseModel)

_NOTHING: Any = object()


class FileFormatError(MarshoError, ValueError):
    """A file, or one entry of it, cannot be used. `messages` say what is wrong where (entry,
    field), one sentence each, without the file; `str()` puts the file before each."""

    def __init__(self, path: Path, messages: list[str]) -> None:
        self.path = Path(path)
        self.messages = messages
        super().__init__("\n".join(f"{self.path}: {message}" for message in messages))


def strip_json_comments(text: str) -> str:
    """Remove `#`, `//` and `/* */` comments outside strings, keeping every line where it was
    (marshoai's tools.json annotates its example with `#`)."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        char = text[i]
        if in_string:
            out.append(char)
            if char == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if char == '"':
                in_string = False
            i += 1
        elif char == '"':
            in_string = True
            out.append(char)
            i += 1
        elif char == "#" or text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            # keep the newlines so that line numbers in later errors stay right
            out.append("\n" * text.count("\n", i, end))
            i = end
        else:
            out.append(char)
            i += 1
    return "".join(out)


def read_json(path: Path, *, empty: Any = _NOTHING) -> Any:
    """The JSON value in the file (UTF-8, a BOM allowed, comments stripped); `empty` for a file
    holding only blanks and comments, when given. FileFormatError when it cannot be read."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise FileFormatError(path, [f"not UTF-8 text (byte {error.start}): save it as UTF-8"]) from None
    except OSError as error:
        raise FileFormatError(path, [f"cannot be read: {error.strerror or error}"]) from None
    text = strip_json_comments(text)
    if empty is not _NOTHING and not text.strip():
        return empty
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise FileFormatError(
            path, [f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}"]
        ) from None


def validate(
    model: type[M], data: Any, path: Path, *, where: str = "", context: Mapping[str, Any] | None = None
) -> M:
    """`data` read by `model` (strictly: JSON's types, no coercion), or a FileFormatError naming
    each wrong field; `where` labels the entry `data` is (empty: the whole file)."""
    try:
        return model.model_validate(data, context=dict(context) if context is not None else None)
    except ValidationError as error:
        messages = [_message(detail, data, where) for detail in error.errors(include_url=False)]
        raise FileFormatError(path, list(dict.fromkeys(messages))) from None


def read_file(
    path: Path, model: type[M], *, context: Mapping[str, Any] | None = None, empty: Any = _NOTHING
) -> M:
    """The file at `path` read by `model`; FileFormatError saying what is wrong where: the line
    and column of a JSON syntax error, else the entry and field of each wrong value."""
    return validate(model, read_json(path, empty=empty), path, context=context)


def message(where: str, what: str, field: str = "") -> str:
    """One problem as owners read it: `entry: 'field' what is wrong` (entry and field optional)."""
    what = f"{field!r} {what}" if field else what
    return f"{where}: {what}" if where else what


def entry_label(key: str | None, index: int, entry: Any = None) -> str:
    """How a problem names the `index`th entry of the list under `key`: `tools[3] (name)`;
    `entry 4 (name)` for a file that is a bare list; the name when the entry has one."""
    label = f"{key}[{index}]" if key is not None else f"entry {index + 1}"
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"{label} ({name.strip()})" if isinstance(name, str) and name.strip() else label


def json_type(value: Any) -> str:
    """What kind of JSON value `value` is, for messages: "a string", "an object", "null"..."""
    return {
        bool: "a boolean", int: "a number", float: "a number", str: "a string",
        type(None): "null", dict: "an object", list: "a list",
    }.get(type(value), type(value).__name__)


_EXPECTED = {
    "string_type": "a string",
    "bool_type": "true or false",
    "int_type": "a whole number",
    "float_type": "a number",
    "list_type": "a list",
    "dict_type": "a JSON object",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "dataclass_type": "a JSON object",
    "dataclass_exact_type": "a JSON object",
}


def _what(detail: Mapping[str, Any]) -> str:
    """What is wrong, as the predicate of a sentence whose subject is the field."""
    kind, value = detail["type"], detail.get("input")
    if kind == "missing":
        return "is missing"
    if kind in ("value_error", "assertion_error"):
        return str(detail.get("ctx", {}).get("error", detail["msg"]))
    if kind == "literal_error":
        return f"must be one of {detail.get('ctx', {}).get('expected')}, not {value!r}"
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}, not {json_type(value)}"
    text = detail["msg"]
    return "must be " + text[len("Input should be "):] if text.startswith("Input should be ") else text


def _message(detail: Mapping[str, Any], data: Any, where: str) -> str:
    """One pydantic error as `message()` words it. Without `where`, the entry is the part of the
    location up to its last list index (`tools[3]`), the field what follows (`'url'`)."""
    location = list(detail["loc"])
    if not where:
        last = max((i for i, part in enumerate(location) if isinstance(part, int)), default=-1)
        if last >= 0:
            parent: Any = data
            for part in location[:last]:
                parent = parent[part] if isinstance(parent, (Mapping, list)) else None
            entry = parent[location[last]] if isinstance(parent, list) else None
            where = entry_label(_path(location[:last]) or None, location[last], entry)
            location = location[last + 1:]
    return message(where, _what(detail), _path(location))


def _path(location: list[Any]) -> str:
    """('headers', 'X-Key') → headers.X-Key; ('args', 2) → args[2]; a dict key's own error
    ('[key]') is the key's."""
    text = ""
    for part in location:
        if part != "[key]":
            text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text
