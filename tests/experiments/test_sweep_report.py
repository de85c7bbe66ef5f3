"""`factory sweep report` on the rows of experiments.trials, as a user runs it."""

from __future__ import annotations

from experiments.trials_table import commit_trial
from tests.conftest import run_factory


def _row(sweep_id: str, trial: int, metric: float) -> dict:
    return {
        "sweep_id": sweep_id, "trial_id": f"t{trial:02d}", "kind": "sweep", "params": {"optim.lr": 0.01 * trial},
        "run_dir": f"/elsewhere/t{trial}", "status": "completed", "metric": metric,
        "finished_at": "2026-12-07T12:00:00+00:00",
    }  # fmt: skip


def test_an_unknown_sweep_is_refused_with_what_the_catalog_holds(catalog, tmp_path):
    empty = run_factory("sweep", "report", "lr-sweep")
    assert empty.returncode == 2 and "Traceback" not in empty.stderr
    assert "no sweep has recorded a trial in this catalog yet" in empty.stderr
    for trial, metric in enumerate([4.5, 4.1]):
        commit_trial(catalog, _row("lr-sweep", trial, metric))
    commit_trial(catalog, _row("wd-sweep", 0, 4.3))

    typo = run_factory("sweep", "report", "lr-swep")
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert "it holds the sweeps lr-sweep, wd-sweep" in typo.stderr

    found = run_factory("sweep", "report", "lr-sweep", "--plots", str(tmp_path / "plots"))
    assert found.returncode == 0, found.stderr[-2000:]
    trials = [line.split()[1] for line in found.stdout.splitlines() if line.split()[1:2] in (["t00"], ["t01"])]
    assert trials == ["t01", "t00"]  # ranked by loss, lowest first; the other sweep's trial not among them
    assert any((tmp_path / "plots").iterdir())
