"""The ledger of ingested files and `factory ingest --only-new-files`, on real Spark (local[2]) and
a real SQLite Iceberg catalog."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from factory_cli.ingest import format_result
from lakehouse.commit import find_run_snapshot, snapshot_stats, summary_properties
from pipelines.ingest import IngestOptions, ingest
from pipelines.ingest_ledger import INGESTED_FILES
from tests.conftest import run_factory
from tests.pipelines.test_ingest_job import options, rows, write_jsonl


def corpus(folder: Path, *names: str) -> Path:
    """``folder`` with a JSONL file of two records per name, ids ``<name>1`` and ``<name>2``."""
    folder.mkdir(exist_ok=True)
    for name in names:
        write_jsonl(folder / f"{name}.jsonl", [{"id": f"{name}{i}", "text": f"{name} text {i}"} for i in (1, 2)])
    return folder


def only_new(folder: Path, run_id: str) -> IngestOptions:
    return dataclasses.replace(options([folder], "jsonl", id_field="id", run_id=run_id), only_new_files=True)


def reasons(catalog) -> list[str]:
    return sorted(r["reason"] for r in rows(catalog, "raw.quarantine"))


def ledger(catalog) -> list[tuple]:
    found = catalog.load_table(("raw", "ingested_files")).scan().to_arrow().to_pylist()
    return sorted((r["output"], r["relpath"], r["size"], r["run_id"]) for r in found)


def test_only_new_files_reads_the_files_the_ledger_does_not_list_and_a_file_whose_size_changed(
    spark, catalog, tmp_path
):
    folder = corpus(tmp_path / "web", "a", "b")
    first = ingest(spark, catalog, options([folder], "jsonl", id_field="id", run_id="first"))  # no flag: ledger too
    size = (folder / "a.jsonl").stat().st_size
    assert ledger(catalog) == [("raw.docs", "web/a.jsonl", size, "first"), ("raw.docs", "web/b.jsonl", size, "first")]
    (row,) = [
        r
        for r in catalog.load_table(("raw", "ingested_files")).scan().to_arrow().to_pylist()
        if r["uri"].endswith("/a.jsonl")
    ]
    assert row["uri"] == (folder / "a.jsonl").resolve().as_uri()
    assert first.files.snapshot_id == catalog.load_table(("raw", "ingested_files")).current_snapshot().snapshot_id
    listed = first.files.snapshot_id

    corpus(folder, "c")
    second = ingest(spark, catalog, only_new(folder, "second"))

    assert second.stats["files"] == 1 and second.stats["files-skipped"] == 2 and second.stats["kept"] == 2
    assert second.stats["bytes-in"] == (folder / "c.jsonl").stat().st_size
    assert reasons(catalog) == []  # no old record read again as duplicate-id
    assert sorted(d["text"] for d in rows(catalog, "raw.docs")) == [f"{n} text {i}" for n in "abc" for i in (1, 2)]
    assert [r[1:] for r in ledger(catalog) if r[3] == "second"] == [("web/c.jsonl", size, "second")]
    summary = catalog.load_table(("raw", "docs")).current_snapshot().summary
    assert summary[INGESTED_FILES] == str(listed)  # the ledger snapshot it skipped by, for a retry

    write_jsonl(folder / "a.jsonl", [{"id": f"a{i}", "text": f"a text {i}"} for i in (1, 2, 3)])  # grown
    third = ingest(spark, catalog, only_new(folder, "third"))

    assert third.stats["files"] == 1 and third.stats["files-skipped"] == 2
    assert third.stats["kept"] == 1 and third.stats["quarantined.duplicate-id"] == 2  # its old records
    assert [r[1] for r in ledger(catalog) if r[3] == "third"] == ["web/a.jsonl"]


def test_a_file_that_could_not_be_read_is_not_recorded_so_the_next_run_reads_it_again(spark, catalog, tmp_path):
    """An `unreadable` file was recorded in the ledger like any other: --only-new-files (so
    `factory run`) skipped it for good, its records lost, even once the file was fixed."""
    folder = corpus(tmp_path / "web", "a")
    (folder / "z.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"corrupt" * 50)  # a gzip header, then garbage

    first = ingest(spark, catalog, only_new(folder, "first"))

    assert first.stats["kept"] == 2 and first.stats["quarantined.unreadable"] == 1
    assert [r[1] for r in ledger(catalog)] == ["web/a.jsonl"]
    (refused,) = rows(catalog, "raw.quarantine")
    assert refused["path"] == "web/z.jsonl.gz" and "not recorded as ingested" in refused["detail"]

    write_jsonl(folder / "z.jsonl.gz", [{"id": f"z{i}", "text": f"z text {i}"} for i in (1, 2)], gzip.compress)
    second = ingest(spark, catalog, only_new(folder, "second"))

    assert second.stats["files"] == 1 and second.stats["files-skipped"] == 1 and second.stats["kept"] == 2
    assert sorted(d["text"] for d in rows(catalog, "raw.docs")) == ["a text 1", "a text 2", "z text 1", "z text 2"]
    assert [r[1] for r in ledger(catalog) if r[3] == "second"] == ["web/z.jsonl.gz"]


def test_without_the_flag_every_file_is_read_again_as_before(spark, catalog, tmp_path):
    folder = corpus(tmp_path / "web", "a")
    ingest(spark, catalog, options([folder], "jsonl", id_field="id"))
    again = ingest(spark, catalog, options([folder], "jsonl", id_field="id"))
    assert "files-skipped" not in again.stats and again.stats["quarantined.duplicate-id"] == 2
    assert [r[1] for r in ledger(catalog)] == ["web/a.jsonl", "web/a.jsonl"]  # one row per file read


def test_every_file_ingested_already_commits_empty_snapshots_and_says_nothing_new(spark, catalog, tmp_path):
    folder = corpus(tmp_path / "web", "a", "b")
    ingest(spark, catalog, options([folder], "jsonl", id_field="id"))
    tables = [("raw", "docs"), ("raw", "quarantine"), ("raw", "ingested_files")]
    before = {t: catalog.load_table(t).current_snapshot().snapshot_id for t in tables}

    nothing = ingest(spark, catalog, only_new(folder, "nothing"))

    assert nothing.stats == {
        "files": 0, "files-skipped": 2, "bytes-in": 0, "documents-in": 0, "kept": 0, "quarantined": 0
    }  # fmt: skip
    for table in tables:  # committed, so the run id is found done, with no data file
        snapshot = find_run_snapshot(catalog.load_table(table), "nothing")
        assert (
            snapshot.parent_snapshot_id == before[table]
            and summary_properties(snapshot).get("added-data-files", "0") == "0"
        )
    printed = format_result(nothing)
    assert printed == "run nothing\n  nothing new: 2 file(s) already ingested into raw.docs"

    again = ingest(spark, catalog, only_new(folder, "nothing"))
    assert again.already_committed and again.stats == nothing.stats
    assert format_result(again).startswith("run nothing (already committed: nothing done)\n  nothing new: 2 file(s)")


@pytest.mark.slow
def test_a_retry_after_a_crash_between_commits_reads_the_ledger_snapshot_the_run_recorded(
    spark, catalog, factory_home, tmp_path
):
    folder = corpus(tmp_path / "web", "a")
    ingest(spark, catalog, options([folder], "jsonl", id_field="id", run_id="first"))
    listed = catalog.load_table(("raw", "ingested_files")).current_snapshot().snapshot_id
    corpus(folder, "b")
    argv = ["ingest", "--source", "web", "--format", "jsonl", str(folder), "--output", "raw.docs", "--id-field", "id"]
    killed = run_factory(*argv, "--only-new-files", "--run-id", "crashed", env={"FACTORY_FAIL_AT": "between-commits"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    documents = find_run_snapshot(catalog.load_table(("raw", "docs")), "crashed")
    assert documents.summary[INGESTED_FILES] == str(listed)
    assert find_run_snapshot(catalog.load_table(("raw", "ingested_files")), "crashed") is None
    # Meanwhile another run lists b.jsonl in the ledger: read at its head, the retry would skip it.
    ingest(spark, catalog, only_new(folder, "meanwhile"))

    retried = ingest(spark, catalog, only_new(folder, "crashed"))

    assert retried.stats == snapshot_stats(documents) and retried.stats["files"] == 1
    assert retried.documents.already_committed and retried.documents.snapshot_id == documents.snapshot_id
    assert not retried.quarantine.already_committed and not retried.files.already_committed
    assert [r[1] for r in ledger(catalog) if r[3] == "crashed"] == ["web/b.jsonl"]
    crashed_quarantine = [r for r in rows(catalog, "raw.quarantine") if r["run_id"] == "crashed"]
    assert crashed_quarantine == []  # it refused nothing: b's records were new to the ids it read


def test_a_run_committed_before_the_ledger_existed_commits_only_its_ledger_when_run_again(spark, catalog, tmp_path):
    folder = corpus(tmp_path / "web", "a")
    first = ingest(spark, catalog, options([folder], "jsonl", id_field="id", run_id="older"))
    catalog.drop_table(("raw", "ingested_files"))  # as a run made before the ledger left things

    again = ingest(spark, catalog, options([folder], "jsonl", id_field="id", run_id="older"))

    assert again.documents.already_committed and again.quarantine.already_committed
    assert not again.files.already_committed and again.stats == first.stats
    assert [r[1:] for r in ledger(catalog)] == [("web/a.jsonl", (folder / "a.jsonl").stat().st_size, "older")]
    assert "files_table" not in json.loads(
        find_run_snapshot(catalog.load_table(("raw", "docs")), "older").summary["factory.params"]
    )


def test_the_ledger_keeps_no_credential_of_a_files_uri():
    from pipelines.ingest_inputs import InputFile
    from pipelines.ingest_ledger import ledger_rows

    signed = InputFile("https://host/b/x.jsonl?X-Amz-Signature=abc123&X-Amz-Expires=60", "b/x.jsonl", 10)
    keyed = InputFile("s3a://AKIAEXAMPLE:s3cr3t@bucket/y.jsonl", "bucket/y.jsonl", 20)
    rows = ledger_rows("run-1", [signed, keyed], "raw.web")
    assert [r["relpath"] for r in rows] == ["b/x.jsonl", "bucket/y.jsonl"]
    text = json.dumps(rows)
    assert "abc123" not in text and "s3cr3t" not in text and "AKIAEXAMPLE" not in text, text
