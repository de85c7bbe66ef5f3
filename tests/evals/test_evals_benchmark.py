"""benchmarks/evals at a small size: it evaluates every checkpoint of a run with the three suites
once, and prints the table the docs show (the training part is the demo's own command)."""

from __future__ import annotations

import pytest

from benchmarks.evals.run import COLUMNS, evaluate, falling, table

pytestmark = [pytest.mark.engine, pytest.mark.slow]  # the fixture trains under torchrun


def test_the_benchmark_evaluates_each_checkpoint_once(trained_run, tmp_path):
    rows = evaluate(trained_run.run_dir, tmp_path, limit=1, workers=1)
    assert [row["step"] for row in rows] == [2]
    (row,) = rows
    assert {key for _, key in COLUMNS} <= set(row["figures"])
    assert all(seconds is not None and seconds > 0 for seconds in row["seconds"].values())
    printed = table(rows)
    assert printed.splitlines()[0].startswith("| step | humaneval bpb |") and printed.splitlines()[2].startswith(
        "| 2 | "
    )
    assert falling(rows) == {name: True for name, _ in COLUMNS}  # one step: nothing to rise
    again = evaluate(trained_run.run_dir, tmp_path, limit=1, workers=1)  # committed: read back, not run
    assert [r["figures"] for r in again] == [row["figures"]]
    assert all(seconds is None for seconds in again[0]["seconds"].values())
