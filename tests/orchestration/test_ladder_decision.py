"""A declared ablation with a [ladder]: checked as a ladder when the definition loads, and decided
from the ladder's verdicts (a variant wins only when the ladder adopts it)."""

from __future__ import annotations

import pytest

from experiments.ladder import analyse_ladder
from lakehouse.errors import ConfigError
from orchestration.adoption import ladder_decision
from orchestration.definition_load import load_definition
from tests.orchestration.definitions import two_sources

LADDER = """
[experiments.ablations.arch]
run = "small"
seeds = 2
variants = { gelu = { "model.feed_forward" = "gelu" } }
%s
"""


def test_a_declared_ladder_is_checked_as_a_ladder(tmp_path):
    sizes = '[experiments.ablations.arch.ladder.sizes]\nnarrow = { "model.dim" = 64 }\nwide = { "model.dim" = 128 }'
    definition = load_definition(two_sources(tmp_path, extra=LADDER % sizes))
    assert definition.experiments["arch"].spec["ladder"] == {
        "sizes": {"narrow": {"model.dim": 64}, "wide": {"model.dim": 128}}
    }
    defaults = load_definition(two_sources(tmp_path, extra=LADDER % "[experiments.ablations.arch.ladder]"))
    assert defaults.experiments["arch"].spec["ladder"] == {}  # the default sizes: the run's width x1, x1.5, x2
    one_size = '[experiments.ablations.arch.ladder.sizes]\nnarrow = { "model.dim" = 64 }'
    with pytest.raises(ConfigError, match=r"experiments\.ablations\.arch: the ladder: give two sizes at least"):
        load_definition(two_sources(tmp_path, extra=LADDER % one_size))


def _verdicts(effects: dict[str, tuple[float, float]]) -> list:
    """A two-size ladder whose variants change the base's metric by (effect at s, effect at l)."""
    base = {"s": [4.0, 4.3], "l": [3.5, 3.9]}
    rows = []
    for variant, changes in {"base": (0.0, 0.0), **effects}.items():
        for size, change in zip(("s", "l"), changes, strict=True):
            for seed, metric in enumerate(base[size]):
                params = {"size": size, "variant": variant, "run.seed": seed, "train.steps": 10, "alpha": 0.05}
                params["train_flops"] = {"s": 1e9, "l": 2e9}[size]
                rows.append(
                    {
                        "status": "completed",
                        "metric": metric + change + 0.001 * seed * (variant != "base"),
                        "params": params,
                    }
                )
    return analyse_ladder(rows)


def test_the_variant_the_ladder_adopts_with_the_largest_gain_at_the_largest_size_wins():
    verdicts = _verdicts({"a": (-0.3, -0.2), "b": (-0.1, -0.4), "c": (-0.9, 0.0), "d": (0.5, 0.5)})
    assert [v.verdict for v in verdicts] == ["adopt", "adopt", "inconclusive", "reject"]
    verdict, best = ladder_decision(verdicts, adopt=True)
    assert verdict == "adopted" and best.variant == "b"  # c gains most at s, but nothing at l
    assert ladder_decision(verdicts, adopt=False) == ("winner", best)
    assert ladder_decision(_verdicts({"c": (-0.9, 0.0), "d": (0.5, 0.5)}), adopt=True) == ("inconclusive", None)
    assert ladder_decision(_verdicts({"d": (0.5, 0.5), "e": (0.2, 0.3)}), adopt=True) == ("rejected", None)
