"""The commit protocol every job that writes a table follows (docs/architecture.md, "The commit protocol").

1. Executors write Parquet under a staging prefix unique to this run attempt
   (``<table location>/data/runs/<run-id>/<attempt-id>/``), see ``staging.py``.
2. The driver commits exactly the files that successful tasks reported, never a listing.
3. One Iceberg snapshot per table per run, its summary carrying ``factory.*`` lineage.
4. A run id already in the branch's ancestry makes the commit a no-op; a lost race is retried,
   re-checking that ancestry each time, a bounded number of times.
5. Files of attempts that never committed are removed by ``collect_garbage`` after a grace period.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from sqlalchemy.exc import OperationalError

from lakehouse.catalog import load_table
from lakehouse.errors import CommitError, InvalidIdentifierError
from lakehouse.faults import maybe_fail
from lakehouse.refs import format_identifier
from lakehouse.version import code_version

log = logging.getLogger(__name__)

MAIN_BRANCH = "main"
RUNS_DIR = "data/runs"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")

# Errors after which the commit may or may not have landed and a fresh attempt is safe because
# the run id is looked up first. SQLite answers a concurrent writer with "database is locked".
_RETRYABLE = (CommitFailedException, OperationalError)


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file a successful task wrote and reported."""

    path: str
    records: int


@dataclass(frozen=True)
class Run:
    """One logical run of a job; ``attempt_id`` is new each time the process starts."""

    job: str
    run_id: str
    params: Mapping[str, object]
    inputs: Sequence[Mapping[str, object]]
    # Further summary properties a job records, e.g. ``factory.filter-config-sha256``.
    properties: Mapping[str, str] = field(default_factory=dict)
    attempt_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        if not _RUN_ID.match(self.run_id):
            raise InvalidIdentifierError(
                f"invalid run id {self.run_id!r}: letters, digits, '_', '.', '-', at most 128 characters"
            )
        if any(not key.startswith("factory.") for key in self.properties):
            raise ValueError(f"run properties must be factory.* names, got {sorted(self.properties)}")

    @staticmethod
    def new_id(job: str) -> str:
        return f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"

    def staging_prefix(self, table: Table) -> str:
        """Where this attempt's executors write files for ``table``."""
        return f"{table.location().rstrip('/')}/{RUNS_DIR}/{self.run_id}/{self.attempt_id}"

    def summary(self, stats: Mapping[str, object]) -> dict[str, str]:
        """The ``factory.*`` snapshot summary properties of this run."""
        props = {
            "factory.run-id": self.run_id,
            "factory.attempt-id": self.attempt_id,
            "factory.job": self.job,
            "factory.inputs": json.dumps(list(self.inputs), sort_keys=True),
            "factory.params": json.dumps(dict(self.params), sort_keys=True, default=str),
            "factory.code-version": code_version(),
            **self.properties,
        }
        props.update({f"factory.stats.{name}": str(value) for name, value in stats.items()})
        return props


@dataclass(frozen=True)
class CommitResult:
    table: str
    snapshot_id: int
    files: int
    records: int
    already_committed: bool


def find_run_snapshot(table: Table, run_id: str, branch: str = MAIN_BRANCH) -> Snapshot | None:
    """The snapshot in ``branch``'s ancestry that run ``run_id`` committed, if any."""
    ref = table.metadata.refs.get(branch)
    if ref is None:
        return None
    head = table.snapshot_by_id(ref.snapshot_id)
    for snapshot in ancestors_of(head, table.metadata):
        if snapshot.summary is not None and snapshot.summary.get("factory.run-id") == run_id:
            return snapshot
    return None


def summary_properties(snapshot: Snapshot) -> dict[str, str]:
    """A snapshot's summary as a plain dict (pyiceberg's ``Summary`` cannot be iterated as a Mapping)."""
    return dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {}


def record_count(table: Table, snapshot_id: int) -> int:
    """Rows in a snapshot, from its summary (no file is read)."""
    return int(summary_properties(table.snapshot_by_id(snapshot_id)).get("total-records", 0))


def snapshot_stats(snapshot: Snapshot) -> dict[str, int]:
    """The ``factory.stats.*`` counts a run recorded in a snapshot summary."""
    summary = summary_properties(snapshot)
    return {
        key.removeprefix("factory.stats."): int(value)
        for key, value in summary.items()
        if key.startswith("factory.stats.") and value.lstrip("-").isdigit()
    }


def commit_files(
    catalog: Catalog,
    identifier: tuple[str, ...],
    files: Sequence[StagedFile],
    run: Run,
    stats: Mapping[str, object],
    *,
    branch: str = MAIN_BRANCH,
    max_attempts: int = 8,
) -> CommitResult:
    """Commit exactly ``files`` to ``branch`` in one snapshot, once per run id.

    Raises ``CommitError`` when every attempt lost its race; nothing is committed then.
    """
    name = format_identifier(identifier)
    properties = run.summary(stats)
    records = sum(f.records for f in files)
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        table = load_table(catalog, identifier)  # fresh metadata: re-validate against the new head
        done = find_run_snapshot(table, run.run_id, branch)
        if done is not None:
            log.info("%s: run %s already committed as snapshot %s", name, run.run_id, done.snapshot_id)
            return CommitResult(name, done.snapshot_id, len(files), records, already_committed=True)
        maybe_fail("before-commit")
        try:
            with table.transaction() as tx:
                tx.add_files([f.path for f in files], snapshot_properties=properties, branch=branch)
        except _RETRYABLE as exc:
            last_error = exc
            wait = min(0.1 * 2**attempt, 5.0) * (1 + random.random())
            log.warning("%s: commit lost a race (%s); retry %d/%d in %.1fs", name, exc, attempt, max_attempts, wait)
            time.sleep(wait)
            continue
        snapshot_id = table.metadata.refs[branch].snapshot_id
        log.info("%s: committed snapshot %s (%d files, %d records)", name, snapshot_id, len(files), records)
        return CommitResult(name, snapshot_id, len(files), records, already_committed=False)
    raise CommitError(
        f"{name}: commit of run {run.run_id} failed {max_attempts} times because other writers kept "
        f"changing the table (last error: {last_error}). Nothing was committed; re-run with "
        f"--run-id {run.run_id} to try again without duplicating data."
    )


def existing_commits(
    catalog: Catalog, identifiers: Sequence[tuple[str, ...]], run_id: str
) -> tuple[list[CommitResult], dict[str, int]]:
    """What run ``run_id`` committed to each table (all of which hold it), and the stats it recorded."""
    commits, stats = [], {}
    for identifier in identifiers:
        snapshot = find_run_snapshot(load_table(catalog, identifier), run_id)
        summary = summary_properties(snapshot)
        records, files = int(summary.get("added-records", 0)), int(summary.get("added-data-files", 0))
        commits.append(CommitResult(format_identifier(identifier), snapshot.snapshot_id, files, records, True))
        stats = snapshot_stats(snapshot)
    return commits, stats


def runs_already_committed(catalog: Catalog, identifiers: Iterable[tuple[str, ...]], run_id: str) -> bool:
    """True when every table already holds a snapshot of ``run_id`` (a re-run is then a no-op)."""
    for identifier in identifiers:
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            return False
        if find_run_snapshot(table, run_id) is None:
            return False
    return True


@dataclass(frozen=True)
class GarbageReport:
    table: str
    removed: list[str]
    kept_recent: int


def collect_garbage(
    catalog: Catalog,
    identifiers: Iterable[tuple[str, ...]],
    *,
    grace: timedelta,
    dry_run: bool = False,
    now: datetime | None = None,
) -> list[GarbageReport]:
    """Remove staged files that no snapshot references and that are older than ``grace``.

    The grace period protects runs still writing: their files are unreferenced until they commit.
    """
    now = now or datetime.now(UTC)
    reports = []
    for identifier in identifiers:
        table = load_table(catalog, identifier)
        referenced = _referenced_files(table)
        prefix = f"{table.location().rstrip('/')}/{RUNS_DIR}"
        fs, root = pafs.FileSystem.from_uri(prefix)
        scheme = prefix.split("://", 1)[0] if "://" in prefix else "file"
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        removed, recent = [], 0
        for info in fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            uri = f"{scheme}://{info.path}"
            if uri in referenced:
                continue
            if info.mtime is not None and now - info.mtime < grace:
                recent += 1
                continue
            removed.append(uri)
            if not dry_run:
                fs.delete_file(info.path)
        if not dry_run:
            _remove_empty_dirs(fs, root)
        reports.append(GarbageReport(format_identifier(identifier), removed, recent))
    return reports


def _referenced_files(table: Table) -> set[str]:
    if not table.metadata.snapshots:
        return set()
    return set(table.inspect.all_files().column("file_path").to_pylist())


def _remove_empty_dirs(fs: pafs.FileSystem, root: str) -> None:
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    dirs = sorted((i.path for i in infos if i.type == pafs.FileType.Directory), key=len, reverse=True)
    for path in dirs:
        if not fs.get_file_info(pafs.FileSelector(path)):
            fs.delete_dir(path)
