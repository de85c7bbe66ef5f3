"""Filter: quality filters over a pinned document table, validated, then published.

    spark-submit pipelines/filter.py --input dedup.code --output filtered.code --config code
    factory filter --input raw.text@v3 --output filtered.text --config my-text.toml --tag v3

1. Spark tasks run the config's filters (``quality/``, plain Python) over the pinned input,
   one task per unit of its files (``read_units``: row ranges sized from the data, read with
   pyarrow in the task), writing one file per unit and output: the same snapshot gives the
   same files whatever the cores. Each document is kept or quarantined with the filter, the
   reason and the metric values. A filter that raises quarantines that one document as
   ``filter-error:<filter>``; the job goes on.
2. Kept documents are committed to the branch ``audit-<run-id>`` of the output table, which
   starts at main's head and holds exactly this run's kept documents: the output is the
   filtered input, replacing what main held before (older versions stay as snapshots and tags).
   Quarantined documents go straight to ``main`` of the quarantine table, tagged with the run
   id: they never reach training, and the record of what was refused should not depend on
   whether the rest passed.
3. Great Expectations checks the audited snapshot, this run's quarantine rows and the
   accounting (kept + quarantined = input, none both); the result (JSON and GX's HTML) is
   stored under ``<warehouse>/validation/<ns>/<table>/<run-id>/`` and named in the summary.
4. Only if every check passed, main moves to the audited snapshot, and only if main's head
   is still its ancestor (``lakehouse.publish``). Otherwise main is untouched, the branch and
   report stay, and the command exits non-zero saying why.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lakehouse.catalog import check_table_takes, ensure_table, load_table, resolve, snapshot_schema
from lakehouse.columns import DOCUMENT_COLUMNS
from lakehouse.commit import Run, snapshot_stats
from lakehouse.errors import InputError, ValidationFailedError
from lakehouse.faults import maybe_fail
from lakehouse.publish import Published, check_branch_free, publish, remove_branch, start_branch, tag_snapshot
from lakehouse.refs import PinnedRef, format_identifier, parse_identifier, quarantine_identifier, validate_tag_name
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
from pipelines.spark_session import read_snapshot, snapshot_files
from pipelines.staging import REPORT_SCHEMA, Target, staged_outputs
from quality.config import FilterConfig, filter_class, load_config
from quality.filter_task import VERDICT_FIELDS

log = logging.getLogger("factory.filter")

# Tasks per core a config's units of work are dealt into, which the scheduler hands to the first
# free core. Prose filters (word tokenizing) cost several times code filters a byte, and a unit's
# cost follows its text only roughly: with one task per core a text run left one core idle for a
# quarter of it (tasks of 25.7 s and 33.4 s), where four per core kept both busy. A Spark task
# costs about 0.1-0.2 s here, as much as a unit of code: code configs keep one task per core.
PROSE_TASKS_PER_CORE = 4

STAGE = "filter"
# Columns the filter stage adds to each row (quality.filter_task); an input must not have them.
_RESERVED = {name for name, _ in VERDICT_FIELDS} | {"stage", "run_id", "_count_key"}


@dataclass(frozen=True)
class FilterOptions:
    input: str  # NS.TABLE[@REF] of the documents to filter
    output: str  # NS.TABLE whose main becomes the filtered input
    config: str  # a filter config file, or the name of a shipped one (code, text)
    quarantine: str | None = None  # default: <namespace of output>.quarantine
    run_id: str | None = None
    tag: str | None = None  # tag the published snapshot with this name

    @property
    def output_id(self) -> tuple[str, ...]:
        return parse_identifier(self.output)

    @property
    def quarantine_id(self) -> tuple[str, ...]:
        return quarantine_identifier(self.output_id, self.quarantine)


@dataclass
class FilterRunResult:
    run_id: str
    output: str
    branch: str
    audited_snapshot_id: int
    quarantine_snapshot_id: int
    report: str  # URI of validation.json
    stats: dict[str, int] = field(default_factory=dict)
    published: Published | None = None
    already_committed: bool = False  # the run was already published: nothing was done
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each step this call ran


@dataclass
class _Job:
    """What the steps of one run share."""

    spark: SparkSession
    catalog: Catalog
    opts: FilterOptions
    config: FilterConfig
    run: Run
    source: Table
    pinned: PinnedRef
    output: Table
    quarantine: Table

    @property
    def branch(self) -> str:
        return f"audit-{self.run.run_id}"

    def reload(self) -> None:
        self.output = load_table(self.catalog, self.opts.output_id)
        self.quarantine = load_table(self.catalog, self.opts.quarantine_id)


def filter_documents(
    spark: SparkSession,
    catalog: Catalog,
    opts: FilterOptions,
    *,
    before_publish: Callable[[], None] | None = None,
) -> FilterRunResult:
    """Filter, validate and publish; raises ``ValidationFailedError`` or ``PublishRefusedError``.

    ``before_publish`` runs between validation and publishing (tests race a writer there).
    """
    job = _prepare(spark, catalog, opts)
    run_id = job.run.run_id
    output_id, quarantine_id = opts.output_id, opts.quarantine_id
    # What an earlier attempt of this run committed, each checked to be made with this command's
    # config, input and parameters: a retry finishes that run or is refused, never publishes another.
    audited = find_run_commits(catalog, job.run, [output_id], branch=job.branch)[output_id]
    done = find_run_commits(catalog, job.run, [output_id, quarantine_id])
    if done[output_id] is not None and done[quarantine_id] is not None:
        log.info("run %s is already published to %s; nothing to do", run_id, opts.output)
        result = _existing_result(job, done[output_id], done[quarantine_id])
        remove_branch(catalog, output_id, job.branch)  # in case the run died between publishing and this
        _tag(job, result)  # or between publishing and tagging
        return result
    if opts.tag and opts.tag in job.output.metadata.refs:
        raise InputError(f"{opts.output} already has a ref named {opts.tag!r}; choose another --tag")
    if audited is None:
        check_branch_free(job.output, job.branch, opts.output)

    seconds = {}
    quarantined = done[quarantine_id]
    if audited is None or quarantined is None:
        log.info("filter %s → %s with %s (run %s)", job.pinned, opts.output, job.config.path, run_id)
        with _timed(seconds, "filter"):
            quarantined, audited = _filter_and_commit(job, audited is None)
    result = FilterRunResult(
        run_id=run_id,
        output=opts.output,
        branch=job.branch,
        audited_snapshot_id=audited.snapshot_id,
        quarantine_snapshot_id=quarantined.snapshot_id,
        report=job.run.properties["factory.validation"],
        stats=snapshot_stats(audited),
        seconds=seconds,
    )

    # Validated in this process, every time: an audited snapshot left by a failed attempt is
    # checked again, never published on the strength of an earlier verdict.
    with _timed(seconds, "validate"):
        report = _validate(job, result)
    if not report.success:
        raise ValidationFailedError(
            f"{opts.output}: validation failed: {'; '.join(report.failures())}. main is unchanged; the audited "
            f"snapshot {result.audited_snapshot_id} stays on branch {job.branch}; report: {result.report}. "
            f"Fix the config or the data and run again with a new --run-id (this one stays bound to this config)."
        )
    if before_publish is not None:
        before_publish()
    maybe_fail("before-publish")
    with _timed(seconds, "publish"):
        result.published = publish(catalog, output_id, result.audited_snapshot_id)
        remove_branch(catalog, output_id, job.branch)
    _tag(job, result)
    return result


def _tag(job: _Job, result: FilterRunResult) -> None:
    if job.opts.tag:
        table = load_table(job.catalog, job.opts.output_id)
        tag_snapshot(table, PinnedRef(job.opts.output_id, result.audited_snapshot_id, None), job.opts.tag)


@contextlib.contextmanager
def _timed(seconds: dict[str, float], step: str) -> Iterator[None]:
    start = time.monotonic()
    try:
        yield
    finally:
        seconds[step] = round(time.monotonic() - start, 3)
        log.info("%s took %.1fs", step, seconds[step])


def _prepare(spark: SparkSession, catalog: Catalog, opts: FilterOptions) -> _Job:
    """Check the inputs and options, make the output tables, name the run."""
    config = load_config(opts.config)
    if opts.tag:
        validate_tag_name(opts.tag)
    source, pinned = resolve(catalog, opts.input)
    require_columns(source.schema(), DOCUMENT_COLUMNS, opts.input)
    clash = sorted(_RESERVED & {f.name for f in source.schema().fields})
    if clash:
        raise InputError(f"{opts.input} has column(s) {clash} that the filter stage adds; rename them first")
    if opts.output_id == pinned.identifier or opts.quarantine_id in (opts.output_id, pinned.identifier):
        raise InputError("--output, the quarantine table and --input must be three different tables")
    # Both checked before either is made: a refused run leaves no table behind.
    check_table_takes(catalog, opts.output_id, source.schema())
    check_table_takes(catalog, opts.quarantine_id, QUARANTINE_SCHEMA_WITH_METRICS)
    output = ensure_table(catalog, opts.output_id, source.schema())
    quarantine = ensure_table(catalog, opts.quarantine_id, QUARANTINE_SCHEMA_WITH_METRICS)
    run_id = opts.run_id or Run.new_id("filter")
    params = {
        "output": opts.output,
        "quarantine": format_identifier(opts.quarantine_id),
        "config": config.describe(),
        "tag": opts.tag,
    }
    properties = {
        "factory.filter-config-sha256": config.sha256,
        # Written after this commit, at this fixed place; main only ever reaches a snapshot
        # whose report there passed.
        "factory.validation": report_location(catalog, output, opts.output_id, run_id) + "/validation.json",
    }
    run = Run(job="filter", run_id=run_id, params=params, inputs=[pinned.as_input()], properties=properties)
    return _Job(spark, catalog, opts, config, run, source, pinned, output, quarantine)


def report_location(catalog: Catalog, table: Table, identifier: tuple[str, ...], run_id: str) -> str:
    """``<warehouse>/validation/<ns>/<table>/<run-id>`` (beside the table when the catalog names no warehouse)."""
    warehouse = catalog.properties.get("warehouse")
    if warehouse:
        return f"{warehouse.rstrip('/')}/validation/{'/'.join(identifier)}/{run_id}"
    return f"{table.location().rstrip('/')}/validation/{run_id}"


# --- filtering on Spark ----------------------------------------------------------------------


def _filter_and_commit(job: _Job, start_audit: bool) -> tuple[Snapshot, Snapshot]:
    """Filter on Spark; commit what the run has not yet committed: the quarantine rows to main,
    the kept documents to the audit branch (started afresh when ``start_audit``). Returns both snapshots."""
    targets = {
        "documents": Target.for_table(
            job.output,
            job.run.staging_prefix(job.output),
            file_schema(job.output, snapshot_schema(job.source, job.pinned.snapshot_id)),
        ),
        "quarantine": Target.for_table(
            job.quarantine,
            job.run.staging_prefix(job.quarantine),
            file_schema(job.quarantine, QUARANTINE_SCHEMA_WITH_METRICS),
            count_column="_count_key",
        ),
    }
    io_properties = targets["documents"].io_properties
    paths = snapshot_files(job.source, job.pinned.snapshot_id, job.pinned.table_name)
    units = plan_units(paths, io_properties, size_column="n_bytes")
    log.info("%d document file(s) in %d unit(s) of work", len(paths), len(units))
    # Each task runs every n-th unit. Files are named by unit, so the output is the same
    # whatever the number of tasks.
    tasks = max(1, min(len(units), _tasks_per_core(job.config) * job.spark.sparkContext.defaultParallelism))
    task = _filter_task(units, tasks, arrow_schema(snapshot_schema(job.source, job.pinned.snapshot_id)),
                        io_properties, job.config, job.run.run_id, targets)  # fmt: skip
    reports = job.spark.range(0, tasks, 1, tasks).mapInArrow(task, REPORT_SCHEMA).collect()
    written = coalesce_outputs(job.spark, staged_outputs(reports, targets), targets)
    kept, refused = written["documents"], written["quarantine"]
    stats = {"documents-in": kept.records + refused.records, "kept": kept.records, "quarantined": refused.records}
    stats.update(drop_stats(refused.counts))
    if start_audit:
        with release_staging_on_refusal(job.catalog, job.run, [job.opts.quarantine_id, job.opts.output_id]):
            start_branch(job.catalog, job.opts.output_id, job.branch, empty=True)
    quarantined, audited = commit_run(
        job.catalog,
        job.run,
        [RunOutput(job.opts.quarantine_id, refused.files), RunOutput(job.opts.output_id, kept.files, job.branch)],
        stats,
    )
    job.reload()
    return job.quarantine.snapshot_by_id(quarantined.snapshot_id), job.output.snapshot_by_id(audited.snapshot_id)


def _filter_task(
    units: list[ReadUnit],
    tasks: int,
    schema: pa.Schema,
    io_properties: dict[str, str],
    config: FilterConfig,
    run_id: str,
    targets: dict[str, Target],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What Spark task t runs: units t, t + tasks, …: read each, mark its documents, write both outputs."""
    with open(config.path, encoding="utf-8") as f:
        source = (f.read(), config.path, config.sha256)

    def task(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.read_units import read_unit
        from pipelines.staging import write_partition
        from quality.filter_task import chain_from_source, filter_batch, with_quarantine_columns

        chain = chain_from_source(*source)
        for batch in ids:
            for first in batch.column(0).to_pylist():
                for unit_id in range(first, len(units), tasks):
                    marked = (
                        with_quarantine_columns(filter_batch(chain, docs, QUARANTINE_RECORD_BYTES), STAGE, run_id)
                        for docs in read_unit(units[unit_id], schema, io_properties)
                    )
                    yield from write_partition(marked, targets, part=unit_id)

    return task


def _tasks_per_core(config: FilterConfig) -> int:
    prose = any(filter_class(name).uses_language for name in config.filters)
    return PROSE_TASKS_PER_CORE if prose else 1


def drop_stats(counts: dict[str, int]) -> dict[str, int]:
    """``filter\\treason`` counts → ``dropped.<filter>`` and ``dropped.<filter>.<reason>``."""
    stats: dict[str, int] = {}
    for key, n in sorted(counts.items()):
        name, _, reason = key.partition("\t")
        stats[f"dropped.{name}"] = stats.get(f"dropped.{name}", 0) + n
        stats[f"dropped.{name}.{reason}"] = n
    return stats


# --- validation ------------------------------------------------------------------------------


def _validate(job: _Job, result: FilterRunResult):
    from quality.validation import (
        accounting_checks,
        accounting_frame,
        document_checks,
        documents_frame,
        quarantine_checks,
        validate,
        write_report,
    )

    kept = read_snapshot(job.spark, job.output, result.audited_snapshot_id, f"{result.output}@{result.branch}")
    refused = read_snapshot(job.spark, job.quarantine, result.quarantine_snapshot_id, "quarantine")
    inputs = read_snapshot(job.spark, job.source, job.pinned.snapshot_id, job.pinned.table_name).select("doc_id")
    # Small projections, cached for the many Spark jobs GX runs (one or more per expectation).
    documents = documents_frame(kept).persist()
    refused = refused.where(F.col("run_id") == job.run.run_id).select("doc_id", "stage", "reason", "filter").persist()
    accounting = accounting_frame(inputs, documents, refused).persist()
    try:
        report = validate(
            {
                "documents": (documents, document_checks(job.config.n_bytes_bounds(), job.config.sources)),
                "quarantine": (refused, quarantine_checks(STAGE)),
                "accounting": (accounting, accounting_checks(result.stats["documents-in"])),
            }
        )
    finally:
        for frame in (documents, refused, accounting):
            frame.unpersist()
    write_report(
        report,
        result.report.rsplit("/", 1)[0],
        job.output.io.properties,
        run_id=job.run.run_id,
        table=result.output,
        audited_snapshot_id=result.audited_snapshot_id,
        input=job.pinned.as_input(),
        config_sha256=job.config.sha256,
        stats=result.stats,
    )
    return report


def _existing_result(job: _Job, published: Snapshot, quarantined: Snapshot) -> FilterRunResult:
    return FilterRunResult(
        run_id=job.run.run_id,
        output=job.opts.output,
        branch=job.branch,
        audited_snapshot_id=published.snapshot_id,
        quarantine_snapshot_id=quarantined.snapshot_id,
        report=published.summary.get("factory.validation", ""),
        stats=snapshot_stats(published),
        published=Published(job.opts.output, published.snapshot_id, None, already=True),
        already_committed=True,
    )


if __name__ == "__main__":  # `spark-submit pipelines/filter.py ARGS` is `factory filter ARGS` (docs/architecture.md)
    from factory_cli.main import run_command

    sys.exit(run_command("filter", sys.argv[1:], prog="filter.py"))
