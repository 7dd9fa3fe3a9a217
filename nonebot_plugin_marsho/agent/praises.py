"""The people Marsho likes: marshoai's praises.json, read again whenever it changes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PraisesError(ValueError):
    """The "people Marsho likes" file is unreadable; the message names the file and the entry."""


@dataclass(frozen=True)
class Liked:
    """One person Marsho likes, and why (an entry of praises.json)."""

    name: str
    advantages: str = ""


def read_praises(path: Path) -> list[Liked]:
    """The people in `path`: marshoai's praises.json, `{"like": [{"name": ..., "advantages":
    ...}]}` (a bare list of entries is read too). Raises PraisesError saying what is wrong where."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise PraisesError(f"{path}: cannot read it ({error.strerror or error})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise PraisesError(f"{path}, line {error.lineno}, column {error.colno}: {error.msg}") from None
    entries = data.get("like") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise PraisesError(f'{path}: expected {{"like": [{{"name": ..., "advantages": ...}}]}}')
    people = []
    for index, entry in enumerate(entries):
        where = f'{path}: "like"[{index}]'
        if not isinstance(entry, dict):
            raise PraisesError(f"{where} is not an object with a name")
        name, advantages = entry.get("name"), entry.get("advantages", "")
        if not isinstance(name, str) or not name.strip():
            raise PraisesError(f'{where} has no "name" (a non-empty string)')
        if not isinstance(advantages, str):
            raise PraisesError(f'{where}: "advantages" must be a string')
        people.append(Liked(name.strip(), advantages.strip()))
    return people


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
