"""Eval waits for checkpoint, end to end: the sensor sees a checkpoint that 2 torchrun ranks saved,
requests one run, and that run's `factory eval` lands its rows in evals.results."""

from __future__ import annotations

import dagster as dg
import pytest

from evals.results import checkpoint_results
from orchestration.definitions import defs
from orchestration.sensors import checkpoint_sensor
from orchestration.settings import FactorySettings
from tests.evals.conftest import trained_run  # noqa: F401  (the fixture: a real 2-rank training run)

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_a_sensor_triggered_eval_lands_its_rows_in_evals_results(trained_run, catalog, tmp_path, monkeypatch):  # noqa: F811
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

        # The sensor asks no more, and a second run of the same checkpoint commits nothing new.
        again = dg.build_sensor_context(instance=instance, cursor=tick.cursor, resources=resources)
        assert not checkpoint_sensor(again).run_requests
        assert job.execute_in_process(run_config=request.run_config, instance=instance, resources=resources).success
        assert len(checkpoint_results(catalog, str(trained_run.checkpoint))) == len(rows)
