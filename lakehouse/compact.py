"""``factory compact``: a table's small data files rewritten as fewer, in one Iceberg ``replace``
snapshot (docs/architecture.md, "File sizes").

The files of the branch head smaller than ``SMALL_FRACTION`` of the table's target size are
packed first-fit, in path order, into groups of at most the target (``file_sizes``); each group
of two or more becomes one file holding its files' rows, in order. A file whose row groups are far
past the table's row group size (``row_groups``; a file written before it, or by another engine)
is rewritten alone, so a compacted table has the layout the jobs write. One snapshot then removes the
old files and adds the new ones, with the operation ``replace`` (same rows, other files) and the
summary of a run like any job's: ``factory.job=compact``, its run id, and as its input the
snapshot it compacted, so ``factory lineage`` walks through it to the runs that made the data.

- A table whose small files cannot be combined (none, or any two add up past the target), and
  whose row groups are all within the size, is left alone: compacting a compacted table is a
  no-op.
- Nothing changes until the one commit: a failure before it leaves the table as it was (the new
  files are staged under the run's folder, for ``factory gc``); the old files stay, since older
  snapshots still reference them.
- A retry with the same ``--run-id`` after the commit finds it and does nothing; without one,
  the table is compact by then and it does nothing either. The run id is bound to the job and
  its parameters (branch, target) as every job's: another job's run id is refused, never taken
  for this compaction done.
- Another writer committing meanwhile is fine (its files stay); one that removed a file being
  compacted makes the commit refuse, with nothing committed.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.io.pyarrow import parquet_file_to_data_file
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from sqlalchemy.exc import OperationalError

from lakehouse import lease
from lakehouse.catalog import load_table
from lakehouse.combine import combine_files
from lakehouse.commit import MAIN_BRANCH, Run, file_key, find_run_snapshot, snapshot_stats
from lakehouse.errors import CommitError, InputError
from lakehouse.faults import maybe_fail
from lakehouse.file_sizes import first_fit_groups, is_small, target_file_bytes
from lakehouse.refs import PinnedRef, format_identifier
from lakehouse.row_groups import row_group_bytes
from lakehouse.run_binding import check_binding

log = logging.getLogger(__name__)

JOB = "compact"
_RETRYABLE = (CommitFailedException, OperationalError)
# A row group of several rows this many times the table's row group size is another layout's (the
# writer closes a group before it passes the size; Parquet's encoding adds a little to it).
RELAYOUT_FACTOR = 2


@dataclass(frozen=True)
class CompactResult:
    table: str
    snapshot_id: int | None  # the replace snapshot; None when there was nothing to combine
    files_before: int  # in the branch head the snapshot replaced files of (another writer's included)
    files_after: int  # in the snapshot
    files_rewritten: int  # old files combined into new ones
    records_rewritten: int
    already: bool  # nothing was done: already compact, or this run id already committed


def compact_table(
    catalog: Catalog,
    identifier: tuple[str, ...],
    *,
    run_id: str | None = None,
    branch: str = MAIN_BRANCH,
    max_attempts: int = 8,
) -> CompactResult:
    """Combine the small data files of ``branch``'s head into files of the table's target size,
    as one ``replace`` snapshot; see the module's doc for what is guaranteed."""
    name = format_identifier(identifier)
    table = load_table(catalog, identifier)
    target = target_file_bytes(table.properties)
    run_id = run_id or Run.new_id(JOB)
    params = {"target-file-size-bytes": target, "branch": branch}
    done = find_run_snapshot(table, run_id, branch)
    if done is not None:
        # Only this compaction's own snapshot means done: another job's run id, or this one's with
        # another branch or target, is refused as every job refuses it (RunConflictError).
        check_binding(Run(JOB, run_id, params, []), done, identifier, branch=branch, inputs=False)
        return _result(name, done, already=True)
    if branch not in table.metadata.refs:
        if branch == MAIN_BRANCH:  # a table never written: nothing to do
            return CompactResult(name, None, 0, 0, 0, 0, already=True)
        raise InputError(f"{name} has no branch {branch!r}; `factory snapshots {name}` lists its refs")
    if table.metadata.refs[branch].snapshot_ref_type != "branch":
        raise InputError(f"{name}'s {branch!r} is a tag: a snapshot is committed to a branch only; name one")
    head = table.snapshot_by_id(table.metadata.refs[branch].snapshot_id)
    files = live_data_files(table, head, name)
    groups = plan_groups(table, files, target)
    if not groups:
        log.info("%s: %d file(s), none to combine (target %d bytes)", name, len(files), target)
        return CompactResult(name, None, len(files), len(files), 0, 0, already=True)

    run = Run(
        job=JOB,
        run_id=run_id,
        params=params,
        inputs=[{**PinnedRef(identifier, head.snapshot_id, None).as_input(), "role": "compacted"}],
    )
    prefix = run.staging_prefix(table)  # takes the folder's lease: gc leaves it alone meanwhile
    written: list[str] = []
    try:
        for i, group in enumerate(groups):
            dest = f"{prefix}/part-{i:05d}-c-{uuid.uuid4().hex[:8]}.parquet"
            schema, codec, _, _ = _footer(table, group[0])
            sources = [f.file_path for f in group]
            records, _ = combine_files(
                sources, dest, schema, table.io.properties, codec, row_group_bytes(table.properties)
            )
            written.append(dest)
            if records != sum(f.record_count for f in group):
                raise CommitError(f"{name}: combining {len(group)} files gave {records} rows, not their sum")
        maybe_fail("compact-before-commit")
        snapshot_id, already = _commit(catalog, identifier, run, groups, written, max_attempts)
    except (CommitError, OSError, ValueError, KeyboardInterrupt):
        # Known not to have committed: the new files are nobody's. (Another error may have left
        # the commit's outcome unknown: then the files stay for gc, which keeps referenced ones.)
        _discard(table, written)
        raise
    finally:
        lease.release(prefix)
    log.info("%s: replaced %d small file(s) by %d in snapshot %s", name, sum(map(len, groups)), len(written),
             snapshot_id)  # fmt: skip
    # Counted from the committed snapshot, not the listing planned from: a writer that appended
    # meanwhile added files the replace snapshot holds too.
    return _result(name, load_table(catalog, identifier).snapshot_by_id(snapshot_id), already=already)


def data_snapshot(table: Table, snapshot: Snapshot) -> Snapshot:
    """The snapshot whose summary says how ``snapshot``'s rows were made: ``snapshot`` itself, or,
    through compactions (``replace``: same rows as the parent), the one they compacted."""
    while snapshot.summary is not None and snapshot.summary.operation == Operation.REPLACE:
        parent = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
        if parent is None:
            break
        snapshot = parent
    return snapshot


def live_data_files(table: Table, snapshot: Snapshot, name: str) -> list[DataFile]:
    """The data files ``snapshot`` reads, in path order; refuses a table with delete files, whose
    rows depend on more than its data files."""
    files = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.data_file.content != DataFileContent.DATA:
                raise InputError(
                    f"{name} has delete files (row-level deletes); factory compact rewrites only data files"
                )
            files.append(entry.data_file)
    return sorted(files, key=lambda f: f.file_path)


def plan_groups(table: Table, files: Sequence[DataFile], target: int) -> list[list[DataFile]]:
    """The groups of files to rewrite: groups of two or more small files with the same Parquet
    schema and codec (a table whose schema evolved holds files of each version: each is combined
    with its own, and written with its codec), and, alone, each other file whose row groups are
    far past the table's row group size (written before ``lakehouse.row_groups``, or by another
    engine), so that a compacted table has the layout the jobs write.

    Files are packed by their data bytes, without their footers: a combined file holds its files'
    rows re-encoded alike, and one footer, so its data bytes are the sum of theirs, and the
    first-fit packing leaves nothing to combine a second time however small the files."""
    too_big = RELAYOUT_FACTOR * row_group_bytes(table.properties)
    with ThreadPoolExecutor(8) as pool:  # one footer read each: on an object store, a request each
        footers = list(pool.map(lambda f: _footer(table, f), files))
    alike: dict[tuple[pa.Schema, str], list[tuple[DataFile, int]]] = {}
    relaid, groups = set(), []
    for data_file, (schema, codec, data_bytes, largest_group) in zip(files, footers, strict=True):
        if is_small(data_file.file_size_in_bytes, target):
            alike.setdefault((schema, codec), []).append((data_file, data_bytes))
            if largest_group > too_big:  # rewritten alone if nothing joins it
                relaid.add(data_file.file_path)
        elif largest_group > too_big:
            groups.append([data_file])
    for same in alike.values():
        bins = first_fit_groups([f for f, _ in same], [n for _, n in same], target)
        groups.extend(b for b in bins if len(b) > 1 or b[0].file_path in relaid)
    return sorted(groups, key=lambda g: g[0].file_path)


def _footer(table: Table, data_file: DataFile) -> tuple[pa.Schema, str, int, int]:
    """A data file's Arrow schema, its compression codec (as ``pq.ParquetWriter`` names it), its
    size less its footer, and the uncompressed bytes of its largest row group of several rows."""
    with table.io.new_input(data_file.file_path).open() as stream:
        meta = pq.read_metadata(stream)
    codec = meta.row_group(0).column(0).compression if meta.num_row_groups and meta.num_columns else "ZSTD"
    codec = {"UNCOMPRESSED": "none", "LZ4_RAW": "lz4"}.get(codec, codec.lower())
    groups = (meta.row_group(g) for g in range(meta.num_row_groups))
    largest = max((g.total_byte_size for g in groups if g.num_rows > 1), default=0)
    return meta.schema.to_arrow_schema(), codec, data_file.file_size_in_bytes - meta.serialized_size, largest


class _ReplaceFiles(_OverwriteFiles):
    """pyiceberg's file overwrite, recorded as the ``replace`` operation: pyiceberg 0.12 has no
    rewrite API (apache/iceberg-python#3130) and computes summary totals for append, overwrite and
    delete only, so the totals are computed as for an overwrite, then the operation is set."""

    def _summary(self, snapshot_properties=None) -> Summary:
        summary = super()._summary(snapshot_properties or {})
        return Summary(Operation.REPLACE, **summary.additional_properties)


def _commit(
    catalog: Catalog,
    identifier: tuple[str, ...],
    run: Run,
    groups: Sequence[Sequence[DataFile]],
    written: Sequence[str],
    max_attempts: int,
) -> tuple[int, bool]:
    """Replace the groups' files by ``written`` in one snapshot, once per run id; returns the
    snapshot id and whether the run had already committed."""
    name = format_identifier(identifier)
    stats = {
        "files-rewritten": sum(len(g) for g in groups),
        "files-written": len(written),
        "records-rewritten": sum(f.record_count for g in groups for f in g),
    }
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        table = load_table(catalog, identifier)
        branch = run.params["branch"]
        done = find_run_snapshot(table, run.run_id, branch)
        if done is not None:  # an attempt running at the same time: done only if it was this compaction
            check_binding(run, done, identifier, branch=branch, inputs=False)
            return done.snapshot_id, True
        live = {file_key(f.file_path): f for f in live_data_files(table, _head(table, branch), name)}
        gone = [f.file_path for g in groups for f in g if file_key(f.file_path) not in live]
        if gone:
            raise CommitError(
                f"{name}: {gone[0]} left the table while it was being compacted; nothing was committed. "
                "Run factory compact again."
            )
        added = [parquet_file_to_data_file(table.io, table.metadata, path) for path in written]
        # The input is the head this snapshot replaces files of: lineage follows it to every run
        # behind the rows, a writer's that committed while the files were being combined included.
        applied_on = dataclasses.replace(run, inputs=[_compacted(run, _head(table, branch).snapshot_id)])
        try:
            with table.transaction() as tx:
                producer = _ReplaceFiles(
                    operation=Operation.OVERWRITE, transaction=tx, io=table.io, branch=branch,
                    snapshot_properties=applied_on.summary(stats),
                )  # fmt: skip
                with producer:
                    for group in groups:
                        for data_file in group:
                            producer.delete_data_file(live[file_key(data_file.file_path)])
                    for data_file in added:
                        producer.append_data_file(data_file)
        except ValidationException as exc:
            raise CommitError(
                f"{name}: another writer changed the compacted files meanwhile ({exc}); nothing was committed. "
                "Run factory compact again."
            ) from exc
        except _RETRYABLE as exc:
            last_error = exc
            time.sleep(min(0.1 * 2**attempt, 5.0) * (1 + random.random()))
            continue
        return load_table(catalog, identifier).metadata.refs[branch].snapshot_id, False
    raise CommitError(
        f"{name}: the compaction's commit failed {max_attempts} times because other writers kept changing the "
        f"table (last error: {last_error}). Nothing was committed; run factory compact again."
    )


def _compacted(run: Run, snapshot_id: int) -> dict[str, object]:
    return {**run.inputs[0], "snapshot_id": snapshot_id}


def _head(table: Table, branch: str) -> Snapshot:
    return table.snapshot_by_id(table.metadata.refs[branch].snapshot_id)


def _result(name: str, snapshot: Snapshot, *, already: bool) -> CompactResult:
    """What the replace ``snapshot`` did, from its summary: the files of its parent and its own."""
    stats = snapshot_stats(snapshot)
    summary = snapshot.summary
    total = int(summary.get("total-data-files", 0)) if summary is not None else 0
    before = total - stats.get("files-written", 0) + stats.get("files-rewritten", 0)
    return CompactResult(
        name, snapshot.snapshot_id, before, total, stats.get("files-rewritten", 0),
        stats.get("records-rewritten", 0), already=already,
    )  # fmt: skip


def _discard(table: Table, paths: Sequence[str]) -> None:
    """Best effort: files of a compaction that did not commit (``factory gc`` removes the rest)."""
    for path in paths:
        try:
            table.io.delete(path)
        except Exception:
            log.debug("could not remove %s", path, exc_info=True)
