"""Dagster's re-execution of a failed run hands the factory command the same --run-id: the run-id
binding then finishes the first attempt's run (tests/lakehouse/test_commit.py proves that part)."""

import os
from pathlib import Path

import dagster as dg
import pytest

from orchestration.commands import factory_run_id

pytestmark = pytest.mark.engine  # real Dagster, with a persistent instance


@dg.op
def step(context: dg.OpExecutionContext) -> None:
    record = Path(os.environ["RUN_IDS_FILE"])
    with record.open("a") as f:
        f.write(factory_run_id(context, "dedup") + "\n")
    if len(record.read_text().splitlines()) == 1:
        raise RuntimeError("the first attempt dies")


@dg.job(executor_def=dg.in_process_executor)
def flaky() -> None:
    step()


def test_a_reexecution_of_a_failed_run_gets_the_same_factory_run_id(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    (tmp_path / "dagster-home").mkdir()
    monkeypatch.setenv("RUN_IDS_FILE", str(tmp_path / "run-ids"))
    with dg.DagsterInstance.get() as instance:
        first = dg.execute_job(dg.reconstructable(flaky), instance=instance, raise_on_error=False)
        assert not first.success
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
        retry = dg.execute_job(dg.reconstructable(flaky), instance=instance, reexecution_options=options)
        assert retry.success and retry.run_id != first.run_id
    ids = (tmp_path / "run-ids").read_text().splitlines()
    assert ids == [f"{first.run_id}-dedup"] * 2
