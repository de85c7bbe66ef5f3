"""``evals.samples``: every sample an eval generated or scored, one row each (docs/architecture.md,
"Eval results"), committed with the eval run's metrics (``evals/results.py: commit_eval``).

A row holds the task, the prompt, the completion, how it was judged (the sandbox's verdict, exit
reason, bounded stdout and stderr, duration) or scored, and how to reproduce it: the sampling
parameters and the seed, with which ``evals/generate.py: generate`` (one sample) gives the same
completion again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import And, EqualTo

from evals.registry import Sample
from evals.results import RESULTS_TABLE, SAMPLES_TABLE, checkpoint_results, eval_run_columns
from lakehouse.run_binding import run_snapshots


def sample_id(eval_run_id: str, task_id: str, sample_index: int) -> str:
    return hashlib.sha256(json.dumps([eval_run_id, task_id, sample_index]).encode()).hexdigest()[:32]


def sample_rows(
    *, eval_run_id: str, run_dir: str, checkpoint: str, step: int, suite: str, samples: Sequence[Sample]
) -> list[dict[str, Any]]:
    """One row per sample, in ``EVAL_SAMPLES_SCHEMA``'s columns."""
    common = eval_run_columns(run_dir=run_dir, checkpoint=checkpoint, step=step, suite=suite, eval_run_id=eval_run_id)
    return [
        {"sample_id": sample_id(eval_run_id, s.task_id, s.sample_index), **common, **dataclasses.asdict(s)}
        for s in samples
    ]


def checkpoint_samples(catalog: Catalog, checkpoint: str, suite: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``evals.samples`` about one checkpoint folder (of one suite), by suite, eval run,
    task (HumanEval/2 before HumanEval/10) and sample."""
    if not catalog.table_exists(SAMPLES_TABLE):
        return []
    table = catalog.load_table(SAMPLES_TABLE)
    if table.current_snapshot() is None:
        return []
    row_filter = EqualTo("checkpoint", checkpoint)
    if suite is not None:
        row_filter = And(row_filter, EqualTo("suite", suite))
    rows = table.scan(row_filter=row_filter).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["suite"], r["eval_run_id"], _natural(r["task_id"]), r["sample_index"]))


def eval_runs(catalog: Catalog, checkpoint: str) -> list[dict[str, Any]]:
    """Each eval run of the checkpoint in ``evals.results``: its snapshots of ``evals.results`` and
    ``evals.samples`` (None where it has none) and what its samples say, for ``factory lineage``."""
    runs: dict[str, dict[str, Any]] = {}
    for row in checkpoint_results(catalog, checkpoint):
        runs.setdefault(row["eval_run_id"], {"eval_run_id": row["eval_run_id"], "suite": row["suite"]})
    tallies: dict[str, list[dict[str, Any]]] = {}
    if runs and catalog.table_exists(SAMPLES_TABLE):
        table = catalog.load_table(SAMPLES_TABLE)
        if table.current_snapshot() is not None:
            scan = table.scan(
                row_filter=EqualTo("checkpoint", checkpoint),
                selected_fields=("eval_run_id", "passed", "exit_reason", "score"),
            )
            for row in scan.to_arrow().to_pylist():
                tallies.setdefault(row["eval_run_id"], []).append(row)
    for eval_run_id, found in runs.items():
        snapshots = run_snapshots(catalog, [RESULTS_TABLE, SAMPLES_TABLE], eval_run_id)
        found["results_snapshot"] = _snapshot_id(snapshots[RESULTS_TABLE])
        found["samples_snapshot"] = _snapshot_id(snapshots[SAMPLES_TABLE])
        found.update(tally(tallies.get(eval_run_id, [])))
    return sorted(runs.values(), key=lambda r: (r["suite"], r["eval_run_id"]))


def tally(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How many samples, how many passed, why their programs ended, their mean score."""
    judged = [r["passed"] for r in rows if r.get("passed") is not None]
    scores = [r["score"] for r in rows if r.get("score") is not None]
    reasons = Counter(r["exit_reason"] for r in rows if r.get("exit_reason"))
    return {
        "samples": len(rows),
        "passed": sum(judged) if judged else None,
        "exit_reasons": dict(sorted(reasons.items())),
        "mean_score": sum(scores) / len(scores) if scores else None,
    }


def format_tally(found: dict[str, Any]) -> str:
    """``4 samples, 1 passed (error 3, exit 1)``; ``164 samples, mean score 1.52``."""
    text = f"{found['samples']} sample(s)"
    if found["passed"] is not None:
        text += f", {found['passed']} passed"
    if found["exit_reasons"]:
        text += " (" + ", ".join(f"{reason} {n}" for reason, n in found["exit_reasons"].items()) + ")"
    if found["mean_score"] is not None:
        text += f", mean score {found['mean_score']:.4g}"
    return text


def _snapshot_id(snapshot) -> int | None:
    return None if snapshot is None else snapshot.snapshot_id


def _natural(text: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
