"""Eval waits for checkpoint, end to end: the Dagster sensor sees a checkpoint that 2 torchrun ranks
saved, requests one run, and that run's `factory eval` lands its rows in evals.results; a sensor
that lost its cursor does not request it again.

Here rather than in tests/orchestration so that it shares this folder's trained run (one torchrun
training per test session)."""

from __future__ import annotations

import dagster as dg
import pytest

from evals.results import checkpoint_results
from orchestration.definition_load import load_definition
from orchestration.graph import build_definitions
from orchestration.layout import run_folder, write_current
from tests.orchestration.definitions import two_sources

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_a_sensor_triggered_eval_lands_its_rows_in_evals_results(trained_run, catalog, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    (tmp_path / "dagster-home").mkdir()
    definition = load_definition(two_sources(tmp_path / "factory"))
    write_current(run_folder(definition, "small"), {"run_dir": str(trained_run.run_dir)})
    defs = build_definitions(definition)
    sensor = next(s for s in defs.sensors if s.name == "checkpoint_sensor")
    with dg.DagsterInstance.ephemeral() as instance:
        tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        (request,) = tick.run_requests
        job = defs.resolve_job_def(request.job_name)
        run = job.execute_in_process(run_config=request.run_config, instance=instance, tags=request.tags)
        assert run.success
        rows = checkpoint_results(catalog, str(trained_run.checkpoint))
        assert sorted(r["metric"] for r in rows) == ["bpb/code", "bpb/text", "loss/code", "loss/text"]
        assert {r["suite"] for r in rows} == {"heldout"} and {r["step"] for r in rows} == {2}

        # The sensor asks no more (that a second eval of it would commit nothing is factory eval's
        # own guarantee: test_eval.py).
        again = dg.build_sensor_context(instance=instance, cursor=tick.cursor, definitions=defs)
        assert not sensor(again).run_requests

    # A daemon started again with a fresh DAGSTER_HOME (its cursor and run keys lost), or for the
    # first time after `factory run` evaluated the checkpoint: the rows in evals.results say it is
    # done, so no run is started that would only find it done.
    with dg.DagsterInstance.ephemeral() as fresh:
        lost = sensor(dg.build_sensor_context(instance=fresh, definitions=defs))
        assert not lost.run_requests
        assert lost.cursor  # it moves past the checkpoint, as after a run
