"""The ablation ladder: its sizes and equal-compute steps, its per-size paired test and verdict, and
the known answer on real Ray Tune and real training runs (a harmful variant is rejected at every
size, a variant identical to the base is never adopted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.ablation import BASE
from experiments.ladder import ADOPT, BETTER, INCONCLUSIVE, MISSING, NOISE, REJECT, WORSE, analyse_ladder, paired_test
from experiments.ladder_spec import STEPS_KEY, ladder_spec_from_dict, plan_ladder
from lakehouse.errors import ConfigError
from tests.conftest import run_factory
from tests.experiments.lakehouse_setup import Lakehouse, enter_lake, lake_fixture

STEPS = 30


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A training config whose model needs no tokenizer to be built (its vocabulary size is given)."""
    path = tmp_path / "train.toml"
    path.write_text(
        f'[data]\nmanifest = "m.json"\ntokenizer = "t.json"\nseq_len = 256\nglobal_batch_size = 8\n'
        f'[model]\npreset = "tiny"\nvocab_size = 300\n[train]\nsteps = {STEPS}\n'
    )
    return path


def _spec(config: Path, **keys) -> dict:
    return {
        "name": "arch",
        "config": str(config),
        "seeds": 2,
        "variants": {"gelu": {"model.feed_forward": "gelu"}},
    } | keys


def test_the_default_sizes_widen_the_base_and_every_run_is_given_the_bases_flops_at_its_size(config):
    spec = ladder_spec_from_dict(
        _spec(config, variants={"window": {"model.sliding_window": 8}, "eps": {"model.norm_eps": 0.1}})
    )
    assert spec.sizes == {"d64": {"model.dim": 64}, "d96": {"model.dim": 96}, "d128": {"model.dim": 128}}
    rungs = {(r.size, r.variant): r for r in plan_ladder(spec).rungs}
    assert [(s, v) for s, v in rungs][:3] == [("d64", BASE), ("d64", "window"), ("d64", "eps")]  # smallest first
    for size in spec.sizes:
        base, window, eps = rungs[(size, BASE)], rungs[(size, "window")], rungs[(size, "eps")]
        assert base.steps == STEPS and eps.steps == STEPS and eps.train_flops == base.train_flops  # same cost per token
        # A window of 8 keys costs less per token than 256: more steps, the same FLOPs to within half a step.
        assert window.flops_per_token < base.flops_per_token and window.steps > STEPS
        assert abs(window.train_flops - base.train_flops) <= window.flops_per_token * 8 * 256 / 2
        assert window.changes == {
            "model.dim": base.changes["model.dim"],
            "model.sliding_window": 8,
            STEPS_KEY: window.steps,
        }
    widths = [rungs[(s, BASE)].train_flops for s in spec.sizes]
    assert widths == sorted(widths) and len(set(widths)) == 3
    trials = plan_ladder(spec).trials(spec.ablation.seeds)
    assert len(trials) == 3 * 3 * 2 and {t["run.seed"] for t in trials} == {0, 1}


def test_a_variant_that_costs_more_per_token_trains_fewer_steps(config):
    spec = ladder_spec_from_dict(
        _spec(config, ladder={"sizes": {"narrow": {"model.dim": 64}, "wide": {"model.dim": 128}}})
    )
    rungs = {(r.size, r.variant): r for r in plan_ladder(spec).rungs}
    for size in ("narrow", "wide"):  # GELU's hidden width is 4·dim, SwiGLU's three matrices 8/3·dim each
        base, gelu = rungs[(size, BASE)], rungs[(size, "gelu")]
        assert gelu.flops_per_token != base.flops_per_token
        assert gelu.steps == round(base.train_flops / (gelu.flops_per_token * 8 * 256))


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"variants": {"longer": {"train.steps": 60}}}, "leave it out of the variant"),
        ({"ladder": {"sizes": {"only": {"model.dim": 64}}}}, "two sizes at least"),
        ({"ladder": {"sizes": {"a": {"model.dim": 64}, "b": {"run.seed": 3}}}}, "ladder.sizes.b: 'run.seed'"),
        ({"ladder": {"sizes": {"a": {"model.dim": 64}, "b": {}}}}, "ladder.sizes.b: give the training config key"),
        ({"ladder": {"widths": [1, 2]}}, "widths"),
        ({"ladder": {"sizes": {"a": {"model.dim": 64}, "b": {"model.dim": 70}}}}, "ladder.sizes.b"),
    ],
)
def test_a_ladder_that_cannot_be_run_is_refused_before_ray_starts(config, keys, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        plan_ladder(ladder_spec_from_dict(_spec(config, **keys)))


def test_the_cli_refuses_a_bad_ladder_with_exit_2(config, tmp_path):
    spec = tmp_path / "ladder.toml"
    spec.write_text(
        f'name = "arch"\nconfig = "{config}"\n[variants.gelu]\n"model.feed_forward" = "gelu"\n'
        '[ladder.sizes.only]\n"model.dim" = 64\n'
    )
    done = run_factory("ablate", str(spec), "--ladder")
    assert done.returncode == 2, done.stderr
    assert "two sizes at least" in done.stderr and str(spec) in done.stderr


def _rows(metrics: dict[tuple[str, str], list[float]], flops: dict[str, float]) -> list[dict]:
    """Trial rows as the ladder commits them: metric by (size, variant), one per seed."""
    rows = []
    for (size, variant), values in metrics.items():
        for seed, value in enumerate(values):
            params = {"size": size, "variant": variant, "run.seed": seed, STEPS_KEY: 10, "alpha": 0.05}
            rows.append({"status": "completed", "metric": value, "params": params | {"train_flops": flops[size]}})
    return rows


FLOPS = {"s": 1e9, "m": 2e9, "l": 4e9}
BASES = {"s": [4.0, 4.2, 4.1], "m": [3.8, 3.9, 3.85], "l": [3.5, 3.7, 3.6]}


def _ladder(variant: dict[str, list[float]]):
    metrics = {(s, BASE): v for s, v in BASES.items()} | {(s, "v"): v for s, v in variant.items()}
    (verdict,) = analyse_ladder(_rows(metrics, FLOPS))
    return verdict


def test_the_paired_difference_its_interval_and_test():
    p, interval = paired_test([1.0, 2.0], [1.1, 2.3], 0.05)
    # Differences 0.1 and 0.3: mean 0.2, standard error 0.1, t = 2 on 1 degree of freedom; its
    # 95% quantile 12.706.
    assert p == pytest.approx(0.2952, abs=1e-4)
    assert interval == pytest.approx((0.2 - 1.27062, 0.2 + 1.27062), abs=1e-4)
    assert paired_test([1.0, 2.0], [1.0, 2.0], 0.05) == (1.0, (0.0, 0.0))  # the same runs: no difference
    assert paired_test([1.0], [2.0], 0.05) == (None, None)


def test_the_verdict_needs_the_same_answer_beyond_noise_at_every_size():
    worse = _ladder({s: [b + 0.5 + 0.01 * i for i, b in enumerate(v)] for s, v in BASES.items()})
    assert [r.outcome for r in worse.sizes] == [WORSE] * 3 and worse.verdict == REJECT
    assert [r.size for r in worse.sizes] == ["s", "m", "l"] and worse.sign_holds
    assert "every size (3 of 3)" in worse.reason

    effects = {"s": 0.1, "m": 0.2, "l": 0.4}
    growing = _ladder({s: [b - effects[s] - 0.001 * i for i, b in enumerate(v)] for s, v in BASES.items()})
    assert growing.verdict == ADOPT and growing.trend == "holds in sign and grows with scale"
    assert growing.slope == pytest.approx(-0.15, abs=0.01)  # -0.1, -0.2, -0.4 over log2 FLOPs 0, 1, 2

    flips = _ladder({"s": [b - 0.3 - 0.01 * i for i, b in enumerate(BASES["s"])], "m": BASES["m"],
                     "l": [b + 0.3 + 0.01 * i for i, b in enumerate(BASES["l"])]})  # fmt: skip
    assert [r.outcome for r in flips.sizes] == [BETTER, NOISE, WORSE] and flips.verdict == INCONCLUSIVE
    assert not flips.sign_holds and "changes sign" in flips.reason and "better at s" in flips.reason

    identical = _ladder(BASES)
    assert identical.verdict == INCONCLUSIVE and all(r.p_value == 1.0 for r in identical.sizes)

    one_seed = _ladder({"s": [5.0, 5.0, 5.0], "m": [5.0, 5.0, 5.0], "l": [5.0]})  # the others failed
    assert one_seed.sizes[2].outcome == MISSING and one_seed.verdict == INCONCLUSIVE
    assert "fewer than two paired seeds at l" in one_seed.reason
    unfinished = _ladder({"s": BASES["s"], "m": BASES["m"]})  # the variant has no row at l yet
    assert [r.outcome for r in unfinished.sizes] == [NOISE, NOISE, MISSING] and unfinished.verdict == INCONCLUSIVE
    assert unfinished.sizes[2].compute == "-"
    # A failed trial keeps the metric of its last evaluation before it failed: a missing seed.
    rows = _rows({(s, BASE): v for s, v in BASES.items()} | {(s, "v"): [5.0, 5.0, 5.0] for s in BASES}, FLOPS)
    for row in rows:
        if row["params"]["variant"] == "v" and row["params"]["size"] == "l" and row["params"]["run.seed"]:
            row["status"] = "failed"
    (failed,) = analyse_ladder(rows)
    assert failed.sizes[2].outcome == MISSING and "fewer than two paired seeds at l" in failed.reason


lake = lake_fixture("ladder-home")


@pytest.mark.engine
@pytest.mark.slow
def test_a_harmful_variant_is_rejected_at_every_size_and_the_base_again_is_never_adopted(lake: Lakehouse, monkeypatch):
    from mlflow import MlflowClient

    from experiments.ladder import format_ladder, run_ladder
    from experiments.trials_table import read_trials
    from lakehouse.catalog import load_catalog

    enter_lake(lake, monkeypatch)
    spec = ladder_spec_from_dict(
        {
            "name": "known",
            "config": str(lake.config),
            "seeds": 2,
            "set": ["train.steps=6"],
            # A norm's epsilon far above its inputs' mean square scales every activation to nearly
            # zero: the logits stay uniform, the loss log(vocabulary).
            "variants": {"huge-eps": {"model.norm_eps": 1e6}, "base-again": {"model.norm_eps": 1e-5}},
            "ladder": {"sizes": {"d32": {"model.dim": 32}, "d48": {"model.dim": 48}}},
        }
    )
    # 2 Ray CPUs run 2 one-CPU trials at once on 2 cores (more at once only add Ray workers and
    # contention: tests/experiments/test_sweeps.py), and each trains with one thread whatever runs
    # beside it, so the metrics are the same as one or four at a time.
    outcome, verdicts = run_ladder(spec, num_cpus=2)
    print(format_ladder(spec.ladder_id, verdicts, spec.ablation.alpha))
    by_name = {v.variant: v for v in verdicts}
    harmful, again = by_name["huge-eps"], by_name["base-again"]
    assert [r.outcome for r in harmful.sizes] == [WORSE, WORSE] and harmful.verdict == REJECT
    assert all(r.compute == "equal steps" for r in harmful.sizes)
    # The base again on the base's seeds is the base's run bit for bit: no difference at any size.
    assert again.verdict == INCONCLUSIVE and all(r.differences == (0.0, 0.0) for r in again.sizes)

    rows = read_trials(load_catalog(), spec.ladder_id)  # the ladder's rows, linked by its id
    assert len(rows) == 2 * 3 * 2 and {r["kind"] for r in rows} == {"ladder"}
    assert {(r["params"]["size"], r["params"]["variant"]) for r in rows} == {
        (s, v) for s in ("d32", "d48") for v in (BASE, "huge-eps", "base-again")
    }
    record = json.loads((outcome.sweep_dir / "mlflow.json").read_text())
    tags = MlflowClient(record["tracking_uri"]).get_run(record["run_id"]).data.tags
    assert tags["ladder.huge-eps"] == REJECT and tags["ladder.base-again"] == INCONCLUSIVE
