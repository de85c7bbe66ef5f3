"""A Spark task that fails once and is retried leaves exactly one data file in the snapshot.

The first attempt of the writing task wrote and closed its file, then was killed outright
(``task-after-write``), as a lost executor is: it could not clean up. Only the retry's file is
reported (pipelines/staging.py), so only it is committed, though both lie in the staging folder;
gc removes the other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse.catalog import load_catalog
from lakehouse.lease import LEASE_FILE
from tests.conftest import run_factory
from tests.factory_cli.test_cli import ingest_args, write_corpus


@pytest.mark.slow
@pytest.mark.engine
def test_a_retried_task_leaves_exactly_one_file_in_the_snapshot(factory_home, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    marker = tmp_path / "fault-fired"
    done = run_factory(
        *ingest_args(corpus, "raw.web", "--run-id", "retried"),
        # local[2,2]: two cores, and a task may fail once before the job fails.
        env={"FACTORY_SPARK_MASTER": "local[2,2]", "FACTORY_KILL_ONCE_AT": f"task-after-write:{marker}"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.exists(), "the fault should have fired in the first attempt of the writing task"

    catalog = load_catalog()
    left_over = []
    for name, expected_rows in (("web", 5), ("quarantine", 1)):
        table = catalog.load_table(("raw", name))
        committed = [Path(t.file.file_path.removeprefix("file://")) for t in table.scan().plan_files()]
        staged = sorted(p for p in committed[0].parent.iterdir() if p.name != LEASE_FILE)
        # The one writing task ran twice: attempt 0 wrote a whole file, then failed; attempt 1's is committed.
        assert [p.name.split("-")[2] for p in staged] == ["0", "1"]
        assert [p.name.split("-")[2] for p in committed] == ["1"]
        left_over += [p.name for p in staged if p.name.split("-")[2] == "0"]
        assert table.scan().to_arrow().num_rows == expected_rows
    documents = catalog.load_table(("raw", "web")).scan().to_arrow().column("text").to_pylist()
    assert sorted(documents) == [f"document number {i}" for i in range(5)]
    summary = json.loads(run_factory("snapshots", "raw.web", "--json").stdout)[0]
    assert summary["stats"]["kept"] == 5

    # What a failed attempt left is garbage: gc removes it, and only it.
    gc = run_factory("gc", "--grace-hours", "0")
    assert gc.returncode == 0, gc.stderr
    removed = [line.split("/")[-1] for line in gc.stdout.splitlines() if line.startswith("removed ")]
    assert len(removed) == 2 and sorted(removed) == sorted(left_over)
    assert catalog.load_table(("raw", "web")).scan().to_arrow().num_rows == 5
