"""The commit protocol on real catalogs (SQLite, PostgreSQL): lineage, idempotency, races, gc."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

from lakehouse.catalog import ensure_table
from lakehouse.commit import ReadCheck, Run, StagedFile, commit_files, find_run_snapshot, snapshot_stats
from lakehouse.errors import ConcurrentCommitError, InvalidIdentifierError, RunConflictError
from lakehouse.run_binding import RunOutput, commit_run, find_run_commits
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

TABLE = ("raw", "docs")
OTHER = ("raw", "other")


def stage(table, run: Run, ids: list[str]) -> StagedFile:
    """Write one Parquet file as an executor would, under the run attempt's staging prefix."""
    prefix = run.staging_prefix(table).removeprefix("file://")
    Path(prefix).mkdir(parents=True, exist_ok=True)
    path = f"{prefix}/part-{ids[0]}.parquet"
    rows = [{"doc_id": i, "source": "t", "text": f"text {i}", "path": None, "lang": None, "n_bytes": 6} for i in ids]
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)), path)
    return StagedFile(f"file://{path}", len(ids))


def new_run(run_id: str = "run-1") -> Run:
    return Run(job="test", run_id=run_id, params={"k": 1}, inputs=[{"uri": "file:///in"}])


def test_commit_writes_one_snapshot_with_lineage(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = new_run()
    result = commit_files(catalog, TABLE, [stage(table, run, ["a", "b"]), stage(table, run, ["c"])], run, {"kept": 3})

    table = catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    assert result.snapshot_id == snapshot.snapshot_id and not result.already_committed
    summary = snapshot.summary
    assert summary["factory.run-id"] == "run-1"
    assert summary["factory.job"] == "test"
    assert json.loads(summary["factory.inputs"]) == [{"uri": "file:///in"}]
    assert json.loads(summary["factory.params"]) == {"k": 1}
    assert summary["factory.code-version"].startswith("0.1.0")
    assert snapshot_stats(snapshot) == {"kept": 3}
    assert sorted(table.scan().to_arrow().column("doc_id").to_pylist()) == ["a", "b", "c"]


def test_a_credential_in_an_input_uri_never_reaches_the_snapshot(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = Run(
        job="test", run_id="run-1", params={}, inputs=[{"uri": "s3://b/in.jsonl?X-Amz-Signature=s3cr3t&token=t0k3n"}]
    )
    commit_files(catalog, TABLE, [stage(table, run, ["a"])], run, {})
    summary = catalog.load_table(TABLE).current_snapshot().summary
    recorded = json.loads(summary["factory.inputs"])[0]["uri"]
    assert "s3cr3t" not in recorded and "t0k3n" not in recorded and recorded.startswith("s3://b/in.jsonl?")


def test_same_run_id_twice_commits_once(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = new_run()
    first = commit_files(catalog, TABLE, [stage(table, run, ["a"])], run, {})
    # A retried run (new attempt, new files) with the same id must not add its rows again.
    retry = new_run()
    again = commit_files(catalog, TABLE, [stage(table, retry, ["a"])], retry, {})
    table = catalog.load_table(TABLE)
    assert again.already_committed and again.snapshot_id == first.snapshot_id
    assert len(table.snapshots()) == 1
    assert table.scan().to_arrow().num_rows == 1
    # …and the run is found through ancestry after later commits, not only at the head.
    run_2 = new_run("run-2")
    commit_files(catalog, TABLE, [stage(table, run_2, ["b"])], run_2, {})
    assert find_run_snapshot(catalog.load_table(TABLE), "run-1").snapshot_id == first.snapshot_id
    assert commit_files(catalog, TABLE, [], new_run(), {}).already_committed


def test_an_empty_run_still_commits_a_snapshot_with_its_stats(catalog):
    ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    result = commit_files(catalog, TABLE, [], new_run(), {"documents-in": 0})
    snapshot = catalog.load_table(TABLE).current_snapshot()
    assert snapshot.snapshot_id == result.snapshot_id
    assert snapshot_stats(snapshot) == {"documents-in": 0}


def test_a_run_id_is_bound_to_its_parameters_and_inputs(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = new_run()
    commit_files(catalog, TABLE, [stage(table, run, ["a"])], run, {"kept": 1})
    done = find_run_snapshot(catalog.load_table(TABLE), "run-1")

    # Another attempt of the same run finds what it committed (a table it never wrote: None).
    assert find_run_commits(catalog, new_run(), [TABLE, OTHER]) == {TABLE: done, OTHER: None}

    changed = Run(job="test", run_id="run-1", params={"k": 2}, inputs=[{"uri": "file:///elsewhere"}])
    with pytest.raises(RunConflictError) as refused:
        find_run_commits(catalog, changed, [TABLE])
    message = str(refused.value)
    assert "params.k: committed with 1, now 2" in message
    assert "inputs[0].uri: committed with 'file:///in', now 'file:///elsewhere'" in message
    assert f"raw.docs snapshot {done.snapshot_id}" in message and "new --run-id" in message
    tagged = Run(job="test", run_id="run-1", params={"k": 1}, inputs=[{"uri": "file:///in"}],
                 properties={"factory.filter-config-sha256": "abc"})  # fmt: skip
    with pytest.raises(
        RunConflictError, match=re.escape("properties.factory.filter-config-sha256: committed with (none), now 'abc'")
    ):
        find_run_commits(catalog, tagged, [TABLE])


def test_a_retry_commits_only_what_is_missing(catalog):
    table, other = (ensure_table(catalog, name, DOCUMENT_SCHEMA) for name in (TABLE, OTHER))
    run = new_run()
    first = commit_files(catalog, TABLE, [stage(table, run, ["a", "b"])], run, {"kept": 2})  # then it died

    retry = new_run()
    outputs = [RunOutput(TABLE, [stage(table, retry, ["a", "b"])]), RunOutput(OTHER, [stage(other, retry, ["q"])])]
    done, added = commit_run(catalog, retry, outputs, {"kept": 2})

    assert done.already_committed and (done.snapshot_id, done.files, done.records) == (first.snapshot_id, 1, 2)
    assert not added.already_committed and added.records == 1
    assert len(catalog.load_table(TABLE).snapshots()) == 1
    assert snapshot_stats(catalog.load_table(OTHER).current_snapshot()) == {"kept": 2}

    # Counts that differ from those the run recorded: its inputs changed since; nothing more is committed.
    run = new_run("run-2")
    commit_files(catalog, TABLE, [stage(table, run, ["c"])], run, {"kept": 1})
    retry = new_run("run-2")
    outputs = [RunOutput(TABLE, [stage(table, retry, ["c", "d"])]), RunOutput(OTHER, [stage(other, retry, ["r"])])]
    with pytest.raises(RunConflictError, match=r"stats\.kept: committed with 1, now 2"):
        commit_run(catalog, retry, outputs, {"kept": 2})
    assert find_run_snapshot(catalog.load_table(OTHER), "run-2") is None


def test_a_read_check_sees_only_what_landed_since_the_run_read_the_table(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = new_run("first")
    first = commit_files(catalog, TABLE, [stage(table, run, ["a"])], run, {})
    seen: list[list[str]] = []

    def validate(table, added: list[str]) -> None:
        seen.append(sorted(Path(p).name for p in added))

    # The head is the one the run read: nothing is checked, nothing read.
    alone = new_run("alone")
    commit_files(catalog, TABLE, [stage(table, alone, ["b"])], alone, {}, read=ReadCheck(first.snapshot_id, validate))
    assert seen == []
    # Moved since: exactly the files of the snapshots after the one read (every one after none).
    late = new_run("late")
    commit_files(catalog, TABLE, [stage(table, late, ["c"])], late, {}, read=ReadCheck(first.snapshot_id, validate))
    assert seen == [["part-b.parquet"]]
    refused = new_run("refused")

    def refuse(table, added: list[str]) -> None:
        raise ConcurrentCommitError(f"{len(added)} files landed meanwhile")

    with pytest.raises(ConcurrentCommitError, match="3 files landed meanwhile"):
        commit_files(catalog, TABLE, [stage(table, refused, ["d"])], refused, {}, read=ReadCheck(None, refuse))
    assert find_run_snapshot(catalog.load_table(TABLE), "refused") is None


@pytest.mark.parametrize("run_id", ["", "../x", "a/b", "x" * 200, "-lead"])
def test_run_ids_are_validated(run_id):
    with pytest.raises(InvalidIdentifierError):
        new_run(run_id)


def _commit_many(properties: dict[str, str], worker: int, rounds: int, barrier) -> None:
    catalog = pyiceberg_load_catalog("race", **properties)
    table = catalog.load_table(TABLE)
    for i in range(rounds):
        run = new_run(f"w{worker}-r{i}")
        staged = stage(table, run, [f"w{worker}-r{i}-{k}" for k in range(3)])
        barrier.wait(timeout=60)  # both workers commit at the same moment, every round
        commit_files(catalog, TABLE, [staged], run, {"kept": 3}, max_attempts=20)


def _race(properties: dict[str, str], rounds: int = 6) -> None:
    catalog = pyiceberg_load_catalog("race", **properties)
    ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [ctx.Process(target=_commit_many, args=(properties, w, rounds, barrier)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(timeout=240)
    assert [p.exitcode for p in workers] == [0, 0]

    table = catalog.load_table(TABLE)
    expected = sorted(f"w{w}-r{i}-{k}" for w in range(2) for i in range(rounds) for k in range(3))
    assert sorted(table.scan().to_arrow().column("doc_id").to_pylist()) == expected
    run_ids = [s.summary["factory.run-id"] for s in table.snapshots()]
    assert sorted(run_ids) == sorted(f"w{w}-r{i}" for w in range(2) for i in range(rounds))


def test_two_processes_committing_at_once_both_land_sqlite(sqlite_properties):
    _race(sqlite_properties)


def test_two_processes_committing_at_once_both_land_postgres(postgres, tmp_path):
    _race({"type": "sql", "uri": postgres.url, "warehouse": (tmp_path / "wh").as_uri()})
