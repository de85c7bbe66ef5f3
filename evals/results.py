"""``evals.results``: every eval's metrics as lakehouse rows (docs/architecture.md, "Eval results").

An eval run commits its metrics to ``evals.results`` and its samples (``evals/samples.py``) to
``evals.samples``: each table's rows staged as one Parquet file under the eval run's staging
prefix and committed by the commit protocol (``lakehouse/commit.py``) as one run with two
outputs: one snapshot per table, each with the eval run id as ``factory.run-id``, bound to the
suite's options and the checkpoint (``lakehouse/run_binding.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema

from lakehouse.catalog import ensure_table
from lakehouse.columns import TARGET_COLUMN
from lakehouse.commit import CommitResult, Run, StagedFile
from lakehouse.run_binding import RunOutput, commit_run
from lakehouse.schemas import EVAL_RESULTS_SCHEMA, EVAL_SAMPLES_SCHEMA, file_schema
from lakehouse.version import code_version

if TYPE_CHECKING:
    from evals.registry import Metric

RESULTS_TABLE = ("evals", "results")
SAMPLES_TABLE = ("evals", "samples")
_TARGET = "rows"


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
        **eval_run_columns(run_dir=run_dir, checkpoint=checkpoint, step=step, suite=suite, eval_run_id=eval_run_id),
        "manifest_fingerprint": manifest_fingerprint,
        "snapshot_ids": json.dumps(snapshot_ids, sort_keys=True),
    }
    return [{**common, "metric": m.name, "value": float(m.value), "samples": int(m.samples)} for m in metrics]


def eval_run_columns(*, run_dir: str, checkpoint: str, step: int, suite: str, eval_run_id: str) -> dict[str, Any]:
    """The columns every row of an eval run has, in ``evals.results`` and ``evals.samples`` alike."""
    return {
        "run_id": run_dir,
        "checkpoint": checkpoint,
        "step": step,
        "suite": suite,
        "code_version": code_version(),
        "eval_run_id": eval_run_id,
    }


def commit_eval(
    catalog: Catalog, run: Run, results: list[dict[str, Any]], samples: list[dict[str, Any]]
) -> tuple[CommitResult, CommitResult | None]:
    """Commit eval run ``run``: ``samples`` to ``evals.samples`` (none: no snapshot there), then
    ``results`` to ``evals.results``; once per run id. The results last: they are what says the
    run is done (``evals/run.py``), so a retry after a failure between the two commits runs the
    suite again and commits only the results (``commit_run``), and results never lack their samples.
    Returns the results' commit and the samples', if any."""
    outputs = [stage_rows(catalog, run, SAMPLES_TABLE, EVAL_SAMPLES_SCHEMA, samples)] if samples else []
    outputs.append(stage_rows(catalog, run, RESULTS_TABLE, EVAL_RESULTS_SCHEMA, results))
    committed = commit_run(catalog, run, outputs, {"results": len(results), "samples": len(samples)})
    return committed[-1], committed[0] if samples else None


def stage_rows(
    catalog: Catalog, run: Run, identifier: tuple[str, ...], schema: Schema, rows: list[dict[str, Any]]
) -> RunOutput:
    """``rows`` written as one Parquet file under the run's staging prefix of ``identifier``."""
    from pipelines.staging import Target, write_partition

    table = ensure_table(catalog, identifier, schema)
    arrow_schema = file_schema(table, schema)
    data = pa.Table.from_pylist(rows, schema=arrow_schema)
    data = data.append_column(TARGET_COLUMN, pa.array([_TARGET] * data.num_rows, pa.string()))
    # The Spark jobs' task writer, run here in the driver: same file naming, durability and clean-up.
    target = Target.for_table(table, run.staging_prefix(table), arrow_schema)
    reports = write_partition(iter(data.to_batches()), {_TARGET: target}, part=0)
    return RunOutput(identifier, [StagedFile(r["path"], r["records"]) for batch in reports for r in batch.to_pylist()])


def checkpoint_results(catalog: Catalog, checkpoint: str) -> list[dict[str, Any]]:
    """The rows of ``evals.results`` about one checkpoint folder, by suite and metric."""
    if not catalog.table_exists(RESULTS_TABLE):
        return []
    table = catalog.load_table(RESULTS_TABLE)
    if table.current_snapshot() is None:
        return []
    rows = table.scan(row_filter=EqualTo("checkpoint", checkpoint)).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["suite"], r["metric"], r["eval_run_id"]))
