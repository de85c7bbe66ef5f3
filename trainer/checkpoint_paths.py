"""Finding a run's checkpoints, without torch: ``<run_dir>/checkpoints/step-<N>/``, complete once
its ``COMPLETE`` marker is there (``trainer/checkpoint.py`` writes and reads them). What a
start refuses before torchrun starts (``trainer/resume.py``), ``factory lineage`` and the
orchestration's sensors need only this, so they do not pay for importing torch."""

from __future__ import annotations

import re
from pathlib import Path

from lakehouse.errors import ConfigError

COMPLETE = "COMPLETE"
# ASCII digits only: the writer makes no others, and a page builds links from the name.
_STEP_DIR = re.compile(r"step-([0-9]+)\Z")


def checkpoints_dir(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def step_dir(run_dir: Path, step: int) -> Path:
    """Step ``step``'s checkpoint folder, absolute and resolved: what its ``lineage.json`` records and
    a finished run names, valid from any folder (a relative ``run.dir`` means the one the run was
    started in)."""
    return (checkpoints_dir(run_dir) / f"step-{step}").resolve()


def step_of(path: Path) -> int | None:
    """The step a ``step-<N>`` folder holds; None for any other name."""
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every complete checkpoint, oldest first."""
    root = checkpoints_dir(run_dir)
    found = []
    for path in root.iterdir() if root.is_dir() else ():
        step = step_of(path)
        if step is not None and (path / COMPLETE).is_file():
            found.append((step, path))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> tuple[int, Path] | None:
    done = complete_checkpoints(run_dir)
    return done[-1] if done else None


def checkpoint_to_continue(run_dir: Path, resume: bool) -> Path | None:
    """The newest complete checkpoint a start into ``run_dir`` continues, for the caller to check
    the start against; None when there is none (a start, with or without ``--resume``, begins at
    step 0). A fresh start into a folder holding checkpoints is refused: its step folders would go
    among the earlier run's, and its metrics after them."""
    latest = latest_checkpoint(run_dir)
    if latest is None:
        return None
    if not resume:
        raise ConfigError(
            f"{run_dir} holds checkpoints of an earlier run: pass --resume to continue it, or choose another run.dir"
        )
    return latest[1]
