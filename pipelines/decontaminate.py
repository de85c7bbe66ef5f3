"""Decontaminate: remove documents that share a long n-gram with an eval set.

    spark-submit pipelines/decontaminate.py --input filtered.code --against humaneval --output decontaminated.code
    factory decontaminate --input filtered.code@v1 --against humaneval --output decontaminated.code --ngram 13

Spark tasks read the pinned input in units (``read_units``, as the filter job) and test each
document against the eval sets' n-grams (``quality/contamination.py``: 13-grams of normalised
words by default, as GPT-3 and datatrove). The clean documents become the output: committed to
the branch ``audit-<run-id>`` (started empty at main's head), then main moves to it if main's
head is still its ancestor (``lakehouse.publish``, as the filter job, without its validation
step), so the output is the clean input, replacing what main held. Contaminated ones go to the
quarantine table's main with the reason ``contaminated``, the eval
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
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from lakehouse.catalog import check_table_takes, ensure_table, resolve, snapshot_schema
from lakehouse.columns import DOCUMENT_COLUMNS
from lakehouse.commit import CommitResult, Run, StagedFile, existing_commits
from lakehouse.errors import InputError
from lakehouse.publish import check_branch_free, publish, remove_branch, start_branch
from lakehouse.refs import PinnedRef, format_identifier, parse_identifier, quarantine_identifier
from lakehouse.run_binding import RunOutput, commit_run, find_run_commits, release_staging_on_refusal
from lakehouse.schemas import (
    QUARANTINE_RECORD_BYTES,
    QUARANTINE_SCHEMA_WITH_METRICS,
    arrow_schema,
    file_schema,
    require_columns,
)
from pipelines.coalesce import coalesce_outputs
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
    output: str  # NS.TABLE whose main becomes the clean documents
    ngram: int = NGRAM
    quarantine: str | None = None  # default: <namespace of output>.quarantine
    run_id: str | None = None

    @property
    def output_id(self) -> tuple[str, ...]:
        return parse_identifier(self.output)

    @property
    def quarantine_id(self) -> tuple[str, ...]:
        return quarantine_identifier(self.output_id, self.quarantine)


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
    branch = f"audit-{run.run_id}"
    # As the filter job: what an earlier attempt committed, checked to be this run's; a retry
    # finishes the run or is refused.
    audited = find_run_commits(catalog, run, [out_id], branch=branch)[out_id]
    done = find_run_commits(catalog, run, [quarantine_id, out_id])
    if all(done.values()):
        log.info("run %s is already committed to %s; nothing to do", run.run_id, opts.output)
        remove_branch(catalog, out_id, branch)  # in case the run died between publishing and this
        (refused, kept), stats = existing_commits(done)
        return DecontaminateResult(run.run_id, kept, refused, stats, already_committed=True)

    # Both checked before either is made: a refused run leaves no table behind.
    check_table_takes(catalog, out_id, source.schema())
    check_table_takes(catalog, quarantine_id, QUARANTINE_SCHEMA_WITH_METRICS)
    output = ensure_table(catalog, out_id, source.schema())
    require_columns(output.schema(), tuple(f.name for f in source.schema().fields), opts.output)
    quarantine = ensure_table(catalog, quarantine_id, QUARANTINE_SCHEMA_WITH_METRICS)
    if audited is None:
        check_branch_free(output, branch, opts.output)
    if audited is None or done[quarantine_id] is None:
        staged, stats = _mark_and_stage(spark, run, source, pinned, suites, opts.ngram, output, quarantine)
        if audited is None:  # the output is the clean input, replacing what main held (as the filter's)
            with release_staging_on_refusal(catalog, run, [quarantine_id, out_id]):
                start_branch(catalog, out_id, branch, empty=True)
        refused_commit, kept_commit = commit_run(
            catalog, run, [RunOutput(quarantine_id, staged[0]), RunOutput(out_id, staged[1], branch)], stats
        )
    else:  # both committed, main not yet moved: publish what was committed
        (refused_commit, kept_commit), stats = existing_commits({quarantine_id: done[quarantine_id], out_id: audited})
    publish(catalog, out_id, kept_commit.snapshot_id)
    remove_branch(catalog, out_id, branch)
    return DecontaminateResult(run.run_id, kept_commit, refused_commit, stats)


def _mark_and_stage(
    spark: SparkSession,
    run: Run,
    source: Table,
    pinned: PinnedRef,
    suites: tuple[str, ...],
    n: int,
    output: Table,
    quarantine: Table,
) -> tuple[tuple[list[StagedFile], list[StagedFile]], dict[str, int]]:
    """Run the tasks; return the staged files (quarantine, documents) and the run's counts."""
    targets = {
        "documents": Target.for_table(
            output, run.staging_prefix(output), file_schema(output, snapshot_schema(source, pinned.snapshot_id))
        ),
        "quarantine": Target.for_table(
            quarantine,
            run.staging_prefix(quarantine),
            file_schema(quarantine, QUARANTINE_SCHEMA_WITH_METRICS),
            "filter",
        ),
    }
    io_properties = targets["documents"].io_properties
    units = plan_units(snapshot_files(source, pinned.snapshot_id, pinned.table_name), io_properties, "n_bytes")
    log.info("decontaminate %s against %s (%d-grams, %d unit(s), run %s)", pinned, ", ".join(suites), n,
             len(units), run.run_id)  # fmt: skip
    # As the filter job: one task per core, each running every n-th unit, one file per unit.
    tasks = max(1, min(len(units), spark.sparkContext.defaultParallelism))
    schema = arrow_schema(snapshot_schema(source, pinned.snapshot_id))
    task = _task(units, tasks, schema, io_properties, suites, n, run.run_id, targets)
    reports = spark.range(0, tasks, 1, tasks).mapInArrow(task, REPORT_SCHEMA).collect()
    written = coalesce_outputs(spark, staged_outputs(reports, targets), targets)
    kept, refused = written["documents"], written["quarantine"]
    stats = {"documents-in": kept.records + refused.records, "kept": kept.records, "quarantined": refused.records}
    stats.update({f"contaminated.{suite}": refused.counts.get(suite, 0) for suite in suites})
    return (refused.files, kept.files), stats


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
