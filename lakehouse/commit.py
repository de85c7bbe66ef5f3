"""The commit protocol every job that writes a table follows (docs/architecture.md, "The commit protocol").

1. Executors write Parquet under a staging prefix unique to this run attempt
   (``<table location>/data/runs/<run-id>/<attempt-id>/``), see ``staging.py``.
2. The driver commits exactly the files that successful tasks reported, never a listing.
3. One Iceberg snapshot per table per run, its summary carrying ``factory.*`` lineage.
4. A run id already in the branch's ancestry makes the commit a no-op; a lost race is retried,
   re-checking that ancestry each time, a bounded number of times. A run id is bound to the job,
   parameters and inputs it first committed with (``find_run_commits``): a retry with the same
   ones finishes what is missing, table by table (``commit_run``); with others it is refused.
5. A commit takes only files under its own attempt's staging prefix for that table.
6. Files of attempts that never committed are removed by ``collect_garbage`` after a grace
   period, unless any table of the catalog references them or their run still holds its lease
   (``lease.py``).
"""

from __future__ import annotations

import json
import logging
import posixpath
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pyarrow.fs as pafs
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from sqlalchemy.exc import OperationalError

from lakehouse import lease
from lakehouse.catalog import list_tables, load_table
from lakehouse.errors import CommitError, InvalidIdentifierError, RunConflictError
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
# Summary keys that are not among a run's further properties: its own fields, and the attempt and
# code that made the snapshot, which a retry changes (a run id's binding: ``_binding``).
_NOT_PROPERTIES = {"factory.run-id", "factory.attempt-id", "factory.code-version", "factory.job", "factory.params",
                   "factory.inputs"}  # fmt: skip

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
        """Where this attempt's executors write files for ``table``.

        Asking is starting to stage: this process takes the folder's lease (``lease.py``), so
        ``factory gc`` leaves the folder alone until the commit of ``table`` releases it.
        """
        prefix = _staging_prefix(table, self)
        lease.hold(prefix)
        return prefix

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

    def binding(self) -> dict[str, object]:
        """What this run id stands for: its job, parameters, inputs and properties, as recorded."""
        return _binding(self.summary({}))


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
        key.removeprefix(STATS_PREFIX): int(value)
        for key, value in summary.items()
        if key.startswith(STATS_PREFIX) and value.lstrip("-").isdigit()
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

    Raises ``CommitError``, with nothing committed, when a file is not this run attempt's own
    (``_check_staged``), is already in the branch, when the attempt's lease was lost, or when
    every attempt lost its race.
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
    root = _file_key(prefix) + "/"
    foreign = []
    for path in paths:
        key = _file_key(path)
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
    present = _referenced_keys(table, [table.snapshot_by_id(ref.snapshot_id)]) & {_file_key(p) for p in paths}
    if present:
        twice = sorted(p for p in paths if _file_key(p) in present)
        raise CommitError(
            f"refusing to commit {twice[0]}: it is already in {name} (branch {branch}); committing it "
            "again would duplicate its rows. Nothing was committed."
        )


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


# --- run ids bound to what they ran (docs/architecture.md, "The commit protocol", step 4) ------


def run_snapshots(
    catalog: Catalog, identifiers: Iterable[tuple[str, ...]], run_id: str, *, branch: str = MAIN_BRANCH
) -> dict[tuple[str, ...], Snapshot | None]:
    """The snapshot run ``run_id`` committed to ``branch`` of each table; None where it has not
    (or the table does not exist). Nothing is checked: see ``find_run_commits``."""
    found: dict[tuple[str, ...], Snapshot | None] = {}
    for identifier in identifiers:
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            found[identifier] = None
            continue
        found[identifier] = find_run_snapshot(table, run_id, branch)
    return found


def check_run_commits(
    run: Run, snapshots: Mapping[tuple[str, ...], Snapshot | None], *, branch: str = MAIN_BRANCH
) -> None:
    """Raise ``RunConflictError`` if one of ``snapshots`` (the run's earlier commits) was made
    with another job, other parameters, inputs or properties than ``run``."""
    for identifier, snapshot in snapshots.items():
        if snapshot is not None:
            _check_binding(run, snapshot, _place(identifier, branch))


def find_run_commits(
    catalog: Catalog, run: Run, identifiers: Iterable[tuple[str, ...]], *, branch: str = MAIN_BRANCH
) -> dict[tuple[str, ...], Snapshot | None]:
    """What ``run`` already committed to ``branch`` of each table (None where nothing yet), each
    checked to be bound to the run's job, parameters and inputs: ``RunConflictError`` otherwise."""
    found = run_snapshots(catalog, identifiers, run.run_id, branch=branch)
    check_run_commits(run, found, branch=branch)
    return found


@dataclass(frozen=True)
class RunOutput:
    """What a run commits to one table: the files its tasks staged, for ``branch``."""

    identifier: tuple[str, ...]
    files: Sequence[StagedFile]
    branch: str = MAIN_BRANCH


def commit_run(
    catalog: Catalog, run: Run, outputs: Sequence[RunOutput], stats: Mapping[str, object]
) -> list[CommitResult]:
    """Commit each output in order, one snapshot per table, all with the same summary.

    A table that already holds this run's snapshot is not committed again: a retry finishes
    only what an earlier attempt left missing. That snapshot must have been made with this
    run's parameters and inputs and have recorded the same ``stats`` (the same counts show the
    retry redid the same work); otherwise ``RunConflictError``, and nothing more is committed.
    """
    results = []
    for n, output in enumerate(outputs):
        if n:
            maybe_fail("between-commits")
        result = commit_files(catalog, output.identifier, output.files, run, stats, branch=output.branch)
        if result.already_committed:
            snapshot = load_table(catalog, output.identifier).snapshot_by_id(result.snapshot_id)
            place = _place(output.identifier, output.branch)
            _check_binding(run, snapshot, place)
            _check_stats(run, snapshot, stats, place)
            result = committed_result(output.identifier, snapshot)
        results.append(result)
    return results


def _binding(summary: Mapping[str, str]) -> dict[str, object]:
    """The part of a run's snapshot summary that its run id is bound to, as plain JSON."""
    return {
        "job": summary.get("factory.job"),
        "params": json.loads(summary.get("factory.params", "{}")),
        "inputs": json.loads(summary.get("factory.inputs", "[]")),
        "properties": {
            key: value
            for key, value in sorted(summary.items())
            if key.startswith("factory.") and key not in _NOT_PROPERTIES and not key.startswith(STATS_PREFIX)
        },
    }


def _check_binding(run: Run, snapshot: Snapshot, place: str) -> None:
    differences = _differences(_binding(summary_properties(snapshot)), run.binding())
    if differences:
        raise RunConflictError(
            f"run id {run.run_id!r} already committed {place} snapshot {snapshot.snapshot_id} with other "
            f"parameters or inputs than this command's: {_listed(differences)}. Nothing more was committed. "
            f"A run id stands for one run: to run with these parameters and inputs give a new --run-id (or "
            f"none); to finish or re-check that run, repeat its own command."
        )


def _check_stats(run: Run, snapshot: Snapshot, stats: Mapping[str, object], place: str) -> None:
    prefix = len(STATS_PREFIX)
    recorded = {k[prefix:]: _plain(v) for k, v in summary_properties(snapshot).items() if k.startswith(STATS_PREFIX)}
    differences = _differences({"stats": recorded}, {"stats": {k: _plain(str(v)) for k, v in stats.items()}})
    if differences:
        raise RunConflictError(
            f"run {run.run_id!r} already committed {place} snapshot {snapshot.snapshot_id}, but this attempt "
            f"counted otherwise: {_listed(differences)}; its inputs must have changed since. Nothing more was "
            f"committed. Run again with a new --run-id (or none)."
        )


def _plain(text: str) -> object:
    return int(text) if text.lstrip("-").isdigit() else text


def _place(identifier: tuple[str, ...], branch: str) -> str:
    name = format_identifier(identifier)
    return name if branch == MAIN_BRANCH else f"{name} branch {branch}"


_ABSENT = object()


def _differences(recorded: object, wanted: object) -> list[str]:
    """``path: committed with X, now Y`` for each leaf where two JSON values differ."""
    flat_recorded, flat_wanted = _flatten(recorded), _flatten(wanted)
    return [
        f"{path}: committed with {_shown(flat_recorded.get(path, _ABSENT))}, now {_shown(flat_wanted.get(path, _ABSENT))}"
        for path in sorted(flat_recorded.keys() | flat_wanted.keys())
        if _json(flat_recorded.get(path, _ABSENT)) != _json(flat_wanted.get(path, _ABSENT))
    ]


def _flatten(value: object, path: str = "") -> dict[str, object]:
    if isinstance(value, dict) and value:
        return {
            k: v for key, item in value.items() for k, v in _flatten(item, f"{path}.{key}" if path else key).items()
        }
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in _flatten(item, f"{path}[{i}]").items()}
    return {path: value}


def _json(value: object) -> str | None:
    # Compared as JSON text: in Python True == 1 == 1.0, as parameters they differ.
    return None if value is _ABSENT else json.dumps(value, sort_keys=True)


def _shown(value: object, limit: int = 120) -> str:
    text = "(none)" if value is _ABSENT else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _listed(differences: list[str], limit: int = 8) -> str:
    more = len(differences) - limit
    return "; ".join(differences[:limit]) + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class GarbageReport:
    table: str
    removed: list[str]
    kept_recent: int
    kept_live: int = 0  # files of runs whose lease is still being renewed


def collect_garbage(
    catalog: Catalog,
    identifiers: Iterable[tuple[str, ...]],
    *,
    grace: timedelta,
    dry_run: bool = False,
    now: datetime | None = None,
    lease_timeout: timedelta = lease.TIMEOUT,
) -> list[GarbageReport]:
    """Remove staged files of ``identifiers`` that no snapshot of any table in the catalog
    references, that are older than ``grace``, and whose run's lease is not live.

    The staging folders are listed before the catalog is read: a run that commits meanwhile is
    either seen holding its lease or seen committed.
    """
    now = now or datetime.now(UTC)
    identifiers = list(identifiers)
    listings = [_list_staging(load_table(catalog, identifier)) for identifier in identifiers]
    referenced = _referenced_keys_in_catalog(catalog, identifiers)
    return [
        _collect(format_identifier(identifier), listing, referenced, grace, lease_timeout, now, dry_run)
        for identifier, listing in zip(identifiers, listings, strict=True)
    ]


@dataclass(frozen=True)
class _Staging:
    prefix: str  # URI of the table's runs folder
    fs: pafs.FileSystem
    root: str  # its path in fs
    files: list[pafs.FileInfo]


def _list_staging(table: Table) -> _Staging:
    prefix = f"{table.location().rstrip('/')}/{RUNS_DIR}"
    fs, root = split_uri(prefix)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return _Staging(prefix, fs, root, [i for i in infos if i.type == pafs.FileType.File])


def _collect(
    name: str,
    staging: _Staging,
    referenced: set[str],
    grace: timedelta,
    lease_timeout: timedelta,
    now: datetime,
    dry_run: bool,
) -> GarbageReport:
    fs, root = staging.fs, staging.root

    def attempt_folder(path: str) -> str:  # <root>/<run-id>/<attempt-id>
        return "/".join(path.split("/")[: root.count("/") + 3])

    live = {
        attempt_folder(i.path)
        for i in staging.files
        if posixpath.basename(i.path) == lease.LEASE_FILE and lease.is_live(i, now, lease_timeout)
    }
    doomed: dict[str, list[pafs.FileInfo]] = {}
    recent = kept_live = 0
    for info in staging.files:
        folder = attempt_folder(info.path)
        if folder in live:
            kept_live += posixpath.basename(info.path) != lease.LEASE_FILE
        elif _file_key(staging.prefix + info.path[len(root) :]) in referenced:
            continue
        elif info.mtime is not None and now - info.mtime < grace:
            recent += 1
        else:
            doomed.setdefault(folder, []).append(info)
    removed = []
    for folder, infos in doomed.items():
        # A lease written since the listing (whose readdir may have missed it) still protects.
        if lease.is_live(fs.get_file_info(f"{folder}/{lease.LEASE_FILE}"), now, lease_timeout):
            kept_live += sum(posixpath.basename(i.path) != lease.LEASE_FILE for i in infos)
            continue
        for info in infos:
            removed.append(staging.prefix + info.path[len(root) :])
            if not dry_run:
                fs.delete_file(info.path)
    if not dry_run:
        _remove_empty_dirs(fs, root)
    return GarbageReport(name, removed, recent, kept_live)


def _referenced_keys_in_catalog(catalog: Catalog, identifiers: Iterable[tuple[str, ...]]) -> set[str]:
    """Every file any snapshot of any table of the catalog references (all branches and tags)."""
    keys: set[str] = set()
    for identifier in sorted(set(list_tables(catalog)) | set(identifiers)):
        table = load_table(catalog, identifier)
        keys |= _referenced_keys(table, table.metadata.snapshots)
    return keys


def _referenced_keys(table: Table, snapshots: Iterable[Snapshot]) -> set[str]:
    """The files (as ``_file_key``) the snapshots reference, reading each manifest once."""
    manifests = {m.manifest_path: m for s in snapshots for m in s.manifests(table.io)}
    return {
        _file_key(entry.data_file.file_path)
        for manifest in manifests.values()
        for entry in manifest.fetch_manifest_entry(table.io)
    }


def _file_key(uri: str) -> str:
    """One spelling of a file's location, to compare paths written as ``file:///x`` or ``/x``."""
    scheme, sep, _ = uri.partition("://")
    if not sep:
        return "file://" + uri
    if scheme == "file":
        return "file://" + split_uri(uri)[1]
    return uri


def _remove_empty_dirs(fs: pafs.FileSystem, root: str) -> None:
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    dirs = sorted((i.path for i in infos if i.type == pafs.FileType.Directory), key=len, reverse=True)
    for path in dirs:
        if not fs.get_file_info(pafs.FileSelector(path)):
            fs.delete_dir(path)
