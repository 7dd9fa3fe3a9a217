"""A throw-away PostgreSQL server for tests and benchmarks: Debian's `postgresql` binaries,
a data folder in /tmp, a free port on 127.0.0.1, trust authentication, stopped on exit.

`.ci/run` installs the package when it is missing; elsewhere `start()` raises Unavailable
saying how to get it, and the tests that need it are skipped with that reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class Unavailable(RuntimeError):
    """PostgreSQL cannot be started here; the message says why and what to install."""


def _binaries() -> Path:
    override = os.environ.get("MARSHO_TEST_PG_BIN")
    candidates = [override] if override else sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists():
            return Path(folder)
    raise Unavailable("PostgreSQL is not installed (apt-get install postgresql)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PostgresServer:
    """Start with `start()` (or `with`), read `url`, stop with `stop()`."""

    def __init__(self) -> None:
        self.bin = _binaries()
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="marsho-pg-"))
        self.data = self.folder / "data"
        self._as_postgres: list[str] = []

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._as_postgres, *args], capture_output=True, text=True,
                              timeout=timeout, check=False)

    def start(self) -> PostgresServer:
        # the server refuses to run as root: run it as the postgres user when we are root
        if os.geteuid() == 0:
            try:
                shutil.chown(self.folder, "postgres")
            except (LookupError, PermissionError) as error:
                raise Unavailable(f"cannot hand {self.folder} to the postgres user: {error}") from None
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        done = self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                         "--auth=trust", "--no-sync", "-E", "UTF8")
        if done.returncode:
            raise Unavailable(f"initdb failed: {done.stderr.strip()[-500:]}")
        done = self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "log"), "-w",
            "-o", f"-p {self.port} -h 127.0.0.1 -k {self.folder} -F -c max_connections=300",
            "start",
        )
        if done.returncode:
            log = (self.folder / "log").read_text(errors="replace")[-800:] if (self.folder / "log").exists() else ""
            raise Unavailable(f"PostgreSQL did not start: {done.stderr.strip()} {log}")
        deadline = time.monotonic() + 30
        while self._run(str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)).returncode:
            if time.monotonic() > deadline:
                self.stop()
                raise Unavailable("PostgreSQL did not accept connections within 30 s")
            time.sleep(0.2)
        return self

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        done = self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                         "-U", "postgres", name)
        if done.returncode:
            raise Unavailable(f"createdb {name} failed: {done.stderr.strip()}")
        return self.url(name)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
