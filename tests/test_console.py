"""The README's "try it in this terminal": `python bot.py --console` in a real terminal (a pty),
typing `marsho hello` into nonebot-adapter-console's input line and reading the answer off the
screen, with only an endpoint configured."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI, text
from tests.onebot_sim import BOT_PY
from tests.speakers import label

pytestmark = pytest.mark.e2e

ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)")


class Terminal:
    """A program on a pseudo-terminal of 120x35, its screen output kept as text without escapes."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 35, 120, 0, 0))
        self.master = master
        self.raw = b""
        self.process = subprocess.Popen(args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                                        start_new_session=True)
        os.close(slave)

    def read(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], min(left, 0.2))
            if ready:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:  # the program closed the terminal
                    return

    @property
    def screen(self) -> str:
        return ANSI.sub(b"", self.raw).decode("utf-8", errors="replace")

    def wait_for(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.screen:
                return True
            if self.process.poll() is not None:
                self.read(0.5)
                return needle in self.screen
            self.read(0.3)
        return False

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def exit_code(self, timeout: float) -> int | None:
        """The program's exit status once it has ended, reading its screen meanwhile (None: it
        was still running after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            self.read(0.3)
        return self.process.poll()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.close(self.master)


def console(endpoint: FakeOpenAI) -> Terminal:
    """`python bot.py --console` in a terminal of its own, on `endpoint`, once its input line is drawn."""
    work = Path(tempfile.mkdtemp(prefix="marsho-console-"))
    inherited = {k: v for k, v in os.environ.items()
                 if not k.upper().startswith(("MARSHO", "LOCALSTORE_", "ONEBOT_", "CONSOLE_"))
                 and k.upper() not in {"DRIVER", "ENVIRONMENT", "SUPERUSERS", "COMMAND_START", "NICKNAME"}}
    env = {**inherited, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "35",
           "MARSHO_BASE_URL": endpoint.base_url, "MARSHO_API_KEY": "test-key", "MARSHO_MODEL": "fake-model",
           "LOCALSTORE_DATA_DIR": str(work / "data"), "LOCALSTORE_CACHE_DIR": str(work / "cache"),
           "LOCALSTORE_CONFIG_DIR": str(work / "config"), "MARSHO_LANG": "en"}
    terminal = Terminal([sys.executable, str(BOT_PY), "--console"], cwd=work, env=env)
    if not terminal.wait_for("Send Message", 60):  # the input line is drawn
        terminal.close()
        raise AssertionError(terminal.screen[-3000:])
    return terminal


CTRL_SLASH = "\x1f"
"""Ctrl+/ as a terminal sends it (the same byte as Ctrl+_): the console focuses its input line."""

CTRL_Q = "\x11"
"""Ctrl+Q: the console closes its screen (and bot.py stops the bot with it)."""


def typed(terminal: Terminal, line: str, *, focus: bool = True) -> None:
    """`line` typed into the input line and sent (Ctrl+/ first, unless it has the focus already)."""
    if focus:
        terminal.type(CTRL_SLASH)
        terminal.read(1)
    terminal.type(line)
    terminal.read(1)
    terminal.type("\r")


def test_bot_py_console_answers_what_is_typed_in_the_terminal(endpoint: FakeOpenAI) -> None:
    endpoint.reset()
    endpoint.push(text("Pong4711"))
    terminal = console(endpoint)
    try:
        typed(terminal, "marsho hello")
        # the answer's bubble slides in from the left: its first frames show only the end of the
        # word ("ong4711"), so the test waits for the whole word, drawn once the bubble is in place
        assert terminal.wait_for("Pong4711", 60), terminal.screen[-3000:]
        [request] = endpoint.requests
        assert request["messages"][-1]["content"].startswith(f"{label('User', 'user', 'Console')}: hello\n\n")  # and the time
    finally:
        terminal.close()


def test_the_person_at_the_console_is_a_superuser(endpoint: FakeOpenAI) -> None:
    endpoint.reset()
    terminal = console(endpoint)
    try:
        typed(terminal, "marsho.status")
        # nonebot-adapter-console names its user "user": bot.py makes that user a superuser
        assert terminal.wait_for("Model endpoints", 60), terminal.screen[-3000:]
        assert "Only the bot's superusers" not in terminal.screen
    finally:
        terminal.close()


def test_the_console_walk_as_the_docs_tell_it(endpoint: FakeOpenAI) -> None:
    """Start, Ctrl+/ once, `marsho hello` and its answer, `marsho.model` answered to the person at
    the terminal (a superuser), Ctrl+Q: the bot stops, with status 0."""
    endpoint.reset()
    endpoint.push(text("Pong4711"))
    terminal = console(endpoint)
    try:
        typed(terminal, "marsho hello")
        assert terminal.wait_for("Pong4711", 60), terminal.screen[-3000:]
        typed(terminal, "marsho.model", focus=False)  # the input line keeps the focus
        assert terminal.wait_for("The model is fake-model", 60), terminal.screen[-3000:]
        assert "Only the bot's superusers" not in terminal.screen
        terminal.type(CTRL_Q)
        assert terminal.exit_code(60) == 0, terminal.screen[-3000:]
    finally:
        terminal.close()
