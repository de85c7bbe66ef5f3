"""``factory.decisions`` on the embedded catalog: a decision is recorded once, read back whole."""

from __future__ import annotations

import pytest

from lakehouse.decisions import (
    DECISIONS_TABLE,
    decision_id,
    describe_change,
    find_decision,
    new_decision,
    read_decisions,
    record_decision,
    shaping_decisions,
)
from lakehouse.errors import FactoryError

INPUTS = {"table": "decontaminated.code", "production": 11, "candidate": 12}


def gate(verdict: str = "promoted", inputs=INPUTS) -> dict:
    return new_decision(
        "team",
        "refinement-gate",
        "code",
        verdict,
        "the candidate is not worse beyond seed noise",
        inputs=inputs,
        evidence={"p_value": 0.4, "base": [5.1, 5.2], "candidate": [5.0, 5.3]},
        before={"table": "decontaminated.code", "snapshot_id": 11},
        after={"table": "decontaminated.code", "snapshot_id": 12},
    )


def test_a_decision_is_recorded_once_and_read_back_with_its_evidence(catalog):
    row = gate()
    assert row["decision_id"] == decision_id("refinement-gate", "code", INPUTS)
    assert record_decision(catalog, row) is not None
    again = gate()  # the same question on the same inputs: a retry, a restarted daemon
    assert again["decision_id"] == row["decision_id"]
    assert record_decision(catalog, again) is None
    table = catalog.load_table(DECISIONS_TABLE)
    assert len(list(table.snapshots())) == 1 and table.scan().to_arrow().num_rows == 1
    found = find_decision(catalog, row["decision_id"])
    assert found["evidence"] == {"p_value": 0.4, "base": [5.1, 5.2], "candidate": [5.0, 5.3]}
    assert found["after"] == {"table": "decontaminated.code", "snapshot_id": 12}
    other = gate(inputs={**INPUTS, "candidate": 13})
    record_decision(catalog, other)
    assert [r["decision_id"] for r in read_decisions(catalog, factory="team")] == [
        row["decision_id"],
        other["decision_id"],
    ]
    assert read_decisions(catalog, factory="another") == []


def test_no_table_means_no_decisions(catalog):
    assert read_decisions(catalog) == [] and find_decision(catalog, "x") is None


def test_a_verdict_the_kind_cannot_reach_is_refused():
    with pytest.raises(FactoryError, match="cannot conclude"):
        gate(verdict="adopted")


def test_the_decisions_that_shaped_a_manifest():
    promoted, refused = gate(), gate("refused", {**INPUTS, "candidate": 13})
    refused["after"] = {"table": "decontaminated.code", "snapshot_id": 11}
    mixture = new_decision(
        "team", "mixture", "main", "determined", "search", inputs={"x": 1}, after={"fingerprint": "sha256:ab"}
    )
    unrelated = new_decision(
        "team", "mixture", "main", "determined", "search", inputs={"x": 2}, after={"fingerprint": "sha256:cd"}
    )
    rows = [promoted, refused, mixture, unrelated]
    shaped = shaping_decisions(rows, "sha256:ab", {("decontaminated.code", 12), ("filtered.text", 5)})
    assert shaped == [promoted, mixture]


def test_what_a_decision_changed_in_a_few_words():
    first = gate(inputs={**INPUTS, "production": None})
    first["before"] = None
    assert describe_change(first) == "none → @12"
    assert describe_change(gate()) == "@11 → @12"
    kept = gate("refused")
    kept["after"] = kept["before"]
    assert describe_change(kept) == "@11 unchanged"
    mixture = new_decision(
        "team", "mixture", "main", "determined", "search", inputs={}, after={"fingerprint": "sha256:" + "ab" * 32}
    )
    assert describe_change(mixture) == "none → abababababab"
    adopted = new_decision(
        "team",
        "ablation",
        "lr",
        "adopted",
        "won",
        inputs={},
        before={"run": "r", "overrides": ["a=1", "b=2"]},
        after={"run": "r", "overrides": ["a=1", "b=3"]},
    )
    assert describe_change(adopted) == "-b=2 +b=3"
    adopted["after"] = adopted["before"]
    assert describe_change(adopted) == "unchanged"
