"""The sweeps page shows an ablation ladder's table and verdicts, from its rows in experiments.trials;
a declared ladder's decision page shows each variant's paired test at each size."""

from __future__ import annotations

import html
import re

import pytest
from starlette.testclient import TestClient

from experiments.ladder import analyse_ladder
from experiments.trials_table import commit_trial
from lakehouse.decisions import new_decision, record_decision
from orchestration.ablations import LadderOutcome
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


def ladder_rows() -> list[dict]:
    metrics = {
        ("d32", "base"): [4.53, 4.50], ("d32", "huge-eps"): [5.70, 5.71], ("d32", XSS): [4.53, 4.50],
        ("d48", "base"): [4.13, 4.23], ("d48", "huge-eps"): [5.70, 5.72], ("d48", XSS): [4.13, 4.23],
    }  # fmt: skip
    flops = {"d32": 4.3e8, "d48": 7.0e8}
    rows = []
    for (size, variant), values in metrics.items():
        for seed, metric in enumerate(values):
            params = {"variant": variant, "size": size, "train_flops": flops[size], "run.seed": seed}
            params |= {"train.steps": 6, "alpha": 0.05}
            rows.append(_row(LADDER, "ladder", len(rows), params, metric))
    return rows


@pytest.fixture
def client(catalog, factory_home):
    for row in ladder_rows():
        commit_trial(catalog, row)
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


def test_a_ladders_decision_shows_each_variant_at_each_size(client, catalog):
    rows = ladder_rows()
    evidence = LadderOutcome(LADDER, rows, analyse_ladder(rows), 0.05).evidence()  # as the orchestration records it
    row = new_decision(
        "team", "ablation", "arch", "inconclusive", "huge-eps: reject; the other: inconclusive",
        inputs={"run": "small"}, evidence=evidence, before={"run": "small", "overrides": []},
        after={"run": "small", "overrides": []},
    )  # fmt: skip
    record_decision(catalog, row)
    page = client.get(f"/decisions/{row['decision_id']}")
    assert page.status_code == 200, page.text[-500:]
    shown = page.text.split('id="comparisons"')[1].split("</table>")[0]
    compared = re.findall(r"<tr><td>([^<]*)</td><td class=\"mono\">([^<]*)</td>.*?<td>(yes|no)</td></tr>", shown, re.S)
    assert compared == [
        (f"{html.escape(XSS)} at d32", "0", "no"),
        (f"{html.escape(XSS)} at d48", "0", "no"),
        ("huge-eps at d32", "1.19", "yes"),
        ("huge-eps at d48", "1.53", "yes"),
    ]  # fmt: skip (the variants in name order, each smallest size first)
    assert XSS not in page.text
    assert f'href="/sweeps?sweep={LADDER}"' in page.text  # and the ladder's own table, a link away
