"""Finding the processes a test left behind: only this test's own descendants, never another
session's programs that happen to run on the same machine at the same time."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """This process adopts its orphaned descendants meanwhile, so that a process that escaped the
    tree it was started in (a double fork) is still found among them."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def descendants_running(*markers: bytes) -> list[int]:
    """This process's descendants whose command line holds every one of ``markers``."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                commands[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold ")"
    found = []
    for pid, command in commands.items():
        ancestor = parents.get(pid)
        while ancestor and ancestor != os.getpid():
            ancestor = parents.get(ancestor)
        if ancestor == os.getpid() and all(m in command for m in markers):
            found.append(pid)
    return found
