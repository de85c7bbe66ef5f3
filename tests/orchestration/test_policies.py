"""The verdicts of the refinement gate and of an ablation, from the noise test's outcome."""

from __future__ import annotations

import pytest

from experiments.ablation import VariantReport
from orchestration.adoption import ablation_verdict
from orchestration.gate import gate_verdict


@pytest.mark.parametrize(
    ("promote", "difference", "beyond", "verdict"),
    [
        ("not-worse", +0.3, True, "refused"),  # worse beyond noise
        ("not-worse", +0.3, False, "promoted"),  # worse, but within noise
        ("not-worse", -0.3, True, "promoted"),
        ("not-worse", 0.0, False, "promoted"),  # the same data again
        ("better", -0.3, True, "promoted"),
        ("better", -0.3, False, "refused"),  # better, but within noise
        ("better", +0.3, True, "refused"),
        ("better", 0.0, False, "refused"),
    ],
)
def test_the_gate_promotes_by_its_mode(promote, difference, beyond, verdict):
    assert gate_verdict(promote, difference, beyond)[0] == verdict


def report(name: str, mean: float, exceeds: bool) -> VariantReport:
    metrics = (mean - 0.01, mean + 0.01)
    return VariantReport(name, metrics, (mean - 5.0, mean - 5.0), 0.01 if exceeds else 0.5, exceeds)


def test_the_best_variant_that_beats_the_base_beyond_noise_is_adopted_only_when_adoption_is_on():
    variants = [report("a", 4.9, True), report("b", 4.8, True), report("c", 4.7, False)]
    verdict, best = ablation_verdict(variants, adopt=True)
    assert verdict == "adopted" and best.variant == "b"  # c is lower but within noise
    assert ablation_verdict(variants, adopt=False) == ("winner", best)


def test_worse_everywhere_is_rejected_and_anything_else_inconclusive():
    assert ablation_verdict([report("a", 5.2, True), report("b", 5.3, True)], adopt=True) == ("rejected", None)
    assert ablation_verdict([report("a", 5.2, True), report("b", 5.0, False)], adopt=True) == ("inconclusive", None)
    assert ablation_verdict([report("same", 5.0, False)], adopt=True) == ("inconclusive", None)
