"""Few files from small inputs: a job's staged files combined to its tables' target size before
the commit (docs/architecture.md, "File sizes").

The filter and decontamination jobs write one file per unit of work, so the cores share the
work whatever the input's size; on a small input that is many small files (the demo's filtered
text held 58 documents in 19 files). Here the staged files of each table are cut, in order,
into runs of at most the table's target size (``lakehouse.file_sizes.consecutive_groups``), and
each run of two or more files is rewritten as one file (by the driver when there is little to
rewrite, ``DRIVER_MERGE_BYTES``; else in a Spark task per run); the small files are then
removed, and the job commits the combined ones.

Only the files' sizes and order decide the runs, and the units decide those, so the same input
gives the same files whatever the cores; the rows and their order (file by file, row group by
row group) are unchanged. A combined file is named after its run's first file, so the files'
path order, which readers follow, stays the order of the units.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import SparkSession

from lakehouse.combine import combine_files
from lakehouse.commit import StagedFile
from lakehouse.errors import CommitError
from lakehouse.file_sizes import consecutive_groups
from pipelines.staging import REPORT_SCHEMA, StagedOutput, Target

log = logging.getLogger(__name__)

_PART = re.compile(r"part-(\d+)-")
# Up to this many staged bytes to combine, the driver rewrites them itself; more, Spark tasks do.
DRIVER_MERGE_BYTES = 64 << 20


@dataclass(frozen=True)
class _Report:
    """A merge task's report row, as Spark's ``Row`` gives it (``REPORT_SCHEMA``)."""

    target: str
    path: str
    records: int
    counts: str
    bytes: int


@dataclass(frozen=True)
class _Merge:
    """Files of one target to rewrite as one, in this order."""

    target: str
    paths: tuple[str, ...]


def coalesce_outputs(
    spark: SparkSession, outputs: Mapping[str, StagedOutput], targets: Mapping[str, Target]
) -> dict[str, StagedOutput]:
    """``outputs`` with each table's consecutive small files combined into files of about its
    target size; row counts and counts per value are unchanged. Runs no Spark job when there is
    nothing to combine."""
    plans = {name: _groups(out, targets[name].file_bytes) for name, out in outputs.items()}
    merges = [_Merge(name, tuple(f.path for f in g)) for name, groups in plans.items() for g in groups if len(g) > 1]
    if not merges:
        return dict(outputs)
    task = _merge_task(merges, dict(targets))
    n = len(merges)
    to_merge = sum(outputs[m.target].sizes[p] for m in merges for p in m.paths)
    if to_merge <= DRIVER_MERGE_BYTES:
        # Little to rewrite (about 150 MB of text a CPU-second): here, without a Spark job's latency.
        rows = [_Report(**r) for batch in task(iter([pa.record_batch([pa.array(range(n))], ["id"])]))
                for r in batch.to_pylist()]  # fmt: skip
    else:
        rows = spark.range(0, n, 1, n).mapInArrow(task, REPORT_SCHEMA).collect()
    # Each task reports its merge's index in ``counts``: pair each run with its combined file.
    by_first = {merges[int(row.counts)].paths[0]: row for row in rows}
    combined: dict[str, StagedOutput] = {}
    for name, groups in plans.items():
        out = StagedOutput([], outputs[name].counts)
        for group in groups:
            if len(group) == 1:
                out.files.append(group[0])
                out.sizes[group[0].path] = outputs[name].sizes[group[0].path]
                continue
            row = by_first[group[0].path]
            if row.records != sum(f.records for f in group):  # a combined file holds exactly its run's rows
                raise CommitError(
                    f"combining {len(group)} staged files gave {row.records} rows, not their sum; nothing was committed"
                )
            out.files.append(StagedFile(row.path, row.records))
            out.sizes[row.path] = row.bytes
        combined[name] = out
    _remove(merges, targets)
    log.info("combined %d staged file(s) into %d", sum(len(o.files) for o in outputs.values()),
             sum(len(o.files) for o in combined.values()))  # fmt: skip
    return combined


def _groups(out: StagedOutput, target_bytes: int) -> list[list[StagedFile]]:
    return consecutive_groups(out.files, [out.sizes[f.path] for f in out.files], target_bytes)


def _merge_task(merges: list[_Merge], targets: dict[str, Target]):
    def task(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in ids:
            for i in batch.column(0).to_pylist():
                merge = merges[i]
                path, records, size = merge_files(merge.paths, targets[merge.target])
                report = {"target": merge.target, "path": path, "records": records, "counts": str(i), "bytes": size}
                yield pa.RecordBatch.from_pylist([report])

    return task


def merge_files(paths: Sequence[str], target: Target) -> tuple[str, int, int]:
    """Combine ``paths`` into one new file under ``target.prefix`` named after the first (so it
    sorts where they did); returns its path, rows and bytes."""
    found = _PART.search(paths[0].rsplit("/", 1)[-1])
    path = f"{target.prefix}/part-{found.group(1) if found else '00000'}-c-{uuid.uuid4().hex[:8]}.parquet"
    records, size = combine_files(paths, path, target.schema, target.io_properties, group_bytes=target.group_bytes)
    return path, records, size


def _remove(merges: Sequence[_Merge], targets: Mapping[str, Target]) -> None:
    """Remove the files that were combined (never committed); what stays, ``factory gc`` removes."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    for merge in merges:
        io = PyArrowFileIO(dict(targets[merge.target].io_properties))
        for path in merge.paths:
            with contextlib.suppress(Exception):
                io.delete(path)
