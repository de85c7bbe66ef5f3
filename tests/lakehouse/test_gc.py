"""Garbage collection of staged files and what a commit accepts (docs/architecture.md, "The commit protocol")."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse import lease
from lakehouse.catalog import ensure_table, list_tables
from lakehouse.commit import RUNS_DIR, Run, StagedFile, commit_files
from lakehouse.errors import CommitError, RunConflictError
from lakehouse.publish import start_branch
from lakehouse.run_binding import RunOutput, commit_run
from lakehouse.schemas import DOCUMENT_SCHEMA, QUARANTINE_SCHEMA, arrow_schema
from lakehouse.staging_gc import collect_garbage
from tests.conftest import run_factory
from tests.lakehouse.test_commit import new_run, stage

DOCS, OTHER, QUARANTINE = ("raw", "docs"), ("raw", "other"), ("raw", "quarantine")
HOUR_AGO = time.time() - 3600


def write_at(folder: str, ids: list[str], *, age: float | None = HOUR_AGO) -> StagedFile:
    """A document file in ``folder`` (a ``file://`` URI), as a task would leave it, aged to ``age``."""
    local = Path(folder.removeprefix("file://"))
    local.mkdir(parents=True, exist_ok=True)
    rows = [{"doc_id": i, "source": "t", "text": i, "path": None, "lang": None, "n_bytes": 1} for i in ids]
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)), local / f"part-{ids[0]}.parquet")
    if age is not None:
        os.utime(local / f"part-{ids[0]}.parquet", (age, age))
    return StagedFile(f"{folder}/part-{ids[0]}.parquet", len(ids))


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def runs_dir(table) -> str:
    return f"{table.location().rstrip('/')}/{RUNS_DIR}"


def doc_ids(catalog, identifier=DOCS, branch: str | None = None) -> list[str]:
    table = catalog.load_table(identifier)
    snapshot_id = table.metadata.refs[branch].snapshot_id if branch else None
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow().column("doc_id").to_pylist())


# --- gc works on every table ------------------------------------------------------------------


def test_gc_of_every_table_works_when_a_snapshot_holds_no_files(catalog):
    """A clean ingest's quarantine table has a snapshot and no file: gc used to crash on it."""
    quarantine = ensure_table(catalog, QUARANTINE, QUARANTINE_SCHEMA)
    commit_files(catalog, QUARANTINE, [], new_run(), {"quarantined": 0})
    orphan = write_at(f"{runs_dir(quarantine)}/crashed/attempt", ["x"])

    reports = collect_garbage(catalog, list_tables(catalog), grace=timedelta(0))
    assert [(r.table, r.removed) for r in reports] == [("raw.quarantine", [orphan.path])]

    cli = run_factory("gc", "--grace-hours", "0")
    assert cli.returncode == 0, cli.stderr
    assert "raw.quarantine: removed 0 file(s)" in cli.stdout


# --- a commit accepts only its own run attempt's files ----------------------------------------


def _foreign_files(catalog, run: Run, tmp_path: Path) -> dict[str, StagedFile]:
    docs, other = ensure_table(catalog, DOCS, DOCUMENT_SCHEMA), ensure_table(catalog, OTHER, DOCUMENT_SCHEMA)
    own = run.staging_prefix(docs)
    retry = Run(job=run.job, run_id=run.run_id, params=run.params, inputs=run.inputs)  # same run id, new attempt
    return {
        "another table's staging": write_at(run.staging_prefix(other), ["other-table"]),
        "another run's staging": write_at(new_run("run-2").staging_prefix(docs), ["other-run"]),
        "another attempt's staging": write_at(retry.staging_prefix(docs), ["other-attempt"]),
        "a path that climbs out": StagedFile(f"{own}/../../run-2/x/part-1.parquet", 1),
        "a file outside the warehouse": write_at((tmp_path / "elsewhere").as_uri(), ["elsewhere"]),
        "the table's own folder": write_at(f"{docs.location().rstrip('/')}/data", ["table-data"]),
    }


@pytest.mark.parametrize(
    "case",
    [
        "another table's staging",
        "another run's staging",
        "another attempt's staging",
        "a path that climbs out",
        "a file outside the warehouse",
        "the table's own folder",
    ],
)
def test_a_commit_refuses_files_outside_its_run_attempts_staging(catalog, tmp_path, case):
    run = new_run()
    foreign = _foreign_files(catalog, run, tmp_path)[case]
    own = stage(catalog.load_table(DOCS), run, ["mine"])
    with pytest.raises(CommitError, match="staging") as refused:
        commit_files(catalog, DOCS, [own, foreign], run, {})
    assert foreign.path in str(refused.value) and run.staging_prefix(catalog.load_table(DOCS)) in str(refused.value)
    assert catalog.load_table(DOCS).metadata.snapshots == []  # nothing was committed


def test_add_files_of_a_duplicate_file_is_refused(catalog):
    table = ensure_table(catalog, DOCS, DOCUMENT_SCHEMA)
    run = new_run()
    staged = stage(table, run, ["a", "b"])
    # Listed twice in one commit: refused, nothing committed.
    with pytest.raises(CommitError, match="more than once"):
        commit_files(catalog, DOCS, [staged, staged], run, {})
    assert catalog.load_table(DOCS).metadata.snapshots == []
    # Already in the table (added by another writer): the engine refuses it, and so does the commit.
    catalog.load_table(DOCS).add_files([staged.path])
    with pytest.raises(ValueError, match="already referenced"):
        catalog.load_table(DOCS).add_files([staged.path])
    with pytest.raises(CommitError, match=r"already in raw\.docs"):
        commit_files(catalog, DOCS, [staged], run, {})
    assert len(catalog.load_table(DOCS).metadata.snapshots) == 1
    assert doc_ids(catalog) == ["a", "b"]


# --- gc never removes a referenced file -------------------------------------------------------


def test_gc_removes_only_old_unreferenced_files(catalog):
    table = ensure_table(catalog, DOCS, DOCUMENT_SCHEMA)
    committed_run = new_run("ok")
    committed = stage(table, committed_run, ["a"])
    commit_files(catalog, DOCS, [committed], committed_run, {})
    os.utime(local(committed.path), (HOUR_AGO, HOUR_AGO))
    orphan = write_at(f"{runs_dir(table)}/crashed/attempt", ["b"])  # no lease: the grace period decides
    fresh = write_at(f"{runs_dir(table)}/recent/attempt", ["c"], age=None)

    dry = collect_garbage(catalog, [DOCS], grace=timedelta(minutes=30), dry_run=True)
    assert dry[0].removed == [orphan.path] and local(orphan.path).exists()

    (report,) = collect_garbage(catalog, [DOCS], grace=timedelta(minutes=30))
    assert report.removed == [orphan.path]
    assert report.kept_recent == 1
    assert not local(orphan.path).parent.parent.exists()  # its empty folders went too
    assert local(fresh.path).exists()
    assert doc_ids(catalog) == ["a"]


def test_gc_keeps_a_file_that_another_table_references(catalog):
    ensure_table(catalog, DOCS, DOCUMENT_SCHEMA)
    other = ensure_table(catalog, OTHER, DOCUMENT_SCHEMA)
    # A file staged for raw.other but committed to raw.docs (as commits allowed before they
    # checked the staging prefix): cleaning raw.other alone must not break raw.docs.
    misplaced = write_at(f"{runs_dir(other)}/old-run/attempt", ["a"])
    catalog.load_table(DOCS).add_files([misplaced.path])

    (report,) = collect_garbage(catalog, [OTHER], grace=timedelta(0))
    assert report.removed == []
    assert local(misplaced.path).exists()
    assert doc_ids(catalog) == ["a"]


def test_gc_keeps_files_that_only_a_branch_references(catalog):
    table = ensure_table(catalog, DOCS, DOCUMENT_SCHEMA)
    run = new_run("audited")
    staged = stage(table, run, ["a"])
    start_branch(catalog, DOCS, "audit-audited", empty=True)
    commit_files(catalog, DOCS, [staged], run, {}, branch="audit-audited")
    os.utime(local(staged.path), (HOUR_AGO, HOUR_AGO))

    (report,) = collect_garbage(catalog, [DOCS], grace=timedelta(0))
    assert report.removed == []
    assert doc_ids(catalog, branch="audit-audited") == ["a"]


# --- gc never removes the staging of a live run -----------------------------------------------


def test_gc_spares_a_live_runs_staging_and_removes_a_dead_ones(catalog):
    table = ensure_table(catalog, DOCS, DOCUMENT_SCHEMA)
    live = new_run("live")
    staged = stage(table, live, ["live"])  # staging holds the attempt's lease from here to the commit
    os.utime(local(staged.path), (HOUR_AGO, HOUR_AGO))  # a long run: its files are past the grace period

    # A run that died an hour ago: its lease was last written then.
    dead_folder = f"{runs_dir(table)}/dead/attempt"
    dead = write_at(dead_folder, ["dead"])
    dead_lease = local(dead_folder) / lease.LEASE_FILE
    dead_lease.write_text("{}")
    os.utime(dead_lease, (HOUR_AGO, HOUR_AGO))
    # A run that died before writing a lease (or staged by older code): the grace period decides.
    unleased = write_at(f"{runs_dir(table)}/unleased/attempt", ["unleased"])

    (report,) = collect_garbage(catalog, [DOCS], grace=timedelta(0))
    assert sorted(report.removed) == sorted([dead.path, dead_lease.as_uri(), unleased.path])
    assert report.kept_live == 1
    assert local(staged.path).exists()
    assert not local(dead_folder).parent.exists()  # the dead run's folders went too

    commit_files(catalog, DOCS, [staged], live, {})
    assert doc_ids(catalog) == ["live"]
    assert not (local(staged.path).parent / lease.LEASE_FILE).exists()  # released at the commit


def test_a_run_whose_lease_was_lost_refuses_to_commit(catalog, monkeypatch):
    table = ensure_table(catalog, DOCS, DOCUMENT_SCHEMA)
    # gc took the run for dead (its lease went stale) and removed its lease with its files.
    run = new_run("stalled")
    staged = stage(table, run, ["a"])
    (local(run.staging_prefix(table)) / lease.LEASE_FILE).unlink()
    with pytest.raises(CommitError, match="lease"):
        commit_files(catalog, DOCS, [staged], run, {})
    # A process that could not renew its lease for longer than it trusts it (a stall, a lost
    # connection to the store) may have been taken for dead: it refuses too.
    other = new_run("paused")
    files = [stage(table, other, ["b"])]
    later = time.monotonic() + lease.TRUSTED.total_seconds() + 1
    monkeypatch.setattr(lease, "_clock", lambda: later)
    with pytest.raises(CommitError, match="lease"):
        commit_files(catalog, DOCS, files, other, {})
    assert catalog.load_table(DOCS).metadata.snapshots == []


def test_a_run_refused_after_staging_gives_up_its_leases_and_gc_takes_its_files(catalog):
    """A clean refusal (here: the run's first table already committed with other counts) commits
    nothing more, so its staging is nobody's: gc need not wait out a lease for it."""
    table, other = (ensure_table(catalog, name, DOCUMENT_SCHEMA) for name in (DOCS, OTHER))
    run = new_run()
    commit_files(catalog, DOCS, [stage(table, run, ["a"])], run, {"kept": 1})  # then it died
    retry = new_run()
    staged = stage(other, retry, ["b"])
    outputs = [RunOutput(DOCS, [stage(table, retry, ["a", "c"])]), RunOutput(OTHER, [staged])]
    with pytest.raises(RunConflictError, match="counted otherwise"):
        commit_run(catalog, retry, outputs, {"kept": 2})

    assert not (local(staged.path).parent / lease.LEASE_FILE).exists()
    (report,) = collect_garbage(catalog, [OTHER], grace=timedelta(0))
    assert report.removed == [staged.path] and report.kept_live == 0
