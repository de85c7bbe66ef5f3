"""One step at a time per subject: two Dagster runs that reach the same source's chain, gate,
mixture or training run (two sources' sensors fire together, both runs go downstream) take turns.

An exclusive ``flock`` on ``<factory folder>/locks/<name>.lock``: the kernel drops it when its
holder dies, so a killed run never blocks the next. The second run waits, then finds the work
done (every step is a no-op on inputs it has already taken in). This holds where Dagster's runs
share a machine, as the default run launcher's do; a deployment that runs them on several
machines sets a Dagster pool of the same name (docs/factory.md, "Running it under Dagster").
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path

from lakehouse.file_locks import locked


def exclusive(folder: Path, name: str, log=None) -> AbstractContextManager[None]:
    """Hold the lock ``name`` under ``folder`` for the block; wait for it if another run holds it."""
    on_wait = None if log is None else lambda: log(f"waiting for another run to finish its work on {name}")
    return locked(folder / "locks" / f"{name}.lock", wait=True, on_wait=on_wait)


def source_lock(source: str) -> str:
    """The lock a source's chain steps and its gate each hold while they run: a refresh run and the
    refine run its sensor started for the raw snapshot that refresh had just made take turns, step
    by step, and the second finds each step done (or acts on the gate's recorded decision)."""
    return f"source-{source}"
