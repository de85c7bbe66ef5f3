"""An exclusive ``flock`` on a file, held for a block: one process at a time on a piece of work.

The kernel drops the lock when its holder dies, so a killed process never blocks the next; a
lock file left behind is harmless. It holds between processes of one machine (or of one NFS
client), which is where the callers' work is shared: a sweep's folder, a factory's folder.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock and the caller asked not to wait."""


@contextlib.contextmanager
def locked(path: Path, *, wait: bool, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if missing) for the block. Held by another process:
    ``wait`` waits for it (calling ``on_wait`` first), else ``LockHeld`` is raised at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise LockHeld(str(path)) from None
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
