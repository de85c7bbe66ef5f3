"""Named fault points, so tests can crash, hold or fail a real job at a chosen moment.

- ``FACTORY_FAIL_AT=<point>``: the process dies abruptly there, as a killed executor or driver
  would: no ``finally`` blocks, no cleanup.
- ``FACTORY_PAUSE_AT=<point>:<folder>``: the process creates ``<folder>/paused`` there and waits
  until ``<folder>/resume`` exists, so a test can act while a job is held mid-way. Several
  ``<point>:<folder>`` pairs may be given, separated by ``;``, to hold a process more than once.
- ``FACTORY_KILL_ONCE_AT=<point>:<file>``: the first process to get there (of all processes,
  e.g. Spark task attempts) creates ``<file>`` and dies abruptly, as a lost executor would, with no
  chance to clean up; later ones pass. A task that fails once and succeeds on its retry.

Unset, each costs a few dict lookups.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ENV = "FACTORY_FAIL_AT"
PAUSE_ENV = "FACTORY_PAUSE_AT"
KILL_ONCE_ENV = "FACTORY_KILL_ONCE_AT"


def maybe_fail(point: str) -> None:
    """Die or pause here if the environment names ``point`` (see the module's doc)."""
    if os.environ.get(ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
    folder = _target(PAUSE_ENV, point)
    if folder is not None:
        Path(folder, "paused").touch()
        while not Path(folder, "resume").exists():
            time.sleep(0.1)
    marker = _target(KILL_ONCE_ENV, point)
    if marker is not None and _first_here(marker):
        os.kill(os.getpid(), signal.SIGKILL)


def _first_here(marker: str) -> bool:
    """True for the first process of all to create ``marker``."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _target(env: str, point: str) -> str | None:
    """The path after ``<point>:`` in ``$env`` (one of its ``;``-separated pairs), if it names ``point``."""
    for pair in os.environ.get(env, "").split(";"):
        named, _, path = pair.partition(":")
        if named == point and path:
            return path
    return None
