"""Sweeps and ablations in MLflow, checked without Ray: an ablation's verdicts as its parent run
holds them, and a sweep whose tracker is dead going on untracked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.ports import free_port


def test_an_ablations_verdicts_as_metrics_and_tags():
    from experiments.ablation import VariantReport, verdicts

    reports = [
        VariantReport("base", (1.0, 1.2), (0.0, 0.0), None, False),
        VariantReport("low-lr", (2.0, 2.2), (1.0, 1.0), 0.001, True),
        VariantReport("same", (1.0, 1.3), (0.0, 0.1), 0.8, False),
    ]
    metrics, tags = verdicts(reports)
    assert tags == {
        "ablation.base": "base",
        "ablation.low-lr": "beyond seed noise",
        "ablation.same": "within seed noise",
    }
    assert metrics["ablation/low-lr/p_value"] == 0.001 and metrics["ablation/low-lr/difference"] == 1.0
    assert metrics["ablation/base/metric_mean"] == pytest.approx(1.1) and "ablation/base/p_value" not in metrics


def test_a_sweep_whose_tracker_is_dead_says_so_once_and_runs_untracked(tmp_path, monkeypatch, capsys):
    from experiments.tracking import UNTRACKED, TrialRun, sweep_run

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = tmp_path / "train.toml"
    config.write_text(
        f'[data]\nmanifest = "m.json"\ntokenizer = "t.json"\n[mlflow]\nenabled = true\ntracking_uri = "http://127.0.0.1:{free_port()}"\n'
    )
    setup = SimpleNamespace(config=str(config), overrides=(), sweep_dir=str(tmp_path / "sweep"), kind="sweep",
                            sweep_id="s-1", mlflow=None)  # fmt: skip
    with sweep_run(setup) as tracking:
        assert tracking is None
    warnings = [line for line in capsys.readouterr().err.splitlines() if "MLflow at" in line]
    assert len(warnings) == 1 and "the sweep goes on without it" in warnings[0]
    assert not (tmp_path / "sweep" / "mlflow.json").exists()
    with TrialRun(setup, {}, tmp_path / "trial", "t-1", None) as trial:  # the trials train untracked
        assert trial.overrides == [UNTRACKED] and trial.env == {}
