"""``evals.results``: every eval's metrics as lakehouse rows (docs/architecture.md, "Eval results").

Rows are staged as one Parquet file under the eval run's staging prefix and committed by the
commit protocol (``lakehouse/commit.py``): one snapshot per eval run, its ``factory.run-id`` the
eval run id, bound to the suite's options and the checkpoint (``lakehouse/run_binding.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo

from lakehouse.catalog import ensure_table
from lakehouse.columns import TARGET_COLUMN
from lakehouse.commit import CommitResult, Run, StagedFile
from lakehouse.run_binding import RunOutput, commit_run
from lakehouse.schemas import EVAL_RESULTS_SCHEMA, file_schema
from lakehouse.version import code_version

if TYPE_CHECKING:
    from evals.registry import Metric

RESULTS_TABLE = ("evals", "results")
_TARGET = "results"


def result_rows(
    *,
    run_dir: str,
    checkpoint: str,
    step: int,
    manifest_fingerprint: str,
    snapshot_ids: dict[str, int],
    suite: str,
    metrics: Sequence[Metric],
    eval_run_id: str,
) -> list[dict[str, Any]]:
    """One row per metric, in ``EVAL_RESULTS_SCHEMA``'s columns."""
    common = {
        "run_id": run_dir,
        "checkpoint": checkpoint,
        "step": step,
        "manifest_fingerprint": manifest_fingerprint,
        "snapshot_ids": json.dumps(snapshot_ids, sort_keys=True),
        "suite": suite,
        "code_version": code_version(),
        "eval_run_id": eval_run_id,
    }
    return [{**common, "metric": m.name, "value": float(m.value), "samples": int(m.samples)} for m in metrics]


def commit_results(catalog: Catalog, run: Run, rows: list[dict[str, Any]]) -> CommitResult:
    """Append ``rows`` to ``evals.results`` as run ``run``'s one snapshot (once per run id)."""
    from pipelines.staging import Target, write_partition

    table = ensure_table(catalog, RESULTS_TABLE, EVAL_RESULTS_SCHEMA)
    schema = file_schema(table, EVAL_RESULTS_SCHEMA)
    data = pa.Table.from_pylist(rows, schema=schema)
    data = data.append_column(TARGET_COLUMN, pa.array([_TARGET] * data.num_rows, pa.string()))
    # The Spark jobs' task writer, run here in the driver: same file naming, durability and clean-up.
    target = Target.for_table(table, run.staging_prefix(table), schema)
    reports = write_partition(iter(data.to_batches()), {_TARGET: target}, part=0)
    files = [StagedFile(r["path"], r["records"]) for batch in reports for r in batch.to_pylist()]
    (result,) = commit_run(catalog, run, [RunOutput(RESULTS_TABLE, files)], {"rows": len(rows)})
    return result


def checkpoint_results(catalog: Catalog, checkpoint: str) -> list[dict[str, Any]]:
    """The rows of ``evals.results`` about one checkpoint folder, by suite and metric."""
    if not catalog.table_exists(RESULTS_TABLE):
        return []
    table = catalog.load_table(RESULTS_TABLE)
    if table.current_snapshot() is None:
        return []
    rows = table.scan(row_filter=EqualTo("checkpoint", checkpoint)).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["suite"], r["metric"], r["eval_run_id"]))
