"""The people Marsho likes: marshoai's praises.json, read again whenever it changes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictStr, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass

from ..fileformat import FileFormatError, read_file

PraisesError = FileFormatError
"""The "people Marsho likes" file is unreadable; the message names the file and the entry."""


@dataclass(frozen=True)
class Liked:
    """One person Marsho likes, and why (an entry of praises.json); both trimmed."""

    name: StrictStr
    advantages: StrictStr = ""

    @field_validator("name", "advantages")
    @classmethod
    def _trimmed(cls, text: str, info: ValidationInfo) -> str:
        if info.field_name == "name" and not text.strip():
            raise ValueError("must not be empty")
        return text.strip()


class Praises(BaseModel):
    """marshoai's praises.json: `{"like": [{"name": ..., "advantages": ...}]}`, or the bare list."""

    model_config = ConfigDict(strict=True)  # other keys are ignored

    like: list[Liked]

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        if isinstance(data, list):
            return {"like": data}
        if not isinstance(data, dict) or "like" not in data:
            raise ValueError('expected {"like": [{"name": ..., "advantages": ...}]}')
        return data


def read_praises(path: Path) -> list[Liked]:
    """The people in `path` (comments allowed). Raises PraisesError saying what is wrong where."""
    return read_file(path, Praises).like


class PraisesFile:
    """The "people Marsho likes" file, read again whenever it changes (no restart needed); a
    broken edit is logged once and the last good list kept."""

    RACY_NS = 2_000_000_000
    """A file changed this recently may change again within its timestamp's resolution (one
    kernel tick, 2 s on FAT) keeping size and mtime: it is read again until it is older."""

    def __init__(self, path: Path, log: Callable[[str], None]) -> None:
        self.path = path
        self.log = log
        self._stamp: tuple[int, int] | None = None
        self._racy = False
        self._problem: str | None = None
        self._people: list[Liked] = []

    def people(self) -> list[Liked]:
        try:
            stat = self.path.stat()
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp and not self._racy:
            return self._people
        changed, self._stamp = stamp != self._stamp, stamp
        if stamp is None:
            self._racy, self._problem, self._people = False, None, []
            return self._people
        self._racy = abs(time.time_ns() - stamp[0]) < self.RACY_NS
        try:
            self._people = read_praises(self.path)
            self._problem = None
        except PraisesError as error:
            if changed or str(error) != self._problem:  # once per broken edit, not per turn
                self.log(f"{error} (keeping the {len(self._people)} people read before)")
            self._problem = str(error)
        return self._people
