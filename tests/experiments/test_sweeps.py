"""Sweeps and ablations on real Ray Tune: each trial a real training run (one gloo rank, started as
torchrun would start it) on a tiny lakehouse, each outcome a row of experiments.trials. Every test
starts Ray and shuts it down. A Ray of 2 CPUs runs 2 one-CPU trials at once on 2 cores: a one-rank trial starts without
torchrun and keeps its core busy, so more at once (the Ray CPU is a count, not a core) only add
Ray workers (seconds of imports each) and contention: docs/development.md has the figures. The
interrupted sweep keeps 2, one trial at a time, and resumes on 4."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.experiments.lakehouse_setup import Lakehouse, enter_lake, lake_fixture

pytestmark = [pytest.mark.engine, pytest.mark.slow]


lake = lake_fixture("experiments-home")


@pytest.fixture
def in_lake(lake: Lakehouse, monkeypatch: pytest.MonkeyPatch) -> Lakehouse:
    return enter_lake(lake, monkeypatch)


def _rows(sweep_id: str) -> list[dict]:
    from experiments.trials_table import read_trials
    from lakehouse.catalog import load_catalog

    return read_trials(load_catalog(), sweep_id)


def _starts(run_dir: str) -> int:
    """How many times a run was started (its metrics log gets a `start` record each time)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return 0
    return sum(json.loads(line)["kind"] == "start" for line in path.read_text().splitlines())


def _tracked(sweep_dir: Path):
    """The sweep's MLflow parent run and its trials' runs by trial id (the default store: SQLite)."""
    from mlflow import MlflowClient

    record = json.loads((sweep_dir / "mlflow.json").read_text())
    client = MlflowClient(record["tracking_uri"])
    parent = client.get_run(record["run_id"])
    nested = f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    children = client.search_runs([record["experiment_id"]], filter_string=nested)
    return client, record, parent, {run.data.tags["factory.trial_id"]: run for run in children}


def _check_trial_runs(sweep_dir: Path, rows: list[dict]) -> None:
    """Each trial is one MLflow run under the sweep's: Tune's parameters, the training's per-step
    metrics and config, the trial's outcome, and the run folder naming it."""
    client, _, parent, children = _tracked(sweep_dir)
    assert set(children) == {r["trial_id"] for r in rows}
    for row in rows:
        run = children[row["trial_id"]]
        assert json.loads((Path(row["run_dir"]) / "mlflow.json").read_text())["run_id"] == run.info.run_id
        assert run.data.tags["factory.run_id"] == row["run_dir"] and run.info.run_name == row["trial_id"]
        for key, value in row["params"].items():
            assert run.data.params[f"params/{key}"] == str(value)
            if key in ("optim.lr", "run.seed") and row["status"] != "failed":  # the training's config too
                assert run.data.params[key] == str(value)
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        if row["status"] == "failed":
            # Killed outright after step 2: what its tracker's queue still held died with it.
            assert run.info.status == "FAILED" and steps == [1, 2][: len(steps)]
            assert "trial/target" not in run.data.metrics
        else:
            assert run.info.status == "FINISHED" and steps == [1, 2, 3]
            assert run.data.metrics["trial/target"] == row["metric"]
            assert run.data.metrics["trial/tokens_seen"] == row["tokens_seen"]
    scored = [r["metric"] for r in rows if r["metric"] is not None]
    assert parent.data.metrics["sweep/trials"] == len(rows) and parent.data.metrics["sweep/best_metric"] == min(scored)
    assert parent.data.metrics["sweep/failed"] == sum(r["status"] == "failed" for r in rows)


def test_a_2x2_grid_lands_4_rows_and_a_crashing_trial_is_recorded_as_failed(in_lake, tmp_path, monkeypatch):
    from experiments.sweep import run_sweep
    from experiments.sweep_spec import sweep_spec_from_dict

    # The first training process of all to reach step 2 is killed outright (SIGKILL), as an OOM
    # kill would; Ray's workers and the trials' torchrun inherit this from the environment.
    monkeypatch.setenv("FACTORY_KILL_ONCE_AT", f"after-step-2:{tmp_path / 'killed'}")
    spec = sweep_spec_from_dict(
        {
            "name": "grid",
            "config": str(in_lake.config),
            "space": {"optim.lr": [0.01, 0.001], "mixture.code": [0.2, 2.0]},
        }
    )
    outcome = run_sweep(spec, num_cpus=2)

    rows = outcome.rows
    assert len(rows) == 4 and outcome.unfinished == 0
    assert sorted((r["params"]["optim.lr"], r["params"]["mixture.code"]) for r in rows) == [
        (0.001, 0.2), (0.001, 2.0), (0.01, 0.2), (0.01, 2.0)
    ]  # fmt: skip
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and "killed by SIGKILL" in failed[0]["error"]
    assert failed[0]["metric"] is None
    done = [r for r in rows if r["status"] == "completed"]
    assert len(done) == 3
    for row in done:
        assert set(row["final_loss"]) == {"text", "code", "num"}
        assert row["tokens_seen"] == 3 * 8 * 32 and row["wall_seconds"] > 0
        assert all(row["best_loss"][c] <= row["final_loss"][c] for c in row["final_loss"])
        assert (Path(row["run_dir"]) / "checkpoints").is_dir()
        # A trial with other weights trained on its own manifest, pinned from the same snapshots.
        from mixtures.manifest import Manifest

        manifest = Manifest.load(Path(row["run_dir"]) / "manifest.json")
        base = Manifest.load(in_lake.manifest)
        assert row["manifest_fingerprint"] == manifest.fingerprint != base.fingerprint
        assert [c.snapshot_id for c in manifest.components] == [c.snapshot_id for c in base.components]
        # The others keep their base weights (1/3 each, normalised); code's is relative to theirs.
        share = row["params"]["mixture.code"] / (row["params"]["mixture.code"] + 2 / 3)
        assert manifest.component("code").weight == pytest.approx(share)
    lineage = json.loads(next(Path(done[0]["run_dir"]).glob("checkpoints/step-*/lineage.json")).read_text())
    assert lineage["manifest"]["fingerprint"] == done[0]["manifest_fingerprint"]

    from experiments.report import format_ranking, write_plots

    table = format_ranking(rows)
    ranked = [line.split()[1] for line in table.splitlines()[1:4]]
    assert ranked == [r["trial_id"] for r in sorted(done, key=lambda r: r["metric"])]
    plots = write_plots(rows, tmp_path / "plots")
    assert [p.name for p in plots] == ["loss_curves.png", "metric_vs_params.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)

    _check_trial_runs(outcome.sweep_dir, rows)
    _, record, parent, _ = _tracked(outcome.sweep_dir)
    assert record["experiment"] == f"factory/sweep/{outcome.sweep_id}" and parent.info.status == "FINISHED"
    # Tune's JSON results for each trial (and CSV for each that reported), no TensorBoard events
    # (experiments/sweep.py says why).
    tune_dir = outcome.sweep_dir / "tune"
    assert len(list(tune_dir.glob("*/result.json"))) == 4 and len(list(tune_dir.glob("*/progress.csv"))) == 3
    assert not list(tune_dir.rglob("events.out.tfevents*"))


def test_an_interrupted_sweep_resumes_without_rerunning_finished_trials(in_lake, tmp_path):
    spec = tmp_path / "seeds.toml"
    # cpus = 2 of Ray's 2: one trial at a time, so the interruption falls between trials' ends.
    spec.write_text(
        f'name = "seeds"\nconfig = "{in_lake.config}"\n[resources]\ncpus = 2\n[space]\n"run.seed" = [0, 1, 2]\n'
    )
    command = [sys.executable, "-m", "factory_cli.main", "sweep", str(spec)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(
        [*command, "--num-cpus", "2"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    from experiments.sweep_spec import load_sweep_spec

    sweep_id = load_sweep_spec(spec).sweep_id
    deadline = time.monotonic() + 240
    from experiments.sweep import sweep_dir_of

    # A second process on the same sweep while the first runs it is refused.
    while not (sweep_dir_of(sweep_id) / "sweep.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    meanwhile = subprocess.run([*command, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert meanwhile.returncode == 2 and "another process" in meanwhile.stderr, meanwhile.stderr[-2000:]
    while not _rows(sweep_id) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.5)
    first.send_signal(signal.SIGINT)  # Ctrl-C: Tune saves its state and stops
    output = first.communicate(timeout=120)[0]
    before = {r["trial_id"]: r for r in _rows(sweep_id)}
    assert first.returncode == 130, output[-3000:]
    assert 1 <= len(before) < 3 and "--resume" in output
    parent_before = json.loads((sweep_dir_of(sweep_id) / "mlflow.json").read_text())["run_id"]

    # Resumed on a Ray of 4: the trials left (each 2 CPUs, as saved) run side by side, not one after the other.
    resumed = [*command, "--num-cpus", "4", "--resume"]
    second = subprocess.run(resumed, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    after = _rows(sweep_id)
    assert len(after) == 3 and all(r["status"] == "completed" for r in after)
    assert sorted(r["params"]["run.seed"] for r in after) == [0, 1, 2]
    for trial_id, row in before.items():
        assert _starts(row["run_dir"]) == 1, f"finished trial {trial_id} was run again"
    assert "RANK" in second.stdout
    # The resumed sweep continues its MLflow run, and each trial's (a restarted one included).
    _check_trial_runs(sweep_dir_of(sweep_id), after)
    assert _tracked(sweep_dir_of(sweep_id))[2].info.run_id == parent_before

    # Its folder removed, its rows stay: run again under the same id, the new trials' rows would
    # be counted with these (6 rows for 3 trials), so both a fresh start and --resume are refused.
    import shutil

    shutil.rmtree(sweep_dir_of(sweep_id))
    for again, why in (([*command, "--num-cpus", "2"], "earlier run"), (resumed, "no saved state")):
        refused = subprocess.run(again, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and why in refused.stderr, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert len(_rows(sweep_id)) == 3


def test_the_ablation_noise_test_flags_a_real_difference_and_not_a_rerun_of_the_base(in_lake):
    from experiments.ablation import AblationSpec, format_ablation, run_ablation

    spec = AblationSpec(
        name="lr",
        config=str(in_lake.config),
        # Two seeds (the fewest the test takes) tell the 100x smaller rate apart with p = 0.010 (three
        # gave 0.002): each trial is deterministic, so that margin is the same on every run.
        seeds=2,
        variants={"lr-100x-smaller": {"optim.lr": 0.0001}, "base-again": {"optim.lr": 0.01}},
    )
    outcome, reports = run_ablation(spec, num_cpus=2)
    assert len(outcome.rows) == 6 and all(r["status"] == "completed" for r in outcome.rows)
    by_name = {r.variant: r for r in reports}
    print(format_ablation(reports, spec.alpha))
    assert by_name["lr-100x-smaller"].exceeds_noise and by_name["lr-100x-smaller"].difference > 0
    assert not by_name["base-again"].exceeds_noise
    assert len(by_name["base"].metrics) == 2 and by_name["base"].std > 0  # the seeds do differ
    # The verdicts on the ablation's MLflow run, beside its six trials' runs.
    _check_trial_runs(outcome.sweep_dir, outcome.rows)
    _, record, parent, _ = _tracked(outcome.sweep_dir)
    assert record["experiment"] == f"factory/ablate/{spec.ablation_id}"
    assert parent.data.tags["ablation.lr-100x-smaller"] == "beyond seed noise"
    assert parent.data.tags["ablation.base-again"] == "within seed noise"
    smaller = by_name["lr-100x-smaller"]
    assert parent.data.metrics["ablation/lr-100x-smaller/p_value"] == smaller.p_value
    assert parent.data.metrics["ablation/lr-100x-smaller/difference"] == smaller.difference
    assert parent.data.metrics["ablation/base/metric_mean"] == by_name["base"].mean
