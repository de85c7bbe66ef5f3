"""The ``rl.rollouts`` table: every rollout of an RL run, one row each (docs/rl-training.md, "The rollouts table").

Rank 0 of the learner buffers the rows of the steps since the last checkpoint and commits them
with the next checkpoint (and at the end), one snapshot per commit, through the commit protocol
(``lakehouse/commit.py``). Each commit's run id names the RL run and its range of steps, so a run
resumed from its last checkpoint makes the same rows again and a commit that already landed is
not made twice: the table holds each (run, kind, step, task, sample) once.

    recorder = RolloutRecorder(catalog, run_id, run_dir, inputs)
    recorder.add(rows)                    # rows of rollout_row's shape
    lineage = recorder.commit(first, last)
    rows = run_rollouts(catalog, run_id)  # back, in order
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from evals.results import stage_rows
from lakehouse.commit import Run
from lakehouse.refs import format_identifier
from lakehouse.run_binding import commit_run
from lakehouse.version import code_version
from rl.scored import Scored

ROLLOUTS_TABLE = ("rl", "rollouts")
KINDS = ("train", "heldout")
JOB = "rl-train"

ROLLOUTS_SCHEMA = Schema(
    NestedField(1, "rollout_id", StringType(), required=True, doc="hash of run_id, kind, step, task_id, sample_index"),
    NestedField(2, "run_id", StringType(), required=True, doc="the RL run: a hash of its config and start checkpoint"),
    NestedField(3, "run_dir", StringType(), required=True, doc="the RL run's folder, absolute"),
    NestedField(4, "kind", StringType(), required=True, doc="train (a sampled rollout) or heldout (greedy eval)"),
    NestedField(5, "step", LongType(), required=True, doc="train: the step (from 1); heldout: steps trained before"),
    NestedField(6, "task_id", StringType(), required=True, doc="the task (rl.tasks' task_id, or a family's id)"),
    NestedField(7, "sample_index", LongType(), required=True, doc="0 .. group_size-1 within the task's group"),
    NestedField(8, "completion", StringType(), required=True, doc="what the policy wrote, cut at the stop string"),
    NestedField(9, "reward", DoubleType(), required=True, doc="share of the task's tests that passed, in [0, 1]"),
    NestedField(10, "passed", LongType(), required=True, doc="tests that passed"),
    NestedField(11, "total", LongType(), required=True, doc="the task's tests"),
    NestedField(12, "outcome", StringType(), required=True, doc="passed, partial, failed, timeout, syntax-error..."),
    NestedField(13, "output", StringType(), required=True, doc="end of what the tests printed, bounded"),
    NestedField(14, "duration_s", DoubleType(), required=True, doc="the sandboxed run's wall time; 0: nothing ran"),
    NestedField(15, "seed", LongType(), required=False, doc="the sampling seed of the task's group; null: greedy"),
    NestedField(16, "code_version", StringType(), required=True, doc="the learner's code (lakehouse/version.py)"),
)


def rollout_row(
    kind: str, step: int, task_id: str, sample_index: int, completion: str, scored: Scored, seed: int | None
) -> dict[str, Any]:
    """One rollout, without the run's columns (``RolloutRecorder`` adds them)."""
    return {
        "kind": kind,
        "step": step,
        "task_id": task_id,
        "sample_index": sample_index,
        "completion": completion,
        "reward": float(scored.reward),
        "passed": scored.passed,
        "total": scored.total,
        "outcome": scored.outcome,
        "output": scored.output,
        "duration_s": float(scored.duration_s),
        "seed": seed,
    }


def _order(row: dict[str, Any]) -> tuple:
    return row["step"], KINDS.index(row["kind"]), row["task_id"], row["sample_index"]


class RolloutRecorder:
    """Rows buffered on rank 0 between checkpoints, committed with each."""

    def __init__(self, catalog: Catalog, run_id: str, run_dir: str, inputs: list[dict[str, Any]]):
        self.catalog, self.run_id, self.run_dir, self.inputs = catalog, run_id, run_dir, inputs
        self.rows: list[dict[str, Any]] = []

    def add(self, rows: list[dict[str, Any]]) -> None:
        self.rows.extend(rows)

    def commit(self, first: int, last: int) -> dict[str, Any] | None:
        """Commit the rows of the steps after ``first`` up to ``last`` (the step-0 evaluation in the
        first range) as one snapshot; the lineage of the commit, None when there was nothing to commit.
        The run id holds the range: a resumed run commits the same range again, which is then a no-op."""
        rows = sorted(self.rows, key=_order)
        self.rows = []
        if not rows:
            return None
        common = {"run_id": self.run_id, "run_dir": self.run_dir, "code_version": code_version()}
        rows = [{"rollout_id": rollout_id(self.run_id, row), **common, **row} for row in rows]
        run = Run(
            job=JOB,
            run_id=f"{self.run_id}.steps-{first}-{last}",
            params={"run_dir": self.run_dir, "first_step": first, "last_step": last},
            inputs=self.inputs,
            properties={"factory.rl-run-id": self.run_id},
        )
        staged = stage_rows(self.catalog, run, ROLLOUTS_TABLE, ROLLOUTS_SCHEMA, rows)
        (result,) = commit_run(self.catalog, run, [staged], {"rows": len(rows)})
        return {"table": format_identifier(ROLLOUTS_TABLE), "snapshot_id": result.snapshot_id, "run_id": self.run_id}


def rollout_id(run_id: str, row: dict[str, Any]) -> str:
    key = [run_id, row["kind"], row["step"], row["task_id"], row["sample_index"]]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32]


def run_rollouts(catalog: Catalog, run_id: str, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """The rows of one RL run (at a snapshot of the table; default its current one), in order."""
    if not catalog.table_exists(ROLLOUTS_TABLE):
        return []
    table = catalog.load_table(ROLLOUTS_TABLE)
    if table.current_snapshot() is None:
        return []
    rows = table.scan(row_filter=EqualTo("run_id", run_id), snapshot_id=snapshot_id).to_arrow().to_pylist()
    return sorted(rows, key=_order)
