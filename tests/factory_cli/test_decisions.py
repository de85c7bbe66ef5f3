"""``factory decisions`` as a user runs it, over decisions recorded in the embedded catalog."""

from __future__ import annotations

import json

from lakehouse.decisions import DECISIONS_TABLE, record_decision
from tests.conftest import run_factory
from tests.decisions import ablation_decision, gate_decision, mixture_decision


def record_four(catalog) -> list[dict]:
    rows = [
        gate_decision("code", decided_at="2026-01-01T10:00:00+00:00"),
        gate_decision(
            "text",
            "refused",
            table="decontaminated.text",
            production=7,
            candidate=9,
            reason="the candidate is worse beyond seed noise",
            decided_at="2026-01-02T09:00:00+00:00",
        ),
        mixture_decision("main", decided_at="2026-01-02T10:00:00+00:00"),
        ablation_decision("lr", decided_at="2026-01-03T10:00:00+00:00"),
    ]
    # Recorded out of order: the listing's order is the decisions' times, not the commits'.
    for row in (rows[2], rows[0], rows[3], rows[1]):
        assert record_decision(catalog, row) is not None
    return rows


def lines_of(stdout: str) -> list[str]:
    return stdout.strip().splitlines()


def test_no_table_yet_means_no_decisions(factory_home):
    done = run_factory("decisions")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no decisions recorded yet")
    listed = run_factory("decisions", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    tables = run_factory("tables")
    assert tables.returncode == 0 and tables.stdout.startswith("no tables yet"), tables.stderr
    assert not factory_home.exists()  # looking made no lakehouse where it looked


def test_decisions_are_listed_oldest_first_with_what_each_changed(catalog):
    rows = record_four(catalog)
    done = run_factory("decisions")
    assert done.returncode == 0, done.stderr
    header, *lines = lines_of(done.stdout)
    assert header.split() == ["WHEN", "KIND", "SUBJECT", "VERDICT", "BEFORE", "→", "AFTER", "REASON"]
    assert [line.split()[:4] for line in lines] == [
        ["2026-01-01T10:00:00+00:00", "refinement-gate", "code", "promoted"],
        ["2026-01-02T09:00:00+00:00", "refinement-gate", "text", "refused"],
        ["2026-01-02T10:00:00+00:00", "mixture", "main", "determined"],
        ["2026-01-03T10:00:00+00:00", "ablation", "lr", "adopted"],
    ]
    assert "@11 → @12" in lines[0] and rows[0]["reason"] in lines[0]
    assert "@7 unchanged" in lines[1] and "worse beyond seed noise" in lines[1]
    assert "0f0f0f0f0f0f → abababababab" in lines[2]
    assert "+optim.lr=0.001" in lines[3] and "train.steps" not in lines[3]  # only what the decision changed


def test_filters_newest_and_json(catalog):
    rows = record_four(catalog)
    gates = run_factory("decisions", "--kind", "refinement-gate")
    assert [line.split()[2] for line in lines_of(gates.stdout)[1:]] == ["code", "text"]
    about_text = run_factory("decisions", "--subject", "text")
    assert len(lines_of(about_text.stdout)) == 2 and "refused" in about_text.stdout
    newest = run_factory("decisions", "-n", "2")
    assert [line.split()[1] for line in lines_of(newest.stdout)[1:]] == ["mixture", "ablation"]
    nobody = run_factory("decisions", "--factory", "another", "--kind", "mixture")
    assert nobody.returncode == 0 and nobody.stdout.strip() == "no recorded decision matches"

    listed = run_factory("decisions", "--json", "--factory", "team", "--kind", "refinement-gate", "-n", "1")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row == rows[1]  # the whole row, JSON columns decoded
    assert row["evidence"]["p_value"] == 0.4125 and row["before"] == row["after"]

    wrong = run_factory("decisions", "-n", "-1")
    assert wrong.returncode == 2 and "-n must be zero or more" in wrong.stderr
    typo = run_factory("decisions", "--kind", "gate")
    assert typo.returncode == 2 and "invalid choice: 'gate'" in typo.stderr
    assert catalog.load_table(DECISIONS_TABLE).scan().to_arrow().num_rows == 4  # only read
