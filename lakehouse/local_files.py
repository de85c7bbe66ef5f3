"""Writing a local file whole or not at all, and durably.

A rename publishes a file atomically, but not durably: after a power loss the new name can point
at a file whose bytes never reached the disk (the rename's metadata was written first), or the
rename itself can be lost. So a file is fsynced before the rename or commit that publishes it,
and its folder after, as databases do. ``sync_file`` and ``sync_folders`` serve writers that
cannot go through ``write_atomically`` (Spark tasks staging Parquet, torch's checkpoint writer).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from lakehouse.errors import InputError


def check_output_file(path: str | Path, option: str = "--output") -> Path:
    """``path`` if a file can be written there: refused (``InputError``) when it is a folder or its
    folder does not exist, so that a command says so before its work rather than after."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option} {path} is a folder: give a file's path")
    if not path.parent.is_dir():
        raise InputError(f"{option} {path}: the folder {path.parent} does not exist; create it first")
    return path


def write_atomically(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` beside ``path``, sync it, rename it into place and sync the folder: a reader,
    or a crash or power loss, never leaves or sees half a file (a rename within one folder is
    atomic on POSIX filesystems)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as out:
            out.write(data if isinstance(data, bytes) else data.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # never leave half a write behind, whatever stopped it
        raise
    sync_folders(path)


def sync_file(path: str | Path) -> None:
    """Flush a closed file's bytes to the disk (fsync acts on the file, whichever descriptor asks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folders(path: str | Path) -> None:
    """Make ``path``'s name durable: sync its folder and every folder above it, any of which may
    have been made for it. Folders this process may not open were not made by it: they are left."""
    folder = Path(os.path.abspath(path)).parent
    for each in (folder, *folder.parents):
        try:
            fd = os.open(each, os.O_RDONLY)
        except PermissionError:
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # a file system that cannot sync folders (some FUSE ones)
                raise
        finally:
            os.close(fd)
