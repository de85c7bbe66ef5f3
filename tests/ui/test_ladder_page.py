"""The sweeps page shows an ablation ladder's table and verdicts, from its rows in experiments.trials."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from experiments.trials_table import commit_trial
from ui.app import create_app
from ui.sources import Sources

LADDER = "arch-ladder-0123456789"
XSS = "<script>alert(1)</script>"


def _row(sweep_id: str, kind: str, trial: int, params: dict, metric: float) -> dict:
    return {
        "sweep_id": sweep_id, "trial_id": f"t{trial:02d}", "kind": kind, "params": params,
        "run_dir": f"/elsewhere/t{trial}", "status": "completed", "metric": metric,
        "finished_at": "2026-12-03T12:00:00+00:00",
    }  # fmt: skip


@pytest.fixture
def client(catalog, factory_home):
    metrics = {
        ("d32", "base"): [4.53, 4.50], ("d32", "huge-eps"): [5.70, 5.71], ("d32", XSS): [4.53, 4.50],
        ("d48", "base"): [4.13, 4.23], ("d48", "huge-eps"): [5.70, 5.72], ("d48", XSS): [4.13, 4.23],
    }  # fmt: skip
    flops = {"d32": 4.3e8, "d48": 7.0e8}
    trial = 0
    for (size, variant), values in metrics.items():
        for seed, metric in enumerate(values):
            params = {"variant": variant, "size": size, "train_flops": flops[size], "run.seed": seed}
            params |= {"train.steps": 6, "alpha": 0.05}
            commit_trial(catalog, _row(LADDER, "ladder", trial, params, metric))
            trial += 1
    commit_trial(catalog, _row("plain-sweep", "sweep", 99, {"optim.lr": 0.01}, 4.0))
    return TestClient(create_app(Sources(None, [factory_home])))


def test_a_ladders_sweep_shows_its_table_and_each_variants_verdict(client):
    page = client.get(f"/sweeps?sweep={LADDER}")
    assert page.status_code == 200, page.text[-500:]
    table = page.text.split('<table class="ladder">')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + 2 * 2  # the header, two variants at two sizes
    assert "<td>huge-eps</td><td>d32</td><td>equal steps</td>" in table
    assert "<td>worse</td>" in table and "<td>within seed noise</td>" in table
    assert "<b>huge-eps: reject</b> — worse than the base beyond seed noise at every size (2 of 2)" in page.text
    assert "<b>&lt;script&gt;alert(1)&lt;/script&gt;: inconclusive</b>" in page.text and XSS not in page.text
    everything = client.get("/sweeps").text
    assert everything.count('<table class="ladder">') == 1  # a plain sweep has no ladder table
