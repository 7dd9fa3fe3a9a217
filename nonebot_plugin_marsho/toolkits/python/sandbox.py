"""The sandbox of the `python` toolkit: run a snippet in a separate, limited process.

This file is two things, so it imports nothing but the standard library:

- a library: `run_sandboxed(code, options)` (awaitable, never blocks the event loop) starts
  `python -I -S -B sandbox.py CONFIG` in a new session and a throw-away working directory,
  collects its output up to a cap, kills the whole process group at the time limit, and deletes
  the directory afterwards. While a run lasts, the bot holds a lock (flock) on a file beside
  the directory; `remove_stale_workdirs()` deletes the directories nobody holds, which a bot
  killed in the middle of a run left behind;
- the launcher that child runs (`python sandbox.py CONFIG`). Before it starts the snippet's own
  interpreter it takes these steps, each as far as the operating system allows, and reports
  what it achieved on the first line of its output:

  0. it dies with the bot: a parent-death signal (prctl PR_SET_PDEATHSIG), set again after every
     change of user (the kernel clears it then), on which it kills its whole process group;
     and it stops at once if the bot is already gone.
  1. namespaces: a new network namespace (only a loopback interface, down: no network at all)
     and a new PID namespace (the snippet is its init: when it ends, every process it started
     is killed). As root directly (before the user switch); otherwise, or where root is
     refused them (a container without CAP_SYS_ADMIN), inside a new user namespace.
  2. as root: switch to an unprivileged user (`nobody` by default), which drops every
     capability (no way back into the host's network namespace) and keeps other users' files.
  3. no_new_privs: setuid programs cannot give privileges back.
  4. Landlock (Linux 5.13+): the snippet may read only the Python installation, the system
     libraries and a few devices, and write only its working directory; TCP connect and bind
     are refused (Linux 6.7+), and signals to processes outside the sandbox (Linux 6.12+).
  5. resource limits: CPU seconds, address space (memory), file size, process count, open files,
     no core dumps.
  6. the floor: without a network namespace or without Landlock's filesystem rules it refuses
     to run the snippet (its status says what is missing), unless a degraded run is allowed.
  7. fork: the child (PID 1 of the new PID namespace) is killed if the launcher dies, and execs
     `python -I -S -B -u -X utf8 snippet.py` with stdin on /dev/null and a scrubbed environment.

Running the launcher ourselves, rather than doing this in `subprocess`'s `preexec_fn`, keeps it
safe in a bot full of threads (preexec_fn may deadlock after fork in a threaded process).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

STATUS_MARKER = b"\x1emarsho-sandbox "
"""Starts the launcher's status line, the first line of the output, before the snippet runs."""

SNIPPET_FILE = "snippet.py"

WORKDIR_PREFIX = "marsho-python-"
"""Working directories are `<temp folder>/marsho-python-XXXXXXXX`..."""
LOCK_SUFFIX = ".lock"
"""...each with a lock file `marsho-python-XXXXXXXX.lock` beside it, locked while it is in use."""

DRAIN_SECONDS = 0.5
"""How long output is still read after the snippet ended, before stragglers are killed."""

REFUSED_EXIT = 3
"""The launcher's exit status when it refuses to run (isolation missing, degraded runs not
allowed)."""

FALLBACK_INTERPRETERS = ("/usr/local/bin/python3", "/usr/bin/python3")
"""Tried when the bot's own Python cannot be run (by the sandbox user, say one under /root)."""

CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

# Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on every
# architecture that has them.
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
"""The rights that make sense on a file (the others are about directories)."""

SYSTEM_READABLE = (
    "/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin",
    "/etc/ld.so.cache", "/etc/localtime",
)
"""Read (and execute) access under Landlock, besides the Python installation."""

DEVICES = {"/dev/null": "rw", "/dev/zero": "r", "/dev/full": "rw", "/dev/random": "r",
           "/dev/urandom": "r"}


@dataclass(frozen=True)
class SandboxOptions:
    """What the snippet may use, and how it runs. Sizes in bytes, times in seconds."""

    timeout: float = 10.0
    """Wall-clock seconds before the whole process group is killed."""
    cpu_seconds: int = 10
    memory_bytes: int = 256 * 1024 * 1024
    """RLIMIT_AS: address space, so a bit more than the memory actually used."""
    file_bytes: int = 16 * 1024 * 1024
    """RLIMIT_FSIZE: the largest file the snippet may write."""
    processes: int = 16
    open_files: int = 256
    output_bytes: int = 10_000
    """stdout and stderr together; past this the program is stopped."""
    run_as: str = "nobody"
    """The user a root bot runs snippets as ('' keeps root: not recommended)."""
    readable_paths: tuple[str, ...] = ()
    """More paths the snippet may read under Landlock."""
    allow_degraded: bool = False
    """Run even when the floor is missing (a network namespace, Landlock's filesystem rules);
    the result's `missing` says what was. Off: such a run is refused."""
    require_network_isolation: bool = False
    """Refuse to run without a network namespace even when degraded runs are allowed."""
    interpreter: str = ""
    """The Python that runs snippets ('': the bot's own, else a system python3 the sandbox
    user can run)."""
    unavailable: tuple[str, ...] = ()
    """Act as if the OS refused these ('namespaces', 'landlock'), without trying them: how tests
    and owners see the refusal and a degraded run on a machine that has both."""


@dataclass
class SandboxResult:
    """How a run went."""

    exit_code: int | None = None
    """The snippet's exit status; None when it was killed by a signal or did not start."""
    signal: int | None = None
    """The signal that ended it (SIGKILL when we stopped it)."""
    output: str = ""
    output_bytes: int = 0
    """How much it printed in all, of which `output` holds the first `options.output_bytes`."""
    timed_out: bool = False
    output_limit_hit: bool = False
    stragglers: bool = False
    """Processes it left in the background held the output open and were killed."""
    seconds: float = 0.0
    isolation: dict[str, Any] = field(default_factory=dict)
    """What the launcher achieved: network, pid_namespace, user, filesystem, notes, missing."""
    missing: list[str] = field(default_factory=list)
    """What of the floor (network isolation, the filesystem sandbox) this machine lacked."""
    refused: bool = False
    """The launcher refused to run the snippet because of what was missing."""
    error: str = ""
    """Set when the sandbox itself could not run the snippet (or refused to)."""


# --- the bot's side ----------------------------------------------------------------------------


def scrubbed_environment(workdir: str) -> dict[str, str]:
    """The only environment the snippet sees: nothing of the bot's (API keys live there)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def _remove_tree(path: str) -> None:
    """Delete the working directory, whatever modes the snippet left on what it made."""

    def make_writable_and_retry(function: Any, target: str, _info: Any) -> None:
        try:
            os.chmod(os.path.dirname(target), stat.S_IRWXU)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, stat.S_IRWXU)
            function(target)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=make_writable_and_retry)
    else:
        shutil.rmtree(path, onerror=make_writable_and_retry)


def _claim_workdir() -> tuple[str, int]:
    """A new working directory and the fd of its lock file, locked while the run lasts.

    The lock file comes first and goes last, so a directory without one is never in use. A
    cleaner (remove_stale_workdirs, in any process) that locked the new file before we did, and
    saw no directory yet, deletes the file: then we start again with another name."""
    while True:
        fd, lock = tempfile.mkstemp(prefix=WORKDIR_PREFIX, suffix=LOCK_SUFFIX)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a cleaner holds it for a moment at most
            workdir = lock[: -len(LOCK_SUFFIX)]
            try:
                os.mkdir(workdir, 0o700)
            except FileExistsError:  # a directory of that name without a lock: another name
                os.unlink(lock)
                os.close(fd)
                continue
            mine = os.fstat(fd)
            try:
                on_disk = os.stat(lock)
                kept = (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)
            except FileNotFoundError:
                kept = False
            if kept:
                return workdir, fd
            os.rmdir(workdir)  # our lock file was taken away: this directory is not safe
            os.close(fd)
        except BaseException:
            os.close(fd)
            raise


def _release_workdir(workdir: str, fd: int) -> None:
    try:
        os.unlink(workdir + LOCK_SUFFIX)
    except OSError:
        pass
    os.close(fd)


def remove_stale_workdirs(folder: str | None = None) -> list[str]:
    """Delete the working directories (in `folder`, by default the temporary folder) that no
    running sandbox holds: those of a bot killed during a run. Returns their paths.

    A directory is in use while some process holds the lock on the file beside it; a directory
    without a lock file was left by an older version. What cannot be opened (another user's)
    is left alone."""
    folder = folder or tempfile.gettempdir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    bases = {name.removesuffix(LOCK_SUFFIX) for name in names if name.startswith(WORKDIR_PREFIX)}
    for base in sorted(bases):
        workdir = os.path.join(folder, base)
        lock = workdir + LOCK_SUFFIX
        try:
            fd: int | None = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            fd = None
        except OSError:
            continue
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a run in progress
            try:
                is_dir = stat.S_ISDIR(os.lstat(workdir).st_mode)
            except OSError:
                is_dir = False
            if is_dir:
                _remove_tree(workdir)
                if not os.path.lexists(workdir):
                    removed.append(workdir)
            if fd is not None:
                os.unlink(lock)
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
    return removed


def _kill_group(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _read_output(
    stream: asyncio.StreamReader, cap: int, state: dict[str, Any]
) -> None:
    """Read until EOF: the status line into state["status"], then up to `cap` bytes of output.

    Returns early (state["limit_hit"]) once the program printed more than `cap` bytes.
    """
    pending = b""
    status_done = False
    kept = bytearray()
    state.update(output=kept, total=0, limit_hit=False, status=None)
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        if not status_done:
            pending += chunk
            if not pending.startswith(STATUS_MARKER[: len(pending)]):
                status_done, chunk = True, pending  # no status line: the launcher failed
            elif b"\n" in pending:
                line, _, chunk = pending.partition(b"\n")
                status_done = True
                try:
                    state["status"] = json.loads(line[len(STATUS_MARKER):].decode())
                except ValueError:
                    state["status"] = None
            elif len(pending) > 65536:
                status_done, chunk = True, pending
            else:
                continue
        state["total"] += len(chunk)
        room = cap - len(kept)
        if room > 0:
            kept += chunk[:room]
        if state["total"] > cap:
            state["limit_hit"] = True
            return


async def _start_launcher(config: dict[str, Any], output: int) -> asyncio.subprocess.Process:
    """Start this file as the launcher, with the bot's Python or else a system python3."""
    failure: OSError | None = None
    for python in dict.fromkeys([config["python"], *FALLBACK_INTERPRETERS]):
        config["python"] = python
        try:
            return await asyncio.create_subprocess_exec(
                python, "-I", "-S", "-B", os.path.abspath(__file__), json.dumps(config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                cwd=config["workdir"],
                env=config["env"],
                start_new_session=True,  # its own process group, killed as a whole
            )
        except (PermissionError, FileNotFoundError) as error:
            failure = failure or error
    assert failure is not None
    raise failure


async def run_sandboxed(code: str, options: SandboxOptions) -> SandboxResult:
    """Run `code` in the sandbox; every outcome, failures included, is a SandboxResult."""
    if os.name != "posix":
        return SandboxResult(error="running code needs Linux (or another POSIX system): "
                             "resource limits and process groups are not available here")
    python = sys.executable
    if not python:
        return SandboxResult(error="the bot's Python interpreter cannot be found "
                             "(sys.executable is empty), so a snippet cannot be started")
    started = time.monotonic()
    workdir, lock = _claim_workdir()
    try:
        with open(os.path.join(workdir, SNIPPET_FILE), "w", encoding="utf-8") as file:
            file.write(code)
        os.chmod(os.path.join(workdir, SNIPPET_FILE), 0o644)
        config = {
            "python": python,
            "interpreter": options.interpreter,
            "workdir": workdir,
            "env": scrubbed_environment(workdir),
            "cpu_seconds": max(1, int(options.cpu_seconds)),
            "memory_bytes": int(options.memory_bytes),
            "file_bytes": int(options.file_bytes),
            "processes": int(options.processes),
            "open_files": int(options.open_files),
            "run_as": options.run_as,
            "readable_paths": list(options.readable_paths),
            "allow_degraded": options.allow_degraded,
            "require_network_isolation": options.require_network_isolation,
            "unavailable": list(options.unavailable),
            "parent": os.getpid(),
        }
        # Our own pipe rather than asyncio's: asyncio's process.wait() (3.11) also waits for its
        # pipes to close, which a process left in the background could keep open for ever.
        read_end, write_end = os.pipe()
        try:
            process = await _start_launcher(config, write_end)
        except OSError as error:
            os.close(read_end)
            return SandboxResult(error=f"the sandbox process could not be started: {error}")
        finally:
            os.close(write_end)
        stdout = asyncio.StreamReader()
        try:
            transport, _ = await asyncio.get_running_loop().connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stdout), os.fdopen(read_end, "rb", 0)
            )
        except BaseException:
            _kill_group(process)
            await process.wait()
            raise
        state: dict[str, Any] = {}
        timed_out = False

        async def run_to_end() -> None:
            reading = asyncio.ensure_future(_read_output(stdout, options.output_bytes, state))
            waiting = asyncio.ensure_future(process.wait())
            try:
                await asyncio.wait({reading, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if reading.done():  # end of output, or too much of it
                    reading.result()
                    if not state["limit_hit"]:
                        await waiting
                    return
                # the launcher ended (so did the snippet), but something it started in the
                # background still holds the output open (only without a PID namespace)
                try:
                    await asyncio.wait_for(asyncio.shield(reading), DRAIN_SECONDS)
                except asyncio.TimeoutError:
                    state["stragglers"] = True
            finally:
                reading.cancel()
                waiting.cancel()

        try:
            await asyncio.wait_for(run_to_end(), options.timeout)
        except asyncio.TimeoutError:
            timed_out = True
        finally:  # timeout, output limit, cancellation, or stragglers of a finished snippet
            _kill_group(process)
            transport.close()
            await process.wait()  # bounded: the launcher is dead or dying, and no pipe is ours
        return _result(process.returncode, state, timed_out, time.monotonic() - started)
    finally:
        try:
            await asyncio.to_thread(_remove_tree, workdir)
        finally:
            _release_workdir(workdir, lock)


def _result(
    returncode: int | None, state: dict[str, Any], timed_out: bool, seconds: float
) -> SandboxResult:
    status = state.get("status")
    output = bytes(state.get("output", b"")).decode("utf-8", errors="replace")
    result = SandboxResult(
        output=output,
        output_bytes=state.get("total", 0),
        timed_out=timed_out,
        output_limit_hit=bool(state.get("limit_hit")),
        stragglers=bool(state.get("stragglers")),
        seconds=seconds,
        isolation=status or {},
        missing=list((status or {}).get("missing", [])),
    )
    if returncode is not None and returncode < 0:
        result.signal = -returncode
    else:
        result.exit_code = returncode
    if timed_out or result.output_limit_hit:
        return result
    if status is None:
        result.error = "the sandbox could not start: " + (output.strip() or
                                                          f"exit status {returncode}")
    elif status.get("refused"):
        result.error = status["refused"]
        result.refused = True
    return result


# --- the launcher's side (runs in the child, as `python -I -S -B sandbox.py CONFIG`) ----------


def _libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _errno_text() -> str:
    import ctypes

    number = ctypes.get_errno()
    return f"{errno.errorcode.get(number, number)}: {os.strerror(number)}"


def _unshare(libc: Any, user_namespace: bool, problems: list[str]) -> int:
    """Enter new network (and if possible PID) namespaces; the CLONE_* flags achieved."""
    base = CLONE_NEWUSER if user_namespace else 0
    for flags in (base | CLONE_NEWNET | CLONE_NEWPID, base | CLONE_NEWNET):
        if libc.unshare(flags) == 0:
            return flags
        problems.append(f"unshare({_flag_names(flags)}) failed: {_errno_text()}")
    return 0


def _flag_names(flags: int) -> str:
    names = [("CLONE_NEWUSER", CLONE_NEWUSER), ("CLONE_NEWNET", CLONE_NEWNET),
             ("CLONE_NEWPID", CLONE_NEWPID)]
    return "|".join(name for name, bit in names if flags & bit)


def _map_own_ids(uid: int, gid: int) -> None:
    """In a new user namespace, keep appearing as ourselves (no root inside: after exec the
    snippet has no capabilities there either)."""
    for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:
            with open(path, "w") as file:
                file.write(text)
        except OSError:
            pass


def _drop_root(run_as: str, workdir: str) -> str:
    import pwd

    try:
        entry = pwd.getpwnam(run_as)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if run_as.isdigit():
            uid = gid = int(run_as)
        elif run_as == "nobody":
            uid = gid = 65534  # the conventional nobody, on systems without the entry
        else:
            raise RuntimeError(f"the user {run_as!r} (run_as) does not exist") from None
    os.chown(workdir, uid, gid)
    os.chmod(workdir, 0o700)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError(f"could not switch to the user {run_as!r}")
    return f"{run_as} (uid {uid})"


def _choose_interpreter(config: dict[str, Any], status: dict[str, Any]) -> str:
    """The first Python this (possibly switched) user may run."""
    wanted = config["interpreter"] or config["python"]
    candidates = [wanted] if config["interpreter"] else [wanted, *FALLBACK_INTERPRETERS]
    for candidate in candidates:
        if os.access(candidate, os.X_OK) and os.access(os.path.realpath(candidate), os.R_OK):
            if candidate != wanted:
                status["notes"].append(f"{wanted} cannot be run by {status['user']}; "
                                       f"snippets run with {candidate}")
            return candidate
    raise RuntimeError(
        f"{status['user']} cannot run {wanted}"
        + ("" if config["interpreter"] else " nor a system python3")
        + ": set the interpreter setting to a Python it can run, or run_as to another user"
    )


class _PathBeneath:
    """struct landlock_path_beneath_attr, packed: u64 allowed_access, s32 parent_fd."""

    @staticmethod
    def make(allowed: int, fd: int) -> Any:
        import ctypes

        class Attr(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        return Attr(allowed, fd)


def _python_paths(python: str) -> list[str]:
    """What the snippet's interpreter must read: its binary, standard library, pyvenv.cfg."""
    paths = [p for p in sys.path if p]
    paths += [sys.base_prefix, sys.base_exec_prefix]
    real = os.path.realpath(python)
    paths.append(real)
    here = os.path.dirname(os.path.abspath(python))
    paths += [os.path.join(here, "pyvenv.cfg"), os.path.join(os.path.dirname(here), "pyvenv.cfg")]
    return paths


def _landlock(libc: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Restrict what this process and its children may touch; a summary of what applies."""
    import ctypes

    abi = libc.syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                       ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return {"filesystem": f"not restricted: Landlock is unavailable ({_errno_text()})",
                "landlock_net": False}
    handled_fs, handled_net, scoped = _handled_access(abi)

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    attr = RulesetAttr(handled_fs, handled_net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                           ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return {"filesystem": f"not restricted: Landlock refused a ruleset ({_errno_text()})",
                "landlock_net": False}
    rules = _landlock_rules(config, handled_fs)
    try:
        for path, rights in rules:
            _allow_beneath(libc, ruleset, path, rights, handled_fs)
        if libc.syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset),
                        ctypes.c_uint32(0)) != 0:
            return {"filesystem": f"not restricted: landlock_restrict_self failed "
                    f"({_errno_text()})", "landlock_net": False}
    except OSError as error:
        return {"filesystem": f"not restricted: {error.strerror}", "landlock_net": False}
    finally:
        os.close(ruleset)
    return {
        "filesystem": f"Landlock ABI {abi}: reads only the Python installation and system "
                      "libraries, writes only its working directory",
        "landlock_net": bool(handled_net),
        "signals": "scoped to the sandbox" if scoped else "not scoped",
    }


def _handled_access(abi: int) -> tuple[int, int, int]:
    """What a ruleset of this Landlock ABI restricts: (filesystem rights, network rights,
    scopes); each newer ABI handles more, and whatever is handled is denied unless a rule
    allows it."""
    handled_fs = (1 << 13) - 1
    if abi >= 2:
        handled_fs |= FS_REFER
    if abi >= 3:
        handled_fs |= FS_TRUNCATE
    if abi >= 5:
        handled_fs |= FS_IOCTL_DEV
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return handled_fs, handled_net, scoped


def _landlock_rules(config: dict[str, Any], handled_fs: int) -> list[tuple[str, int]]:
    """(path, rights) the snippet keeps: reading the system and the Python installation, the
    devices, and everything in its working directory."""
    read_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    rules: list[tuple[str, int]] = []
    for path in [*SYSTEM_READABLE, *_python_paths(config["python"]), *config["readable_paths"]]:
        rules.append((path, read_rights))
    for path, mode in DEVICES.items():
        rights = FS_READ_FILE | (FS_WRITE_FILE | FS_TRUNCATE if "w" in mode else 0)
        rules.append((path, rights))
    rules.append((config["workdir"], handled_fs))
    return rules


def _allow_beneath(libc: Any, ruleset: int, path: str, rights: int, handled_fs: int) -> None:
    """Add a rule allowing `rights` beneath `path` (only file rights when it is a file). A path
    that does not exist here is skipped, and so is "/" with less than every right (it would
    open up everything); a rule the kernel refuses is an OSError."""
    import ctypes

    if os.path.realpath(path) == "/" and rights != handled_fs:
        return  # would open up everything
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this system
    try:
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        allowed = rights & handled_fs & (~0 if is_dir else FILE_RIGHTS)
        rule = _PathBeneath.make(allowed, fd)
        if libc.syscall(ctypes.c_long(SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset),
                        ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(rule),
                        ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}): {_errno_text()}")
    finally:
        os.close(fd)


def _set_limits(config: dict[str, Any], count_processes: bool) -> None:
    import resource  # already imported by launcher_main, while the files could still be read

    cpu = config["cpu_seconds"]
    limits = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, config["memory_bytes"]),
        (resource.RLIMIT_FSIZE, config["file_bytes"]),
        (resource.RLIMIT_NOFILE, config["open_files"]),
    ]
    if count_processes:
        limits.append((resource.RLIMIT_NPROC, config["processes"]))
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    # soft = hard: SIGKILL right at the limit (the init of a PID namespace ignores SIGXCPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


def _write_status(status: dict[str, Any]) -> None:
    line = STATUS_MARKER + json.dumps(status).encode() + b"\n"
    while line:
        line = line[os.write(1, line):]


def _end_group(*_: object) -> None:
    """Kill the launcher's whole process group (the snippet and what it started), and itself."""
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(128 + signal.SIGKILL)


def _die_with_bot(libc: Any, parent: int) -> None:
    """Get SIGTERM (which ends the group) when the bot dies, and end now if it already did.

    Called again after each change of credentials: the kernel clears the parent-death signal
    then (setuid, setgid)."""
    prctl = getattr(libc, "prctl", None)
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if parent and os.getppid() != parent:
        _end_group()


def _missing(flags: int, status: dict[str, Any], problems: list[str]) -> list[str]:
    """What of the floor this run lacks: a network namespace, Landlock's filesystem rules."""
    missing = []
    if not flags & CLONE_NEWNET:
        why = "; ".join(problems) or "no network namespace"
        if status.get("landlock_net"):
            missing.append(f"network isolation (no network namespace: {why}; Landlock refused "
                           "TCP, but UDP and other sockets could still reach the network)")
        else:
            missing.append(f"network isolation (no network namespace: {why}; so this machine "
                           "could not cut the program off the network)")
    filesystem = str(status.get("filesystem", ""))
    if filesystem.startswith("not restricted"):
        reason = filesystem.removeprefix("not restricted: ")
        missing.append(f"the filesystem sandbox ({reason}; so it could read any file its user "
                       "may read)")
    return missing


def launcher_main(argv: list[str]) -> None:
    """Isolate this process as far as the OS allows, then run the snippet under it.

    The steps of the module's docstring, in this order: 0 (dying with the bot), 1 and 2
    (_isolate), 3 (no_new_privs), 4 (_restrict_filesystem), 6 (_check_floor), 5
    (_limit_resources), 7 (_run_snippet)."""
    import pwd  # noqa: F401  (imported now: after the user switch and Landlock they may be out
    import resource  # noqa: F401  of reach)

    config = json.loads(argv[1])
    libc = _libc()
    signal.signal(signal.SIGTERM, _end_group)
    _die_with_bot(libc, int(config.get("parent", 0)))
    root = os.geteuid() == 0
    status: dict[str, Any] = {"notes": []}
    flags, problems = _isolate(libc, config, root, status)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        status["notes"].append(f"no_new_privs failed: {_errno_text()}")
    config["python"] = _choose_interpreter(config, status)
    _restrict_filesystem(libc, config, status)
    _check_floor(config, flags, status, problems)
    if status.get("refused"):
        _write_status(status)
        os._exit(REFUSED_EXIT)
    _limit_resources(config, root, flags, status)
    _write_status(status)
    _run_snippet(libc, config)


def _isolate(
    libc: Any, config: dict[str, Any], root: bool, status: dict[str, Any]
) -> tuple[int, list[str]]:
    """Steps 1 and 2: namespaces and the user switch. The namespaces that took (clone flags),
    and why none did (empty when some did); `status` says who runs and what is cut off."""
    # As root: plain namespaces first (they need CAP_SYS_ADMIN), then switch user. Otherwise
    # (or if root was refused, as in a container without CAP_SYS_ADMIN): inside a user namespace.
    problems: list[str] = []
    flags = 0
    if "namespaces" in config["unavailable"]:
        problems.append("namespaces treated as unavailable (the pretend_unavailable setting)")
    elif root:
        flags = _unshare(libc, False, problems)
    if root and config["run_as"]:
        status["user"] = _drop_root(config["run_as"], config["workdir"])
    else:
        status["user"] = f"uid {os.getuid()}" + (" (root!)" if os.geteuid() == 0 else "")
    if not flags and "namespaces" not in config["unavailable"] and os.geteuid() != 0:
        uid, gid = os.getuid(), os.getgid()
        flags = _unshare(libc, True, problems)
        if flags:
            _map_own_ids(uid, gid)
    _die_with_bot(libc, int(config.get("parent", 0)))  # the user switch cleared it
    if flags:
        problems.clear()  # what finally worked is all that matters
    status["notes"] += problems
    status["network"] = ("cut off (new network namespace)" if flags & CLONE_NEWNET
                         else "not isolated by a namespace")
    status["pid_namespace"] = bool(flags & CLONE_NEWPID)
    return flags, problems


def _restrict_filesystem(libc: Any, config: dict[str, Any], status: dict[str, Any]) -> None:
    """Step 4: Landlock, unless the owner pretends it is unavailable."""
    if "landlock" in config["unavailable"]:
        status.update(filesystem="not restricted: Landlock treated as unavailable (the "
                      "pretend_unavailable setting)", landlock_net=False)
    else:
        status.update(_landlock(libc, config))


def _check_floor(
    config: dict[str, Any], flags: int, status: dict[str, Any], problems: list[str]
) -> None:
    """Step 6: what isolation this run got, and status["refused"] when that is below the floor
    (or without a network namespace while require_network_isolation is on)."""
    if not flags & CLONE_NEWNET and status.get("landlock_net"):
        status["network"] = "TCP refused by Landlock (UDP and local sockets still work)"
    status["network_isolated"] = bool(flags & CLONE_NEWNET)
    status["missing"] = missing = _missing(flags, status, problems)
    if missing and not config["allow_degraded"]:
        status["refused"] = ("refused to run: the sandbox is missing " + " and ".join(missing) +
                             ", and degraded runs are not allowed")
    elif config["require_network_isolation"] and not flags & CLONE_NEWNET:
        status["refused"] = ("refused to run: this machine cannot cut a process off the network "
                             "(" + "; ".join(problems or ["no network namespace"]) + "), and the "
                             "require_network_isolation setting is on")


def _limit_resources(config: dict[str, Any], root: bool, flags: int, status: dict[str, Any]) -> None:
    """Step 5: the resource limits."""
    # counting processes only makes sense for a user of the sandbox's own (root is not limited;
    # the bot's user counts the bot's threads too)
    own_user = (root and bool(config["run_as"])) or bool(flags & CLONE_NEWUSER)
    _set_limits(config, count_processes=own_user)
    if not own_user:
        status["notes"].append("process count not limited (the sandbox shares the bot's user)")


def _run_snippet(libc: Any, config: dict[str, Any]) -> NoReturn:
    """Step 7: fork, exec the snippet's interpreter in the child, and end as the child ended."""
    cpu_limit = config["cpu_seconds"]
    argv_snippet = [config["python"], "-I", "-S", "-B", "-u", "-X", "utf8", SNIPPET_FILE]
    child = os.fork()
    if child == 0:
        try:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            os.execve(config["python"], argv_snippet, config["env"])
        except BaseException as error:
            os.write(2, f"sandbox: cannot start {config['python']}: {error}\n".encode())
        finally:
            os._exit(127)
    _, wait_status, usage = os.wait4(child, 0)
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        if number == signal.SIGKILL and usage.ru_utime + usage.ru_stime >= 0.8 * cpu_limit:
            # the kernel's SIGKILL at the CPU limit: say so (under load the CPU time it reports
            # for a snippet killed at 1 s is 0.87-0.98 s, so the margin is a fifth)
            number = signal.SIGXCPU
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)  # end the same way, so the bot sees the signal
        os._exit(128 + number)
    os._exit(os.waitstatus_to_exitcode(wait_status))


if __name__ == "__main__":
    try:
        launcher_main(sys.argv)
    except Exception as failure:  # said plainly: the bot reports it as the sandbox's failure
        os.write(2, f"sandbox: {type(failure).__name__}: {failure}\n".encode())
        os._exit(2)
