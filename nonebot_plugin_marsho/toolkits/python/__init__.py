"""Built-in toolkit `python`: run a Python snippet on the bot's machine, in a sandbox.

Dangerous, so superuser-only and off until the owner enables it
(`MARSHO_ENABLED_TOOLKITS=["python"]`). Nothing is sent anywhere: the snippet runs locally, in
a separate process (`python -I -S`: isolated mode, standard library only) started in a
throw-away working directory that is deleted afterwards, with stdin on /dev/null and an
environment holding nothing of the bot's. Limits, all settings of this toolkit::

    MARSHO_TOOLKIT_SETTINGS={"python": {"timeout": 10, "memory_mb": 256}}

- `timeout` (10 s): wall clock; then the process group (and, with a PID namespace, everything
  the snippet started) is killed. Keep MARSHO_TOOL_TIMEOUT above it.
- `cpu_seconds` (0: the timeout), `memory_mb` (256, address space), `max_file_mb` (16, the
  largest file it may write), `max_processes` (16), `max_output_bytes` (10000: stdout and
  stderr together; past it the program is stopped).
- `run_as` ("nobody"): when the bot runs as root, snippets run as this user.
- `allow_degraded` (false): see "the floor" below.
- `require_network_isolation` (false): with allow_degraded, still refuse to run where the OS
  cannot cut the network.
- `pretend_unavailable` ([]): act as if the OS refused "namespaces" and/or "landlock", without
  trying them: to see the refusal, or a degraded run, on a machine that has both.
- `interpreter` (""): the Python for snippets (default: the bot's, or a system python3 the
  sandbox user can run); `readable_paths` ([]): more paths the snippet may read.

Isolation (see sandbox.py): a new network namespace (no network) and PID namespace, a user
switch away from root, no_new_privs, and Landlock (Linux 5.13+: reads only the Python
installation and system libraries, writes only its working directory; TCP refused and signals
scoped on newer kernels).

The floor: where this machine cannot give a snippet a network namespace or Landlock's filesystem
rules (a container without them, an old kernel, not Linux), the tool stays shut: it refuses to
run, saying what is missing and how the owner may allow a degraded run
(`MARSHO_TOOLKIT_SETTINGS={"python": {"allow_degraded": true}}`); then every result says what
was missing.

Nothing of it outlives the bot: the launcher and the snippet get a parent-death signal, so after
`kill -9` of the bot the whole sandbox ends; the working directory such a run leaves behind is
deleted the next time this toolkit loads (`remove_stale_workdirs`).
"""

from __future__ import annotations

import math
import signal
from typing import Any

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

from .sandbox import SandboxOptions, SandboxResult, remove_stale_workdirs, run_sandboxed

MB = 1024 * 1024

PRETENDABLE = ("namespaces", "landlock")
"""What the pretend_unavailable setting may name."""

tools = Toolbox()

remove_stale_workdirs()  # left by a bot killed during a run; those in use are locked


class _BadSetting(ValueError):
    """A preset from MARSHO_TOOLKIT_SETTINGS that cannot be used."""


def _positive(name: str, value: Any, *, integer: bool = False, allow_zero: bool = False) -> Any:
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise _BadSetting(f"the python toolkit's {name} setting must be a number, not "
                          f"{value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0 or (
        number == 0 and not allow_zero
    ):
        raise _BadSetting(f"the python toolkit's {name} setting must be a positive number, "
                          f"not {value!r}")
    return number


def _options(settings: dict[str, Any]) -> SandboxOptions:
    timeout = _positive("timeout", settings["timeout"])
    cpu = _positive("cpu_seconds", settings["cpu_seconds"], allow_zero=True) or timeout
    paths = settings["readable_paths"] or []
    if isinstance(paths, str) or not all(isinstance(p, str) for p in paths):
        raise _BadSetting("the python toolkit's readable_paths setting must be a list of paths")
    pretend = settings["pretend_unavailable"] or []
    if isinstance(pretend, str) or not all(p in PRETENDABLE for p in pretend):
        raise _BadSetting("the python toolkit's pretend_unavailable setting must be a list of "
                          f"{' and '.join(map(repr, PRETENDABLE))}, not {pretend!r}")
    for name in ("allow_degraded", "require_network_isolation"):
        if not isinstance(settings[name], bool):
            raise _BadSetting(f"the python toolkit's {name} setting must be true or false, not "
                              f"{settings[name]!r}")
    return SandboxOptions(
        timeout=timeout,
        cpu_seconds=max(1, math.ceil(cpu)),
        memory_bytes=_positive("memory_mb", settings["memory_mb"], integer=True) * MB,
        file_bytes=_positive("max_file_mb", settings["max_file_mb"], integer=True) * MB,
        processes=_positive("max_processes", settings["max_processes"], integer=True),
        output_bytes=_positive("max_output_bytes", settings["max_output_bytes"], integer=True),
        run_as=str(settings["run_as"] or ""),
        interpreter=str(settings["interpreter"] or ""),
        readable_paths=tuple(paths),
        allow_degraded=settings["allow_degraded"],
        require_network_isolation=settings["require_network_isolation"],
        unavailable=tuple(pretend),
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _headline(result: SandboxResult, options: SandboxOptions) -> str:
    took = f"after {result.seconds:.2f} s"
    if result.timed_out:
        return (f"Stopped: the program was still running after {options.timeout:g} s (the time "
                "limit), so it and every process it started were killed.")
    if result.output_limit_hit:
        return (f"Stopped: the program printed more than {options.output_bytes} bytes (the "
                f"output limit), so it was killed {took}. Print less, e.g. a summary.")
    if result.signal == signal.SIGXCPU:
        return (f"Stopped: the program used {options.cpu_seconds} s of CPU time (the CPU limit) "
                "and was killed.")
    if result.signal == signal.SIGKILL:
        return (f"Killed (SIGKILL) {took}: the system ended it, usually for using too much "
                "memory.")
    if result.signal is not None:
        hint = " (often a sign of running out of memory)" if result.signal == signal.SIGSEGV else ""
        return f"Crashed: killed by {_signal_name(result.signal)}{hint} {took}."
    if result.exit_code and "MemoryError" in result.output[-2000:]:
        return (f"Out of memory: the program needed more than the {options.memory_bytes // MB} "
                f"MB it may use (exit status {result.exit_code}, {took}).")
    if result.exit_code:
        return f"Failed: exit status {result.exit_code} {took}."
    return f"Finished: exit status 0 {took}."


def _isolation_notes(result: SandboxResult) -> list[str]:
    """Only what is missing: a fully isolated run needs no words."""
    notes = []
    if result.missing:
        notes.append("this was a degraded run (allow_degraded is on), missing "
                     + " and ".join(result.missing))
    if "root" in str(result.isolation.get("user", "")):
        notes.append("it ran as root")
    return notes


def _refusal(result: SandboxResult, options: SandboxOptions) -> str:
    if options.allow_degraded or not result.missing:  # require_network_isolation
        reason = result.error.removeprefix("refused to run: ")
        return f"Refused: the code was not run: {reason}. Tell the user; do not retry."
    return (
        "Refused: the code was not run: this machine lacks part of the sandbox the python tool "
        "requires: " + " and ".join(result.missing) + ". The tool stays shut without it. Tell "
        "the user; do not retry. If the bot owner accepts a weaker sandbox, they can set "
        'MARSHO_TOOLKIT_SETTINGS={"python": {"allow_degraded": true}} in .env, and each result '
        "will then say what was missing."
    )


def _report(result: SandboxResult, options: SandboxOptions) -> ToolResponse:
    if result.refused:
        return ToolResponse.error(_refusal(result, options))
    if result.error:
        return ToolResponse.error(result.error)
    lines = [_headline(result, options)]
    if result.output:
        lines.append("Output:")
        lines.append(result.output.rstrip("\n"))
        if result.output_bytes > len(result.output.encode("utf-8", errors="replace")):
            lines.append(f"[output cut: {result.output_bytes} bytes or more were printed, "
                         f"only the first {options.output_bytes} are shown]")
    else:
        lines.append("Output: (none; print() what you want to see)")
    if result.stragglers:
        lines.append("(Processes it left running in the background were killed.)")
    notes = _isolation_notes(result)
    if notes:
        lines.append("Sandbox note: " + "; ".join(notes) + ".")
    text = "\n".join(lines)
    ok = result.exit_code == 0 and not (result.timed_out or result.output_limit_hit)
    return ToolResponse.success(text) if ok else ToolResponse.error(text)


@tools.tool(
    permission="superuser",
    timeout=10.0,
    cpu_seconds=0.0,
    memory_mb=256,
    max_file_mb=16,
    max_processes=16,
    max_output_bytes=10_000,
    run_as="nobody",
    interpreter="",
    readable_paths=None,
    allow_degraded=False,
    require_network_isolation=False,
    pretend_unavailable=None,
)
async def run(
    code: str,
    timeout: float = 10.0,
    cpu_seconds: float = 0.0,
    memory_mb: int = 256,
    max_file_mb: int = 16,
    max_processes: int = 16,
    max_output_bytes: int = 10_000,
    run_as: str = "nobody",
    interpreter: str = "",
    readable_paths: list[str] | None = None,
    allow_degraded: bool = False,
    require_network_isolation: bool = False,
    pretend_unavailable: list[str] | None = None,
) -> ToolResponse:
    """Run a Python 3 snippet in a sandbox and return its exit status and printed output.

    Use it to compute, test or check something precisely. Only the standard library is
    available; there is no network, no input, and nothing it writes is kept after the run.
    Time and memory are limited (about 10 s and 256 MB). Print the results you need.

    Args:
        code: The complete Python program to run, e.g. "import math\\nprint(math.factorial(30))".
        timeout: Preset: wall-clock seconds allowed.
        cpu_seconds: Preset: CPU seconds allowed (0: the timeout).
        memory_mb: Preset: address space allowed, in MB.
        max_file_mb: Preset: the largest file the snippet may write, in MB.
        max_processes: Preset: how many processes the sandbox may have.
        max_output_bytes: Preset: printed bytes kept; past this the program is stopped.
        run_as: Preset: the user a root bot runs snippets as ("" keeps root).
        interpreter: Preset: the Python that runs snippets ("" for the bot's own).
        readable_paths: Preset: more paths the snippet may read.
        allow_degraded: Preset: run even without a network namespace or Landlock.
        require_network_isolation: Preset: even then, refuse without a network namespace.
        pretend_unavailable: Preset: act as if "namespaces" and/or "landlock" were refused.
    """
    try:
        options = _options({
            "timeout": timeout, "cpu_seconds": cpu_seconds, "memory_mb": memory_mb,
            "max_file_mb": max_file_mb, "max_processes": max_processes,
            "max_output_bytes": max_output_bytes, "run_as": run_as, "interpreter": interpreter,
            "readable_paths": readable_paths,
            "allow_degraded": allow_degraded,
            "require_network_isolation": require_network_isolation,
            "pretend_unavailable": pretend_unavailable,
        })
    except _BadSetting as error:
        return ToolResponse.error(f"{error} (fix MARSHO_TOOLKIT_SETTINGS)")
    if not code.strip():
        return ToolResponse.error("the code is empty: pass the Python program to run")
    return _report(await run_sandboxed(code, options), options)
