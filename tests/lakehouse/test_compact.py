"""``factory compact`` on real Iceberg catalogs (SQLite, PostgreSQL): the same rows in fewer files,
one ``replace`` snapshot, lineage kept, safe to repeat, nothing changed by a failure."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog
from pyiceberg.table.snapshots import Operation

from factory_cli.main import main
from lakehouse.catalog import ensure_table
from lakehouse.commit import Run, commit_files, snapshot_stats
from lakehouse.compact import compact_table, data_snapshot
from lakehouse.errors import InputError, RunConflictError
from lakehouse.schemas import DOCUMENT_SCHEMA
from tests.conftest import run_factory
from tests.lakehouse.test_commit import stage
from trainer.lineage import pipeline_runs

TABLE = ("raw", "docs")


def _ingest(catalog, run_id: str, files: int, rows: int = 20, text_bytes: int = 0) -> int:
    """Commit ``files`` small files as one ingest-like run would; returns the snapshot id.
    ``text_bytes`` of random text per row make files whose size is mostly data, not footer."""
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = Run(job="ingest", run_id=run_id, params={"source": "t"}, inputs=[{"uri": f"file:///in/{run_id}"}])
    staged = [stage(table, run, [f"{run_id}-{f}-{i}" for i in range(rows)]) for f in range(files)]
    if text_bytes:
        for f in staged:
            path = f.path.removeprefix("file://")
            data = pq.read_table(path)
            texts = pa.array(
                [os.urandom(text_bytes // 2).hex() for _ in range(data.num_rows)], data.schema.field("text").type
            )
            pq.write_table(data.set_column(data.schema.get_field_index("text"), data.schema.field("text"), texts), path)
    return commit_files(catalog, TABLE, staged, run, {"kept": files * rows}).snapshot_id


def _rows(catalog, snapshot_id: int | None = None) -> list[dict]:
    table = catalog.load_table(TABLE)
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), key=lambda r: r["doc_id"])


def _files(catalog, snapshot_id: int | None = None) -> list[str]:
    return [t.file.file_path for t in catalog.load_table(TABLE).scan(snapshot_id=snapshot_id).plan_files()]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.engine)])  # a server: an engine test
def any_catalog(request, tmp_path):
    if request.param == "sqlite":
        return request.getfixturevalue("catalog")
    server = request.getfixturevalue("postgres")
    name = f"compact_{os.getpid()}_{abs(hash(str(tmp_path))) % 10**6}"
    return pyiceberg_load_catalog(name, type="sql", uri=server.url, warehouse=(tmp_path / "wh").as_uri())


def test_small_files_become_one_replace_snapshot_with_the_same_rows_and_lineage(any_catalog):
    catalog = any_catalog
    _ingest(catalog, "ingest-a", files=6)
    before = _ingest(catalog, "ingest-b", files=6)
    rows = _rows(catalog)

    result = compact_table(catalog, TABLE, run_id="compact-1")

    table = catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    assert result.snapshot_id == snapshot.snapshot_id and not result.already
    assert (result.files_before, result.files_after, result.files_rewritten) == (12, 1, 12)
    assert snapshot.summary.operation == Operation.REPLACE and snapshot.parent_snapshot_id == before
    assert snapshot.summary["factory.job"] == "compact" and snapshot.summary["total-records"] == "240"
    assert snapshot_stats(snapshot) == {"files-rewritten": 12, "files-written": 1, "records-rewritten": 240}
    assert _rows(catalog) == rows and len(_files(catalog)) == 1
    assert len(_files(catalog, before)) == 12 and _rows(catalog, before) == rows  # older snapshots unchanged
    assert data_snapshot(table, snapshot).snapshot_id == before  # whose summary says how the rows were made
    # Lineage walks from the compaction to the snapshot it compacted, and on to both runs that made it.
    (compact,) = pipeline_runs(catalog, "raw.docs", snapshot.snapshot_id)
    assert compact["job"] == "compact" and compact["inputs"][0]["snapshot_id"] == before
    made = [(r["job"], r["run_id"]) for r in compact["inputs"][0]["runs"]]
    assert made == [("ingest", "ingest-b"), ("ingest", "ingest-a")]

    # Again, same run id: found, nothing done. Again, new run: nothing to combine, nothing done.
    again = compact_table(catalog, TABLE, run_id="compact-1")
    assert again.already and again.snapshot_id == snapshot.snapshot_id
    noop = compact_table(catalog, TABLE)
    assert noop.already and noop.snapshot_id is None
    assert catalog.load_table(TABLE).current_snapshot().snapshot_id == snapshot.snapshot_id


def test_an_empty_table_is_left_alone_and_an_unknown_branch_refused(catalog):
    ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    assert compact_table(catalog, TABLE).snapshot_id is None
    with pytest.raises(InputError, match="has no branch 'nope'"):
        compact_table(catalog, TABLE, branch="nope")


def test_a_tag_is_refused_as_the_branch_before_any_file_is_written(catalog):
    snapshot_id = _ingest(catalog, "ingest-a", files=4)
    catalog.load_table(TABLE).manage_snapshots().create_tag(snapshot_id, "v1").commit()
    before = _files(catalog)
    with pytest.raises(InputError, match="'v1' is a tag"):
        compact_table(catalog, TABLE, branch="v1")
    assert _files(catalog) == before and catalog.load_table(TABLE).current_snapshot().snapshot_id == snapshot_id


def test_a_run_id_is_bound_to_the_compaction_it_ran(catalog, capsys):
    """Another job's run id, or a compaction's with another branch, was taken for this compaction
    done: "already compacted by this run", exit 0, nothing done."""
    _ingest(catalog, "ingest-a", files=4)
    head = catalog.load_table(TABLE).current_snapshot().snapshot_id
    with pytest.raises(RunConflictError, match=r"job: committed with 'ingest', now 'compact'"):
        compact_table(catalog, TABLE, run_id="ingest-a")
    assert main(["compact", "raw.docs", "--run-id", "ingest-a"]) == 2
    assert "already committed raw.docs snapshot" in capsys.readouterr().err
    assert catalog.load_table(TABLE).current_snapshot().snapshot_id == head

    compacted = compact_table(catalog, TABLE, run_id="compact-1").snapshot_id
    catalog.load_table(TABLE).manage_snapshots().create_branch(compacted, "side").commit()
    with pytest.raises(RunConflictError, match=r"params\.branch: committed with 'main', now 'side'"):
        compact_table(catalog, TABLE, run_id="compact-1", branch="side")


def test_files_combine_up_to_the_tables_target_size_and_big_files_stay(catalog):
    _ingest(catalog, "ingest-a", files=8, rows=50, text_bytes=400)
    sizes = sorted(t.file.file_size_in_bytes for t in catalog.load_table(TABLE).scan().plan_files())
    table = catalog.load_table(TABLE)
    with table.transaction() as tx:  # room for three of these files in one
        tx.set_properties({"write.target-file-size-bytes": str(int(sizes[-1] * 3.5))})
    rows = _rows(catalog)
    result = compact_table(catalog, TABLE)
    assert result.files_before == 8 and result.files_after == 3 and _rows(catalog) == rows
    assert compact_table(catalog, TABLE).snapshot_id is None  # any two files left add up past the target


@pytest.mark.engine
def test_a_compaction_killed_before_its_commit_changes_nothing_and_its_retry_finishes(catalog, factory_home, capsys):
    _ingest(catalog, "ingest-a", files=5)
    head = catalog.load_table(TABLE).current_snapshot().snapshot_id
    rows = _rows(catalog)
    args = ("compact", "raw.docs", "--run-id", "compact-x")

    killed = run_factory(*args, env={"FACTORY_FAIL_AT": "compact-before-commit"})
    assert killed.returncode != 0
    assert catalog.load_table(TABLE).current_snapshot().snapshot_id == head and _rows(catalog) == rows

    # The rest in this process (the CLI's main, as `factory` runs it): no fault can fire here.
    assert main(list(args)) == 0
    assert "replaced 5 file(s) (100 records) by 1; 5 → 1 file(s)" in capsys.readouterr().out
    assert _rows(catalog) == rows and len(_files(catalog)) == 1
    assert main(list(args)) == 0 and "already compacted by this run" in capsys.readouterr().out

    assert main(["compact", "raw.nothing"]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # refused by argparse, with the usage
        main(["compact", "raw.docs@1"])
    assert exit_.value.code == 2 and "give a table, not a pinned snapshot" in capsys.readouterr().err


@pytest.mark.engine
def test_a_writer_committing_during_a_compaction_keeps_its_rows(catalog, factory_home, tmp_path):
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    _ingest(catalog, "ingest-a", files=4)
    folder = tmp_path / "pause"
    folder.mkdir()
    env = {**os.environ, "FACTORY_PAUSE_AT": f"compact-before-commit:{folder}", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "factory_cli.main", "compact", "raw.docs"], cwd=REPO, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not Path(folder, "paused").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "timeout"
        time.sleep(0.1)
    _ingest(catalog, "ingest-b", files=1)  # lands between the compaction's plan and its commit
    (folder / "resume").touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    # Counted from the committed snapshot: the writer's file is in it (the listing planned from had 4).
    assert "replaced 4 file(s) (80 records) by 1; 5 → 2 file(s)" in out
    ids = [r["doc_id"] for r in _rows(catalog)]
    assert len(ids) == 100 and sum(i.startswith("ingest-b") for i in ids) == 20
    assert len(_files(catalog)) == 2  # the four compacted into one, and the new one
    # Lineage reaches the writer that committed meanwhile, behind the compaction.
    (compact,) = pipeline_runs(catalog, "raw.docs", catalog.load_table(TABLE).current_snapshot().snapshot_id)
    assert [r["run_id"] for r in compact["inputs"][0]["runs"]] == ["ingest-b", "ingest-a"]


def test_compacted_files_are_cut_into_row_groups_of_the_tables_property(catalog):
    _ingest(catalog, "ingest-a", files=6, rows=50, text_bytes=400)
    table = catalog.load_table(TABLE)
    with table.transaction() as tx:
        tx.set_properties({"write.parquet.row-group-size-bytes": "4096"})
    rows = _rows(catalog)
    compact_table(catalog, TABLE)
    (path,) = _files(catalog)
    meta = pq.read_metadata(path.removeprefix("file://"))
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    # Each row holds ~400 bytes of text: ten rows to a 4 KB group, not one group per source file.
    assert sum(sizes) == 300 and max(sizes) <= 10 and meta.num_row_groups >= 30
    assert _rows(catalog) == rows


@pytest.mark.parametrize("target", [None, 1000], ids=["small-file", "big-file"])
def test_a_file_of_another_layout_is_rewritten_alone_and_once(catalog, target):
    """A file written with one row group of 20 KB, in a table whose row groups hold 4 KB: alone,
    small (nothing to combine it with) or big (past the target), compaction rewrites it."""
    _ingest(catalog, "ingest-a", files=1, rows=50, text_bytes=400)
    table = catalog.load_table(TABLE)
    properties = {"write.parquet.row-group-size-bytes": "4096"}
    if target:
        properties["write.target-file-size-bytes"] = str(target)
    with table.transaction() as tx:
        tx.set_properties(properties)
    rows = _rows(catalog)
    result = compact_table(catalog, TABLE)
    assert (result.files_before, result.files_after, result.files_rewritten) == (1, 1, 1)
    (path,) = _files(catalog)
    meta = pq.read_metadata(path.removeprefix("file://"))
    assert meta.num_row_groups >= 5 and _rows(catalog) == rows
    assert compact_table(catalog, TABLE).snapshot_id is None  # the layout is the table's now
