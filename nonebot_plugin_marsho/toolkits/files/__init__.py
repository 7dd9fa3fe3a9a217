"""Built-in toolkit `files`: read, write, list, move and delete files in ONE workspace folder.

Dangerous, so superuser-only and off until the owner enables it
(`MARSHO_ENABLED_TOOLKITS=["files"]`). Nothing is sent anywhere. The workspace is the
`workspace` setting, by default the folder `workspace` in the plugin's data folder::

    MARSHO_TOOLKIT_SETTINGS={"files": {"workspace": "/srv/bot/shared"}}

Staying inside it: paths are relative to the workspace (an absolute path is accepted only
when it points inside); `..` is refused; and symbolic links are never followed, neither as the
file itself nor as a folder on the way (each folder is opened relative to the one before with
O_NOFOLLOW, and the file with O_NOFOLLOW too, so a link swapped in between two checks cannot
lead outside either). A link itself may be listed, moved or deleted: that never touches what it
points to. A file with more than one hard link is refused for reading, writing, moving, deleting
and being replaced: another of its names may be outside the workspace (a hard link needs no
permission on the file it names), so what it holds is not the workspace's to read or change.
Reads and writes are capped (`max_read_bytes`, `max_write_bytes`); only regular files
are read or written; the workspace folder itself cannot be deleted or moved.

Needs a system with openat-style calls (Linux, macOS, BSDs); elsewhere the tools refuse.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

MAX_LISTED = 500
"""Entries shown by list."""

O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

tools = Toolbox()


class _Refused(Exception):
    """An operation this toolkit will not (or cannot) do, worded for the model."""


def _supported() -> bool:
    return bool(O_NOFOLLOW and O_DIRECTORY) and os.open in os.supports_dir_fd \
        and os.scandir in os.supports_fd


def _default_workspace() -> Path:
    """`workspace` in the plugin's data folder; looked up only when a tool runs."""
    try:
        import nonebot_plugin_localstore as localstore

        # localstore finds the plugin from this module's name (nonebot_plugin_marsho._toolkits.*)
        return localstore.get_plugin_data_dir() / "workspace"
    except Exception as error:
        raise _Refused(
            "no workspace folder is configured and the plugin's data folder is unknown "
            f"({type(error).__name__}); the bot owner must set one in .env, e.g. "
            'MARSHO_TOOLKIT_SETTINGS={"files": {"workspace": "/path/to/folder"}}'
        ) from None


def _limit(name: str, value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 1:
        raise _Refused(f"the files toolkit's {name} setting must be a positive number of bytes, "
                       f"not {value!r} (fix MARSHO_TOOLKIT_SETTINGS)")
    return int(number)


class _Workspace:
    """The workspace folder, opened once; paths inside it are walked one folder at a time."""

    def __init__(self, setting: str) -> None:
        if not _supported():
            raise _Refused("the files toolkit needs a system with openat and O_NOFOLLOW (Linux, "
                           "macOS, BSD) to keep paths inside the workspace; it is off here")
        configured = Path(setting).expanduser() if setting else _default_workspace()
        if not configured.is_absolute():
            configured = Path.cwd() / configured
        try:
            configured.mkdir(parents=True, exist_ok=True)
            self.root = configured.resolve()
            self.fd = os.open(self.root, os.O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        except OSError as error:
            raise _Refused(f"the workspace folder {str(configured)!r} cannot be used: "
                           f"{error.strerror}") from None
        self.spellings = [PurePosixPath(self.root.as_posix()),
                          PurePosixPath(configured.as_posix())]

    def __enter__(self) -> _Workspace:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)

    def parts(self, path: str) -> list[str]:
        """The path's names below the workspace; [] for the workspace itself."""
        text = path.strip().replace("\\", "/")
        if "\0" in text:
            raise _Refused("the path contains a NUL character")
        if text.startswith("/"):
            pure = PurePosixPath(text)
            for root in self.spellings:
                if pure == root or root in pure.parents:
                    text = pure.relative_to(root).as_posix()
                    break
            else:
                raise _Refused(f"{path!r} is outside the workspace: use a path relative to the "
                               "workspace folder, e.g. notes/todo.txt")
        names = [name for name in text.split("/") if name not in ("", ".")]
        if ".." in names:
            raise _Refused(f"{path!r} uses '..': paths must stay inside the workspace, so '..' "
                           "is not allowed")
        return names

    def open_folder(self, names: list[str], *, create: bool = False) -> int:
        """An fd of the folder at `names`, never through a symbolic link; the caller closes it."""
        flags = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        fd = os.dup(self.fd)
        try:
            for index, name in enumerate(names):
                try:
                    try:
                        next_fd = os.open(name, flags, dir_fd=fd)
                    except FileNotFoundError:
                        if not create:
                            raise _Refused(f"there is no folder {shown(names[: index + 1])}") from None
                        try:
                            os.mkdir(name, 0o755, dir_fd=fd)
                        except FileExistsError:
                            pass
                        next_fd = os.open(name, flags, dir_fd=fd)  # a link raced in fails here
                except OSError as error:
                    raise _explain(error, names[: index + 1], fd) from None
                os.close(fd)
                fd = next_fd
            return fd
        except BaseException:
            os.close(fd)
            raise


def shown(names: list[str]) -> str:
    """A path as the model wrote it relative to the workspace ('.' for the workspace)."""
    return "/".join(names) or "."


def _explain(error: OSError, names: list[str], fd_hint: int | None) -> _Refused:
    where = shown(names)
    if error.errno == errno.ELOOP or (error.errno == errno.ENOTDIR and _is_link(names, fd_hint)):
        return _Refused(f"{where} is a symbolic link: links are not followed, so it cannot be "
                        "used as a path (it may only be listed, moved or deleted)")
    if error.errno == errno.ENOTDIR:
        return _Refused(f"{where} is not a folder")
    if error.errno == errno.ENOENT:
        return _Refused(f"{where} does not exist")
    if error.errno == errno.EISDIR:
        return _Refused(f"{where} is a folder")
    if error.errno in (errno.EACCES, errno.EPERM):
        return _Refused(f"{where}: permission denied")
    if error.errno == errno.ENOSPC:
        return _Refused("the disk is full")
    return _Refused(f"{where}: {error.strerror}")


def _is_link(names: list[str], parent_fd: int | None) -> bool:
    if parent_fd is None or not names:
        return False
    try:
        return stat.S_ISLNK(os.stat(names[-1], dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refuse_hard_links(info: os.stat_result, where: str, doing: str) -> None:
    """Refuse a file that has other names (hard links), which may be outside the workspace."""
    if not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1:
        raise _Refused(
            f"{where} is not {doing}: the file has {info.st_nlink} hard links (names), and another "
            "of them may be outside the workspace, so this tool does not read, write, move or "
            "delete it. Tell the user; the bot owner can remove the extra link, or copy the file "
            "into the workspace"
        )


def _split(workspace: _Workspace, path: str, what: str) -> tuple[list[str], str]:
    names = workspace.parts(path)
    if not names:
        raise _Refused(f"{path!r} is the workspace folder itself, not a {what}")
    return names[:-1], names[-1]


def _lstat(name: str, folder: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _run(action: Any) -> ToolResponse:
    try:
        return ToolResponse.success(action())
    except _Refused as refused:
        return ToolResponse.error(str(refused))
    except OSError as error:
        return ToolResponse.error(f"the file operation failed: {error.strerror or error}")


@tools.tool(permission="superuser", workspace="", max_read_bytes=100_000)
def read(path: str, offset: int = 0, workspace: str = "", max_read_bytes: int = 100_000) -> ToolResponse:
    """Read a text file from the workspace folder.

    Long files come in pieces: the answer says which bytes it shows and the offset to read on.

    Args:
        path: The file, relative to the workspace, e.g. notes/todo.txt.
        offset: Start at this byte (0 for the beginning).
        workspace: Preset: the workspace folder.
        max_read_bytes: Preset: the most bytes returned at once.
    """

    def action() -> str:
        cap = _limit("max_read_bytes", max_read_bytes)
        if offset < 0:
            raise _Refused("offset must be 0 or more")
        with _Workspace(workspace) as space:
            folder_names, name = _split(space, path, "file")
            folder = space.open_folder(folder_names)
            try:
                flags = os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
                try:
                    fd = os.open(name, flags, dir_fd=folder)
                except OSError as error:
                    raise _explain(error, [*folder_names, name], folder) from None
            finally:
                os.close(folder)
            try:
                info = os.fstat(fd)
                where = shown([*folder_names, name])
                if stat.S_ISDIR(info.st_mode):
                    raise _Refused(f"{where} is a folder: use list to see what it holds")
                if not stat.S_ISREG(info.st_mode):
                    raise _Refused(f"{where} is not a regular file")
                _refuse_hard_links(info, where, "read")
                data = os.pread(fd, cap, offset)
            finally:
                os.close(fd)
        if b"\0" in data:
            return f"{where} is a binary file ({info.st_size} bytes); this tool reads text only."
        text = data.decode("utf-8", errors="replace")
        end = offset + len(data)
        if offset >= info.st_size and info.st_size:
            return f"{where} has {info.st_size} bytes; offset {offset} is past its end."
        if offset == 0 and end >= info.st_size:
            return text if text else f"{where} is empty."
        note = f"[bytes {offset}-{end} of {info.st_size}"
        note += f"; read on with offset={end}]" if end < info.st_size else "]"
        return f"{text}\n{note}"

    return _run(action)


@tools.tool(permission="superuser", workspace="", max_write_bytes=1_000_000)
def write(
    path: str, content: str, append: bool = False, workspace: str = "",
    max_write_bytes: int = 1_000_000,
) -> ToolResponse:
    """Write a text file in the workspace folder, creating it and its folders if needed.

    Args:
        path: The file, relative to the workspace, e.g. notes/todo.txt.
        content: The text to write (UTF-8).
        append: Add to the end of the file instead of replacing what it holds.
        workspace: Preset: the workspace folder.
        max_write_bytes: Preset: the largest file this may leave.
    """

    def action() -> str:
        cap = _limit("max_write_bytes", max_write_bytes)
        data = content.encode("utf-8")
        if len(data) > cap:
            raise _Refused(f"the content is {len(data)} bytes; at most {cap} may be written")
        with _Workspace(workspace) as space:
            folder_names, name = _split(space, path, "file")
            where = shown([*folder_names, name])
            folder = space.open_folder(folder_names, create=True)
            try:
                flags = os.O_WRONLY | os.O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC
                try:
                    fd = os.open(name, flags | (os.O_APPEND if append else 0), 0o644,
                                 dir_fd=folder)
                except OSError as error:
                    raise _explain(error, [*folder_names, name], folder) from None
            finally:
                os.close(folder)
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise _Refused(f"{where} is not a regular file")
                _refuse_hard_links(info, where, "written")  # before anything is truncated
                if append and info.st_size + len(data) > cap:
                    raise _Refused(f"{where} would grow to {info.st_size + len(data)} bytes; "
                                   f"files may hold at most {cap}")
                if not append:
                    os.ftruncate(fd, 0)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        return f"{'Appended' if append else 'Wrote'} {len(data)} bytes to {where}."

    return _run(action)


def _describe(entry: os.DirEntry[str], folder: int) -> tuple[int, str]:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return 2, f"{entry.name} (cannot be read)"
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(entry.name, dir_fd=folder)
        except OSError:
            target = "?"
        return 2, f"{entry.name} -> {target} (symbolic link, not followed)"
    if stat.S_ISDIR(info.st_mode):
        return 0, f"{entry.name}/"
    if stat.S_ISREG(info.st_mode):
        if info.st_nlink > 1:
            return 1, (f"{entry.name} ({info.st_size} bytes; {info.st_nlink} hard links, so "
                       "refused by read, write, move and delete)")
        return 1, f"{entry.name} ({info.st_size} bytes)"
    return 2, f"{entry.name} (special file)"


@tools.tool(permission="superuser", name="list", workspace="")
def list_folder(path: str = ".", workspace: str = "") -> ToolResponse:
    """List a folder of the workspace: its subfolders (ending in /) and files with their sizes.

    Args:
        path: The folder, relative to the workspace ("." for the workspace itself).
        workspace: Preset: the workspace folder.
    """

    def action() -> str:
        with _Workspace(workspace) as space:
            names = space.parts(path)
            folder = space.open_folder(names)
            try:
                with os.scandir(folder) as entries:
                    described = sorted(_describe(entry, folder) for entry in entries)
            finally:
                os.close(folder)
        where = shown(names)
        if not described:
            return f"{where} is empty."
        lines = [line for _, line in described[:MAX_LISTED]]
        head = f"{where} holds {len(described)} entries"
        if len(described) > MAX_LISTED:
            head += f" (the first {MAX_LISTED} shown)"
        return "\n".join([head + ":", *lines])

    return _run(action)


@tools.tool(permission="superuser", workspace="")
def move(source: str, destination: str, overwrite: bool = False, workspace: str = "") -> ToolResponse:
    """Move or rename a file or folder inside the workspace.

    When the destination is an existing folder, the source goes into it.

    Args:
        source: What to move, relative to the workspace.
        destination: The new path, or a folder to move it into.
        overwrite: Replace an existing file at the destination.
        workspace: Preset: the workspace folder.
    """

    def action() -> str:
        with _Workspace(workspace) as space:
            source_folder_names, source_name = _split(space, source, "file or folder to move")
            destination_names = space.parts(destination)
            source_folder = space.open_folder(source_folder_names)
            target_folder = -1
            try:
                moving = _lstat(source_name, source_folder)
                if moving is None:
                    raise _Refused(f"{shown([*source_folder_names, source_name])} does not exist")
                _refuse_hard_links(moving, shown([*source_folder_names, source_name]), "moved")
                try:
                    target_folder = space.open_folder(destination_names)
                    target_names = [*destination_names, source_name]  # into an existing folder
                except _Refused:
                    target_folder = space.open_folder(destination_names[:-1], create=True)
                    target_names = destination_names
                target_name = target_names[-1]
                existing = _lstat(target_name, target_folder)
                if existing is not None:
                    if stat.S_ISDIR(existing.st_mode):
                        raise _Refused(f"{shown(target_names)} is an existing folder; it is not "
                                       "replaced")
                    if not overwrite:
                        raise _Refused(f"{shown(target_names)} already exists: pass "
                                       "overwrite=true to replace it")
                    _refuse_hard_links(existing, shown(target_names), "replaced")
                try:
                    os.rename(source_name, target_name, src_dir_fd=source_folder,
                              dst_dir_fd=target_folder)
                except OSError as error:
                    if error.errno == errno.EINVAL:
                        raise _Refused("a folder cannot be moved into itself") from None
                    raise _explain(error, target_names, None) from None
            finally:
                os.close(source_folder)
                if target_folder >= 0:
                    os.close(target_folder)
        return f"Moved {shown([*source_folder_names, source_name])} to {shown(target_names)}."

    return _run(action)


def _check_tree(folder: int, names: list[str], top: str) -> None:
    """Refuse (before anything is deleted) a folder holding a file with several hard links."""
    fd = os.open(names[-1], os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=folder)
    try:
        with os.scandir(fd) as entries:
            children = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
        for child, info in children:
            if stat.S_ISDIR(info.st_mode):
                _check_tree(fd, [*names, child], top)
            else:
                _refuse_hard_links(info, shown([*names, child]),
                                   f"deleted, so neither is the folder {top}")
    finally:
        os.close(fd)


def _remove_tree(folder: int, name: str, names: list[str]) -> int:
    """Delete the folder `name` in `folder` and all it holds, never following a link; how many
    entries went."""
    fd = os.open(name, os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, dir_fd=folder)
    removed = 0
    try:
        with os.scandir(fd) as entries:
            children = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
        for child, info in children:
            if stat.S_ISDIR(info.st_mode):
                removed += _remove_tree(fd, child, [*names, child])
            else:
                _refuse_hard_links(info, shown([*names, child]), "deleted")  # one made meanwhile
                os.unlink(child, dir_fd=fd)
                removed += 1
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=folder)
    return removed + 1


@tools.tool(permission="superuser", workspace="")
def delete(path: str, recursive: bool = False, workspace: str = "") -> ToolResponse:
    """Delete a file, or a folder, in the workspace (a link is removed, never what it points to).

    Args:
        path: What to delete, relative to the workspace.
        recursive: Also delete a folder that is not empty, with everything in it.
        workspace: Preset: the workspace folder.
    """

    def action() -> str:
        with _Workspace(workspace) as space:
            names = space.parts(path)
            if not names:
                raise _Refused("the workspace folder itself cannot be deleted; delete what is in "
                               "it instead")
            folder = space.open_folder(names[:-1])
            name, where = names[-1], shown(names)
            try:
                info = _lstat(name, folder)
                if info is None:
                    raise _Refused(f"{where} does not exist")
                if not stat.S_ISDIR(info.st_mode):
                    _refuse_hard_links(info, where, "deleted")
                    os.unlink(name, dir_fd=folder)
                    kind = "link" if stat.S_ISLNK(info.st_mode) else "file"
                    return f"Deleted the {kind} {where}."
                if recursive:
                    _check_tree(folder, names, where)
                    count = _remove_tree(folder, name, names)
                    return f"Deleted the folder {where} ({count} entries in all)."
                try:
                    os.rmdir(name, dir_fd=folder)
                except OSError as error:
                    if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise _Refused(f"{where} is a folder that is not empty: pass "
                                       "recursive=true to delete it with everything in it") from None
                    raise
                return f"Deleted the empty folder {where}."
            finally:
                os.close(folder)

    return _run(action)
