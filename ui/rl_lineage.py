"""An RL checkpoint's ``rl`` lineage (rl/learner.py ``lineage_record``) as its page shows it: the
starting checkpoint (linked when it is under the UI's folders), the tasks' table snapshot and the
raw snapshots its build read, the ``rl.rollouts`` snapshot and run, and the config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.commit import recorded_inputs
from ui.checkpoints import Checkpoint, Labels
from ui.sources import Sources


@dataclass(frozen=True)
class RLLineage:
    start: str  # the starting checkpoint's folder, as the run was given it
    start_step: int | None
    start_at: Checkpoint | None  # the same checkpoint under the UI's folders, if it is
    start_was_rl: bool  # the start was itself an RL checkpoint
    tasks: dict[str, Any]  # source, table, snapshot_id, tasks, heldout... (rl/task_source.py)
    tasks_built_from: list[dict[str, Any]]  # the raw snapshots the tasks' build read
    rollouts: dict[str, Any] | None  # table, snapshot_id, run_id
    config: dict[str, Any]


def rl_lineage(sources: Sources, lineage: dict[str, Any]) -> RLLineage | None:
    """The ``rl`` section of a checkpoint's lineage.json, checked first (``rl.lineage.check_rl_lineage``);
    None for a checkpoint of pre-training."""
    rl = lineage.get("rl")
    if not isinstance(rl, dict):
        return None
    start, tasks = rl.get("start") or {}, rl.get("tasks") or {}
    folder = str(start.get("checkpoint", ""))
    at = Labels(sources).checkpoint(str(Path(folder).resolve())) if folder else None
    return RLLineage(
        start=folder,
        start_step=start.get("step"),
        start_at=at,
        start_was_rl=bool(start.get("rl")),
        tasks=tasks,
        tasks_built_from=_inputs(tasks.get("inputs")),
        rollouts=rl.get("rollouts"),
        config=rl.get("config") or {},
    )


def _inputs(recorded: str | None) -> list[dict[str, Any]]:
    """The table inputs of the tasks' build, recorded as its snapshot's ``factory.inputs`` JSON."""
    return [e for e in recorded_inputs(recorded, "rl.tasks.inputs") if "table" in e]
