"""``experiments.trials``: one row per trial of a sweep, ablation or mixture search.

Each row is committed by itself through the commit protocol (``lakehouse.commit``), as the run
``<sweep id>.<trial id>`` of job ``trial``: staged under that run's own prefix, one snapshot,
committed once. A sweep that is resumed, or whose driver records a trial twice, adds no second
row. Per-component losses and the parameters are JSON strings rather than Iceberg maps: a
parameter may be a number, a string or a whole weight vector, and a JSON object keeps its type
and order in any reader (Spark, DuckDB, pandas) without a schema change per sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from lakehouse.commit import CommitResult, Run
from lakehouse.rows import commit_rows, decode_json

TRIALS_TABLE = ("experiments", "trials")
JOB = "trial"
STATUSES = ("completed", "stopped", "failed")

TRIALS_SCHEMA = Schema(
    NestedField(1, "sweep_id", StringType(), required=True, doc="the sweep, ablation or mixture search"),
    NestedField(2, "trial_id", StringType(), required=True, doc="Ray Tune's trial id, unique in the sweep"),
    NestedField(3, "kind", StringType(), required=True, doc="sweep, ablate, ladder or mix-search"),
    NestedField(4, "params", StringType(), required=True, doc="JSON object: the trial's config keys and values"),
    NestedField(5, "run_dir", StringType(), required=True, doc="the trial's training run directory"),
    NestedField(6, "manifest_fingerprint", StringType(), required=False, doc="the manifest it trained on"),
    NestedField(7, "status", StringType(), required=True, doc="completed, stopped (early, by ASHA) or failed"),
    NestedField(8, "metric", DoubleType(), required=False, doc="the sweep's target: weighted final held-out loss"),
    NestedField(9, "final_loss", StringType(), required=False, doc="JSON {component: last held-out loss}"),
    NestedField(10, "best_loss", StringType(), required=False, doc="JSON {component: lowest held-out loss}"),
    NestedField(11, "tokens_seen", LongType(), required=False, doc="training tokens consumed"),
    NestedField(12, "wall_seconds", DoubleType(), required=False, doc="launch to exit of the training run"),
    NestedField(13, "loss_curve", StringType(), required=False, doc="JSON [[step, train loss], …] (≤ 200 points)"),
    NestedField(14, "error", StringType(), required=False, doc="why a failed trial failed (its last lines)"),
    NestedField(15, "finished_at", StringType(), required=True, doc="UTC, ISO 8601"),
)


def trial_run_id(sweep_id: str, trial_id: str) -> str:
    return f"{sweep_id}.{trial_id}"[:128]


def commit_trial(catalog: Catalog, row: Mapping[str, Any]) -> CommitResult | None:
    """Commit ``row`` as its own snapshot of ``experiments.trials``; None if it was already there
    (a resumed sweep, or the driver's second look)."""
    run = Run(
        job=JOB,
        run_id=trial_run_id(row["sweep_id"], row["trial_id"]),
        params={"sweep_id": row["sweep_id"], "trial_id": row["trial_id"], "kind": row["kind"]},
        inputs=[],
    )
    return commit_rows(catalog, TRIALS_TABLE, TRIALS_SCHEMA, run, [row])


def read_trials(catalog: Catalog, sweep_id: str) -> list[dict[str, Any]]:
    """The rows of one sweep, JSON columns decoded."""
    table = _trials(catalog)
    if table is None:
        return []
    rows = table.scan(row_filter=EqualTo("sweep_id", sweep_id)).to_arrow().to_pylist()
    return sorted(decode_json(rows, ("params", "final_loss", "best_loss", "loss_curve")), key=lambda r: r["trial_id"])


def sweep_ids(catalog: Catalog) -> list[str]:
    """Every sweep, ablation and mixture search with a row in the table, sorted."""
    table = _trials(catalog)
    if table is None:
        return []
    return sorted(set(table.scan(selected_fields=("sweep_id",)).to_arrow().column("sweep_id").to_pylist()))


def _trials(catalog: Catalog) -> Table | None:
    """The table, or None before any sweep has recorded a trial."""
    try:
        return catalog.load_table(TRIALS_TABLE)
    except NoSuchTableError:
        return None
