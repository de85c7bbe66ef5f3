"""The commit protocol every job that writes a table follows (docs/architecture.md, "The commit protocol").

1. Executors write Parquet under a staging prefix unique to this run attempt
   (``<table location>/data/runs/<run-id>/<attempt-id>/``), see ``staging.py``.
2. The driver commits exactly the files that successful tasks reported, never a listing.
3. One Iceberg snapshot per table per run, its summary carrying ``factory.*`` lineage.
4. A run id already in the branch's ancestry makes the commit a no-op; a lost race is retried,
   re-checking that ancestry each time, a bounded number of times. A run id is bound to the job,
   parameters and inputs it first committed with (``run_binding.find_run_commits``): a retry with the same
   ones finishes what is missing, table by table (``run_binding.commit_run``); with others it is refused.
   What the run read of the table may be checked again at commit (``ReadCheck``), against only
   the data files committed since it read it, and only when some were.
5. A commit takes only files under its own attempt's staging prefix for that table.
6. Files of attempts that never committed are removed by ``staging_gc.collect_garbage`` after a grace
   period, unless any table of the catalog references them or their run still holds its lease
   (``lease.py``).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from sqlalchemy.exc import OperationalError

from lakehouse import lease
from lakehouse.catalog import load_table
from lakehouse.errors import CommitError, InputError, InvalidIdentifierError
from lakehouse.faults import maybe_fail
from lakehouse.parquet import split_uri
from lakehouse.redact import redact
from lakehouse.refs import format_identifier
from lakehouse.version import code_version

log = logging.getLogger(__name__)

MAIN_BRANCH = "main"
RUNS_DIR = "data/runs"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")
STATS_PREFIX = "factory.stats."

# Errors after which the commit may or may not have landed and a fresh attempt is safe because
# the run id is looked up first. SQLite answers a concurrent writer with "database is locked".
_RETRYABLE = (CommitFailedException, OperationalError)


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file a successful task wrote and reported."""

    path: str
    records: int


def check_run_id(run_id: str) -> str:
    """``run_id`` if it can name a run; else ``InvalidIdentifierError`` saying what one is."""
    if not _RUN_ID.match(run_id):
        raise InvalidIdentifierError(
            f"invalid run id {run_id!r}: letters, digits, '_', '.', '-', at most 128 characters"
        )
    return run_id


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
        check_run_id(self.run_id)
        if any(not key.startswith("factory.") for key in self.properties):
            raise ValueError(f"run properties must be factory.* names, got {sorted(self.properties)}")

    @staticmethod
    def new_id(job: str) -> str:
        return f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"

    def staging_prefix(self, table: Table) -> str:
        """Where this attempt's executors write files for ``table``.

        Asking is starting to stage: this process takes the folder's lease (``lease.py``), so
        ``factory gc`` leaves the folder alone until the commit of ``table`` releases it.
        """
        prefix = _staging_prefix(table, self)
        lease.hold(prefix, table.io.properties)
        return prefix

    def release_staging(self, table: Table) -> None:
        """Give up the lease ``staging_prefix`` took, for a run refused before its commit of
        ``table``: nothing will commit those files, so ``factory gc`` may take them at once."""
        lease.release(_staging_prefix(table, self))

    def summary(self, stats: Mapping[str, object]) -> dict[str, str]:
        """The ``factory.*`` snapshot summary properties of this run."""
        props = {
            "factory.run-id": self.run_id,
            "factory.attempt-id": self.attempt_id,
            "factory.job": self.job,
            # An input URI may carry a credential (a presigned ?token=…): none reaches a snapshot.
            "factory.inputs": redact(json.dumps(list(self.inputs), sort_keys=True)),
            "factory.params": json.dumps(dict(self.params), sort_keys=True, default=str),
            "factory.code-version": code_version(),
            **self.properties,
        }
        props.update({f"{STATS_PREFIX}{name}": str(value) for name, value in stats.items()})
        return props


@dataclass(frozen=True)
class ReadCheck:
    """What a run read of the table it commits to, checked again when it commits.

    ``snapshot_id`` is the branch's head the run read (None: it read no snapshot, the table was
    empty). A commit that finds the head still there checks nothing more (a run alone pays
    nothing); one that finds it moved calls ``validate(table, added)`` with the data files the
    snapshots since then added, on every attempt, a lost race included, and ``validate`` raises
    (a ``FactoryError``) to refuse the commit before anything is committed.
    """

    snapshot_id: int | None
    validate: Callable[[Table, list[str]], None]


@dataclass(frozen=True)
class CommitResult:
    table: str
    snapshot_id: int
    files: int
    records: int
    already_committed: bool


def find_run_snapshot(table: Table, run_id: str, branch: str = MAIN_BRANCH) -> Snapshot | None:
    """The snapshot in ``branch``'s ancestry that run ``run_id`` committed, if any."""
    for snapshot in _branch_ancestry(table, branch):
        if snapshot.summary is not None and snapshot.summary.get("factory.run-id") == run_id:
            return snapshot
    return None


def run_ids(table: Table, branch: str = MAIN_BRANCH) -> set[str]:
    """The run id of every snapshot in ``branch``'s ancestry: one walk for many ``find_run_snapshot`` checks."""
    found = (s.summary.get("factory.run-id") for s in _branch_ancestry(table, branch) if s.summary is not None)
    return {run_id for run_id in found if run_id}


def _branch_ancestry(table: Table, branch: str) -> Iterable[Snapshot]:
    ref = table.metadata.refs.get(branch)
    return () if ref is None else ancestors_of(table.snapshot_by_id(ref.snapshot_id), table.metadata)


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
        key.removeprefix(STATS_PREFIX): int(value)
        for key, value in summary.items()
        if key.startswith(STATS_PREFIX) and value.lstrip("-").isdigit()
    }


# A summary property is text anyone committing to the catalog may write (another tool, a hand-made
# commit): its readers take these two through here, refused with a clear error, not a traceback.
_SUMMARY_JSON = "a factory run records one there; was the snapshot committed by another tool?"


def recorded_inputs(text: str | None, where: str) -> list[dict[str, Any]]:
    """The inputs a run recorded (``factory.inputs``, JSON text; None: none), each a JSON object, a
    table's with its ``table`` name and integer ``snapshot_id``; ``InputError`` naming ``where`` (the
    snapshot and key) if it holds anything else."""
    entries = _summary_json(text, "[]", where, list, "a JSON list of inputs")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InputError(f"{where}: input [{i}] is {entry!r}, not an object: {_SUMMARY_JSON}")
        if "table" in entry and not (isinstance(entry["table"], str) and _is_int(entry.get("snapshot_id"))):
            raise InputError(
                f"{where}: input [{i}] is {entry!r}, no table name with an integer snapshot_id: {_SUMMARY_JSON}"
            )
    return entries


def recorded_params(text: str | None, where: str) -> dict[str, Any]:
    """The parameters a run recorded (``factory.params``, JSON text; None: none) as an object;
    ``InputError`` naming ``where`` if it holds anything else."""
    return _summary_json(text, "{}", where, dict, "a JSON object of parameters")


def _summary_json(text: str | None, default: str, where: str, kind: type, what: str) -> Any:
    try:
        value = json.loads(default if text is None else text)
    except (TypeError, ValueError) as exc:  # TypeError: a lineage.json copy holding no text
        raise InputError(f"{where} is not {what} ({exc}): {_SUMMARY_JSON}") from None
    if not isinstance(value, kind):
        raise InputError(f"{where} holds a {type(value).__name__}, not {what}: {_SUMMARY_JSON}")
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def commit_files(
    catalog: Catalog,
    identifier: tuple[str, ...],
    files: Sequence[StagedFile],
    run: Run,
    stats: Mapping[str, object],
    *,
    branch: str = MAIN_BRANCH,
    max_attempts: int = 8,
    read: ReadCheck | None = None,
) -> CommitResult:
    """Commit exactly ``files`` to ``branch`` in one snapshot, once per run id.

    Raises ``CommitError``, with nothing committed, when a file is not this run attempt's own
    (``_check_staged``), is already in the branch, when the attempt's lease was lost, or when
    every attempt lost its race; and whatever ``read``'s check raises when what the branch gained
    since the run read it conflicts with this commit.
    """
    name = format_identifier(identifier)
    properties = run.summary(stats)
    records = sum(f.records for f in files)
    prefix = _staging_prefix(load_table(catalog, identifier), run)
    _check_staged(name, prefix, [f.path for f in files])
    last_error: Exception | None = None
    for attempt in range(1, max_attempts + 1):
        table = load_table(catalog, identifier)  # fresh metadata: re-validate against the new head
        done = find_run_snapshot(table, run.run_id, branch)
        if done is not None:
            log.info("%s: run %s already committed as snapshot %s", name, run.run_id, done.snapshot_id)
            lease.release(prefix)
            return CommitResult(name, done.snapshot_id, len(files), records, already_committed=True)
        maybe_fail("before-commit")
        lease.check(prefix)
        _refuse_files_in_branch(name, table, branch, [f.path for f in files])
        if read is not None:
            _check_read(table, branch, read)
        try:
            with table.transaction() as tx:
                # The branch was checked above; pyiceberg's own check looks at main only.
                tx.add_files(
                    [f.path for f in files], snapshot_properties=properties, branch=branch, check_duplicate_files=False
                )
        except _RETRYABLE as exc:
            last_error = exc
            wait = min(0.1 * 2**attempt, 5.0) * (1 + random.random())
            log.warning("%s: commit lost a race (%s); retry %d/%d in %.1fs", name, exc, attempt, max_attempts, wait)
            time.sleep(wait)
            continue
        snapshot_id = table.metadata.refs[branch].snapshot_id
        log.info("%s: committed snapshot %s (%d files, %d records)", name, snapshot_id, len(files), records)
        lease.release(prefix)  # the snapshot references the files now: gc keeps them
        return CommitResult(name, snapshot_id, len(files), records, already_committed=False)
    raise CommitError(
        f"{name}: commit of run {run.run_id} failed {max_attempts} times because other writers kept "
        f"changing the table (last error: {last_error}). Nothing was committed; re-run with "
        f"--run-id {run.run_id} to try again without duplicating data."
    )


def _staging_prefix(table: Table, run: Run) -> str:
    return f"{table.location().rstrip('/')}/{RUNS_DIR}/{run.run_id}/{run.attempt_id}"


def _check_staged(name: str, prefix: str, paths: Sequence[str]) -> None:
    """Refuse, with ``CommitError``, paths listed twice or not under ``prefix`` (this run attempt's
    staging for table ``name``): files of another table, run or attempt are theirs to commit, and
    gc of their folder would break this table."""
    twice = sorted(path for path, n in Counter(paths).items() if n > 1)
    if twice:
        raise CommitError(f"{name}: refusing to commit {twice[0]}: it is listed more than once. Nothing was committed.")
    root = file_key(prefix) + "/"
    foreign = []
    for path in paths:
        key = file_key(path)
        parts = key.removeprefix(root).split("/")
        if not key.startswith(root) or any(part in ("", ".", "..") for part in parts):
            foreign.append(path)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise CommitError(
            f"{name}: refusing to commit {foreign[0]}{more}: a run commits only the files it staged, under "
            f"this attempt's staging folder {prefix}/. Nothing was committed."
        )


def _refuse_files_in_branch(name: str, table: Table, branch: str, paths: Sequence[str]) -> None:
    ref = table.metadata.refs.get(branch)
    if ref is None or not paths:
        return
    present = referenced_keys(table, [table.snapshot_by_id(ref.snapshot_id)]) & {file_key(p) for p in paths}
    if present:
        twice = sorted(p for p in paths if file_key(p) in present)
        raise CommitError(
            f"refusing to commit {twice[0]}: it is already in {name} (branch {branch}); committing it "
            "again would duplicate its rows. Nothing was committed."
        )


def _check_read(table: Table, branch: str, read: ReadCheck) -> None:
    ref = table.metadata.refs.get(branch)
    head = None if ref is None else ref.snapshot_id
    if head != read.snapshot_id:
        read.validate(table, data_files_added(table, head, read.snapshot_id))


def data_files_added(table: Table, head: int | None, base: int | None) -> list[str]:
    """The data files the snapshots after ``base`` up to ``head`` added (those of ``head``'s whole
    history when ``base`` is None). When ``base`` is not among ``head``'s ancestors (the branch was
    rolled back, the snapshot expired), every data file ``head`` holds: what it added is unknown."""
    if head is None:
        return []
    added: list[str] = []
    for snapshot in ancestors_of(table.snapshot_by_id(head), table.metadata):
        if snapshot.snapshot_id == base:
            return added
        added += _added_by(table, snapshot)
    if base is None:
        return added
    return sorted(
        {e.data_file.file_path for m in table.snapshot_by_id(head).manifests(table.io) for e in _live(table, m)}
    )


def _added_by(table: Table, snapshot: Snapshot) -> list[str]:
    """The data files ``snapshot`` added: the ADDED entries of the manifests it wrote."""
    return [
        entry.data_file.file_path
        for manifest in snapshot.manifests(table.io)
        if manifest.added_snapshot_id == snapshot.snapshot_id
        for entry in _live(table, manifest)
        if entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id
    ]


def _live(table: Table, manifest: ManifestFile) -> list[ManifestEntry]:
    if manifest.content != ManifestContent.DATA:
        return []
    return manifest.fetch_manifest_entry(table.io, discard_deleted=True)


def existing_commits(
    snapshots: Mapping[tuple[str, ...], Snapshot],
) -> tuple[list[CommitResult], dict[str, int]]:
    """The commits a run already made (its snapshot in each table), and the stats it recorded."""
    commits = [committed_result(identifier, snapshot) for identifier, snapshot in snapshots.items()]
    stats = snapshot_stats(next(iter(snapshots.values()))) if snapshots else {}
    return commits, stats


def committed_result(identifier: tuple[str, ...], snapshot: Snapshot) -> CommitResult:
    """A commit a run made earlier, as ``commit_files`` reports it."""
    summary = summary_properties(snapshot)
    records, files = int(summary.get("added-records", 0)), int(summary.get("added-data-files", 0))
    return CommitResult(format_identifier(identifier), snapshot.snapshot_id, files, records, already_committed=True)


def referenced_keys(table: Table, snapshots: Iterable[Snapshot]) -> set[str]:
    """The files (as ``file_key``) the snapshots reference, reading each manifest once."""
    manifests = {m.manifest_path: m for s in snapshots for m in s.manifests(table.io)}
    return {
        file_key(entry.data_file.file_path)
        for manifest in manifests.values()
        for entry in manifest.fetch_manifest_entry(table.io)
    }


def file_key(uri: str) -> str:
    """One spelling of a file's location, to compare paths written as ``file:///x`` or ``/x``."""
    scheme, sep, _ = uri.partition("://")
    if not sep:
        return "file://" + uri
    if scheme == "file":
        return "file://" + split_uri(uri)[1]
    return uri
