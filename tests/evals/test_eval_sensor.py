"""Eval waits for checkpoint, end to end: the Dagster sensor sees a checkpoint that 2 torchrun ranks
saved, requests one run, and that run's `factory eval` lands its rows in evals.results.

Here rather than in tests/orchestration so that it shares this folder's trained run (one torchrun
training per test session)."""

from __future__ import annotations

import dagster as dg
import pytest

from evals.results import checkpoint_results
from orchestration.definitions import defs
from orchestration.sensors import checkpoint_sensor
from orchestration.settings import FactorySettings

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_a_sensor_triggered_eval_lands_its_rows_in_evals_results(trained_run, catalog, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    (tmp_path / "dagster-home").mkdir()
    resources = {"factory": FactorySettings(run_dir=str(trained_run.run_dir), eval_suites=["heldout"])}
    with dg.DagsterInstance.ephemeral() as instance:
        tick = checkpoint_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        (request,) = tick.run_requests
        job = defs.resolve_job_def("evaluate_checkpoint")
        run = job.execute_in_process(
            run_config=request.run_config, instance=instance, resources=resources, tags=request.tags
        )
        assert run.success
        rows = checkpoint_results(catalog, str(trained_run.checkpoint))
        assert sorted(r["metric"] for r in rows) == ["loss/code", "loss/text"]
        assert {r["suite"] for r in rows} == {"heldout"} and {r["step"] for r in rows} == {2}

        # The sensor asks no more (that a second eval of it would commit nothing is factory eval's
        # own guarantee: test_eval.py).
        again = dg.build_sensor_context(instance=instance, cursor=tick.cursor, resources=resources)
        assert not checkpoint_sensor(again).run_requests
