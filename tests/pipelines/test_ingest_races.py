"""Two ingests into one table at the same time, made deterministic by holding one at its commit
(``FACTORY_PAUSE_AT``), on real Spark (local[2]) and a real SQLite Iceberg catalog."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse.commit import find_run_snapshot, snapshot_stats, summary_properties
from pipelines.ingest import ingest
from tests.conftest import run_factory, start_factory
from tests.pipelines.test_ingest_job import options, rows
from tests.pipelines.test_ingest_new_files import corpus, ledger, only_new

pytestmark = pytest.mark.slow

TABLES = [("raw", "docs"), ("raw", "quarantine"), ("raw", "ingested_files")]


def ingest_argv(folder: Path, *extra: str) -> list[str]:
    return ["ingest", "--source", "web", "--format", "jsonl", str(folder), "--output", "raw.docs", "--id-field", "id",
            *extra]  # fmt: skip


@contextlib.contextmanager
def held_at_commit(argv: list[str], hold: Path) -> Iterator[subprocess.Popen]:
    """``factory ARGV`` in its own process, held at its first commit (it has read the tables and
    staged its files) while the block runs; let go at the end of the block, and waited for."""
    hold.mkdir()
    proc = start_factory(*argv, env={"FACTORY_PAUSE_AT": f"before-commit:{hold}"})
    try:
        deadline = time.monotonic() + 300
        while not (hold / "paused").exists():
            if proc.poll() is not None:
                pytest.fail(f"the held run ended before its commit: {proc.stderr.read()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("timed out waiting for the held run to reach its commit")
            time.sleep(0.2)
        yield proc
    finally:
        (hold / "resume").touch()
        try:
            proc.stdout_text, proc.stderr_text = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise


def test_two_ingests_of_the_same_input_at_once_commit_its_documents_once(spark, catalog, factory_home, tmp_path):
    """Both read the table's ids before either committed and both committed every document: each
    doc_id twice, the file twice in the ledger."""
    folder = corpus(tmp_path / "web", "a", "b")
    argv = ingest_argv(folder, "--run-id", "held")

    with held_at_commit(argv, tmp_path / "hold") as held:
        other = ingest(spark, catalog, options([folder], "jsonl", id_field="id", run_id="other"))
        assert other.stats["kept"] == 4

    assert held.returncode == 2, held.stderr_text[-3000:]
    message = held.stderr_text
    # Held after loading the table, its first try saw no other commit and lost the race at the
    # catalog; the retry found the other run's snapshot and checked it.
    assert "commit lost a race" in message
    assert "another run committed 4 of the documents of run held" in message, message[-3000:]
    assert "Nothing of run held was committed" in message and "--run-id held" in message
    assert "duplicate-id" in message
    docs = rows(catalog, "raw.docs")
    assert len(docs) == 4 and len({d["doc_id"] for d in docs}) == 4
    assert all(find_run_snapshot(catalog.load_table(t), "held") is None for t in TABLES)
    assert [(r[1], r[3]) for r in ledger(catalog)] == [("web/a.jsonl", "other"), ("web/b.jsonl", "other")]

    # The same command again: nothing of it was committed, so its run id is free and it reads
    # the ids afresh, refusing the other run's documents as duplicate-id.
    again = run_factory(*argv)

    assert again.returncode == 0, again.stderr[-3000:]
    stats = snapshot_stats(find_run_snapshot(catalog.load_table(("raw", "docs")), "held"))
    assert stats["kept"] == 0 and stats["quarantined.duplicate-id"] == 4
    assert sorted(d["doc_id"] for d in rows(catalog, "raw.docs")) == sorted(d["doc_id"] for d in docs)


def test_a_file_two_ingests_read_at_once_is_listed_once_in_the_ledger(spark, catalog, factory_home, tmp_path):
    """A file that gives no document (every line malformed) passes the documents' check; both
    runs recorded it, so the ledger listed it twice."""
    folder = tmp_path / "web"
    folder.mkdir()
    (folder / "bad.jsonl").write_text("{broken\n{also broken\n")

    with held_at_commit(ingest_argv(folder, "--only-new-files", "--run-id", "held"), tmp_path / "hold") as held:
        other = ingest(spark, catalog, only_new(folder, "other"))
        assert other.stats["quarantined.malformed-json"] == 2

    assert held.returncode == 0, held.stderr_text[-3000:]
    assert ledger(catalog) == [("raw.docs", "web/bad.jsonl", (folder / "bad.jsonl").stat().st_size, "other")]
    snapshot = find_run_snapshot(catalog.load_table(("raw", "ingested_files")), "held")
    assert summary_properties(snapshot).get("added-data-files", "0") == "0"  # committed, listing nothing
