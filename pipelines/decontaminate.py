"""Decontaminate: remove documents that share a long n-gram with an eval set.

    spark-submit pipelines/decontaminate.py --input filtered.code --against humaneval --output decontaminated.code
    factory decontaminate --input filtered.code@v1 --against humaneval --output decontaminated.code --ngram 13

Spark tasks read the pinned input in units (``read_units``, as the filter job) and test each
document against the eval sets' n-grams (``quality/contamination.py``: 13-grams of normalised
words by default, as GPT-3 and datatrove). Clean documents are appended to the output's main;
contaminated ones go to the quarantine table's main with the reason ``contaminated``, the eval
set in ``filter`` and the suite, task id and shared n-gram in ``detail`` and ``metrics``. Both by
the commit protocol, one snapshot each, quarantine first (as the filter job): the summary counts
``documents-in``, ``kept``, ``quarantined`` and ``contaminated.<suite>``.

The run is bound to its input snapshot, the suites, the n-gram length and a sha256 of each eval
set's items (``factory.params``): a retry finishes the run, and the same run id against other
eval data is refused.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from lakehouse.catalog import ensure_table, resolve, snapshot_schema
from lakehouse.columns import DOCUMENT_COLUMNS
from lakehouse.commit import CommitResult, Run, existing_commits
from lakehouse.errors import InputError
from lakehouse.refs import format_identifier, parse_identifier
from lakehouse.run_binding import RunOutput, commit_run, find_run_commits
from lakehouse.schemas import QUARANTINE_RECORD_BYTES, QUARANTINE_SCHEMA_WITH_METRICS, arrow_schema, require_columns
from pipelines.read_units import ReadUnit, plan_units
from pipelines.spark_session import snapshot_files
from pipelines.staging import REPORT_SCHEMA, Target, staged_outputs
from quality.contamination import NGRAM, VERDICT_FIELDS, check_suites, eval_set_digests

log = logging.getLogger("factory.decontaminate")

STAGE = "decontaminate"
_RESERVED = {name for name, _ in VERDICT_FIELDS}


@dataclass(frozen=True)
class DecontaminateOptions:
    input: str  # NS.TABLE[@REF]
    against: Sequence[str]  # eval set names (quality.contamination.EVAL_SETS)
    output: str  # NS.TABLE the clean documents are appended to
    ngram: int = NGRAM
    quarantine: str | None = None  # default: <namespace of output>.quarantine
    run_id: str | None = None

    @property
    def output_id(self) -> tuple[str, ...]:
        return parse_identifier(self.output)

    @property
    def quarantine_id(self) -> tuple[str, ...]:
        return parse_identifier(self.quarantine) if self.quarantine else (*self.output_id[:-1], "quarantine")


@dataclass
class DecontaminateResult:
    run_id: str
    documents: CommitResult
    quarantine: CommitResult
    stats: dict[str, int] = field(default_factory=dict)
    already_committed: bool = False


def decontaminate(spark: SparkSession, catalog: Catalog, opts: DecontaminateOptions) -> DecontaminateResult:
    """Test every document of the pinned input against the eval sets; commit the clean ones and
    quarantine the rest."""
    suites = check_suites(opts.against)
    if opts.ngram < 1:
        raise InputError(f"--ngram must be at least 1, got {opts.ngram}")
    source, pinned = resolve(catalog, opts.input)
    require_columns(source.schema(), DOCUMENT_COLUMNS, opts.input)
    clash = sorted(_RESERVED & {f.name for f in source.schema().fields})
    if clash:
        raise InputError(f"{opts.input} has column(s) {clash} that decontamination adds; rename them first")
    out_id, quarantine_id = opts.output_id, opts.quarantine_id
    if out_id == pinned.identifier or quarantine_id in (out_id, pinned.identifier):
        raise InputError("--output, the quarantine table and --input must be three different tables")
    params = {
        "output": opts.output,
        "quarantine": format_identifier(quarantine_id),
        "against": list(suites),
        "ngram": opts.ngram,
        "eval-sets-sha256": eval_set_digests(suites),
    }
    run = Run("decontaminate", opts.run_id or Run.new_id("decontaminate"), params, [pinned.as_input()])
    done = find_run_commits(catalog, run, [quarantine_id, out_id])
    if all(done.values()):
        log.info("run %s is already committed to %s; nothing to do", run.run_id, opts.output)
        (refused, kept), stats = existing_commits(done)
        return DecontaminateResult(run.run_id, kept, refused, stats, already_committed=True)

    output = ensure_table(catalog, out_id, source.schema())
    require_columns(output.schema(), tuple(f.name for f in source.schema().fields), opts.output)
    quarantine = ensure_table(catalog, quarantine_id, QUARANTINE_SCHEMA_WITH_METRICS)
    targets = {
        "documents": Target.for_table(output, run.staging_prefix(output), arrow_schema(output.schema())),
        "quarantine": Target.for_table(
            quarantine, run.staging_prefix(quarantine), arrow_schema(QUARANTINE_SCHEMA_WITH_METRICS), "filter"
        ),
    }
    io_properties = targets["documents"].io_properties
    units = plan_units(snapshot_files(source, pinned.snapshot_id, pinned.table_name), io_properties)
    log.info("decontaminate %s against %s (%d-grams, %d unit(s), run %s)", pinned, ", ".join(suites),
             opts.ngram, len(units), run.run_id)  # fmt: skip
    # As the filter job: one task per core, each running every n-th unit, one file per unit.
    tasks = max(1, min(len(units), spark.sparkContext.defaultParallelism))
    schema = arrow_schema(snapshot_schema(source, pinned.snapshot_id))
    task = _task(units, tasks, schema, io_properties, suites, opts.ngram, run.run_id, targets)
    reports = spark.range(0, tasks, 1, tasks).mapInArrow(task, REPORT_SCHEMA).collect()
    written = staged_outputs(reports, targets)
    kept, refused = written["documents"], written["quarantine"]
    stats = {"documents-in": kept.records + refused.records, "kept": kept.records, "quarantined": refused.records}
    stats.update({f"contaminated.{suite}": refused.counts.get(suite, 0) for suite in suites})
    refused_commit, kept_commit = commit_run(
        catalog, run, [RunOutput(quarantine_id, refused.files), RunOutput(out_id, kept.files)], stats
    )
    return DecontaminateResult(run.run_id, kept_commit, refused_commit, stats)


def _task(
    units: list[ReadUnit],
    tasks: int,
    schema: pa.Schema,
    io_properties: dict[str, str],
    suites: tuple[str, ...],
    n: int,
    run_id: str,
    targets: dict[str, Target],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What Spark task t runs: units t, t + tasks, …: read each, mark its documents, write both outputs."""

    def task(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.read_units import read_unit
        from pipelines.staging import write_partition
        from quality.contamination import index_for, mark_batch

        index = index_for(suites, n)  # built from the installed eval sets, once per Python worker
        for batch in ids:
            for first in batch.column(0).to_pylist():
                for unit_id in range(first, len(units), tasks):
                    marked = (
                        mark_batch(index, docs, STAGE, run_id, QUARANTINE_RECORD_BYTES)
                        for docs in read_unit(units[unit_id], schema, io_properties)
                    )
                    yield from write_partition(marked, targets, part=unit_id)

    return task


if __name__ == "__main__":  # `spark-submit pipelines/decontaminate.py ARGS` is `factory decontaminate ARGS`
    from factory_cli.main import run_command

    sys.exit(run_command("decontaminate", sys.argv[1:], prog="decontaminate.py"))
