"""The mixture search on a synthetic target with a known optimum, its trials scheduled by real Ray
Tune; and the winning manifest carries the search into lineage."""

from __future__ import annotations

import numpy as np
import pytest

from tests.pipelines.dedup_corpus import write_table

# The synthetic target: a smooth bowl over the simplex with its minimum at OPTIMUM, as a
# held-out loss is over mixture weights near a good mixture (RegMix's observation).
OPTIMUM = {"a": 0.5, "b": 0.3, "c": 0.2}
TOLERANCE = 0.05  # every weight of the found optimum within 0.05 of the true one


def synthetic_loss(weights: dict[str, float]) -> float:
    return 2.0 + sum((weights[k] - v) ** 2 * (1 + i) for i, (k, v) in enumerate(OPTIMUM.items()))


def synthetic_trial(config: dict, setup) -> None:
    """A trial that trains nothing: its metric is the synthetic loss of its weights."""
    from ray import tune

    weights = config["params"]["mixture"]
    loss = synthetic_loss(weights)
    tune.report({"target": loss, "final_loss": {"a": loss}, "done_training": True, "wall_seconds": 0.0})


def synthetic_optimum_trial(config: dict, setup) -> None:
    """The verification trial that trains nothing: the synthetic loss of the manifest it was given."""
    from ray import tune

    from mixtures.manifest import Manifest

    (path,) = [o.split("=", 1)[1].strip('"') for o in setup.overrides if o.startswith("data.manifest=")]
    loss = synthetic_loss({c.name: c.weight for c in Manifest.load(path).components})
    tune.report({"target": loss, "final_loss": {"a": loss}, "done_training": True, "wall_seconds": 0.0})


def _lake(catalog, home):
    """Three tiny tables (a, b, c holding text in ratio 4:4:2), their manifest and a config."""
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict

    for name, n in (("a", 40), ("b", 40), ("c", 20)):
        docs = [{"doc_id": f"{name}{i}", "source": name, "text": "x" * 100} for i in range(n)]
        write_table(catalog, f"raw.{name}", docs, run_id=f"fixture-{name}")
    spec = {"seed": 1, "components": [{"name": n, "table": f"raw.{n}", "weight": 1.0} for n in OPTIMUM]}
    pin(catalog, spec_from_dict(spec)).save(home / "manifest.json")
    (home / "train.toml").write_text(f'[data]\nmanifest = "{home / "manifest.json"}"\ntokenizer = "unused"\n')
    return home / "train.toml"


@pytest.mark.engine
@pytest.mark.slow
def test_the_search_recovers_a_known_optimum_and_pins_it_with_its_provenance(catalog, factory_home, tmp_path):
    from experiments.mixture_search import SearchSpec, run_search, token_shares, verify_optimum, write_winner
    from lakehouse.errors import InputError
    from mixtures.manifest import Manifest

    config = _lake(catalog, factory_home)
    spec = SearchSpec(name="synthetic", config=str(config), trials=16, seed=3, target={"a": 1.0})
    result = run_search(spec, num_cpus=2, trainable=synthetic_trial)

    assert len(result.rows) == 16 and all(r["status"] == "completed" for r in result.rows)
    assert result.shares == pytest.approx(token_shares(Manifest.load(factory_home / "manifest.json")))
    found = result.fit.optimum
    assert max(abs(found[k] - v) for k, v in OPTIMUM.items()) <= TOLERANCE, found
    assert result.fit.cv_spearman > 0.8
    best_trial = min(r["metric"] for r in result.rows)
    assert synthetic_loss(found) < best_trial  # better than any proxy it was fitted on

    manifest, spec_path = write_winner(catalog, result, spec, str(factory_home / "manifest.json"), tmp_path / "m.json")
    loaded = Manifest.load(tmp_path / "m.json")
    assert loaded.fingerprint == manifest.fingerprint
    assert {c.name: c.weight for c in loaded.components} == pytest.approx(found)
    assert loaded.provenance["sweep_id"] == result.search_id
    assert len(loaded.provenance["trials"]) == 16 and loaded.provenance["fit"]["model"] == result.fit.model
    assert 'ref = "' in spec_path.read_text()  # the spec pins each snapshot by id

    # --verify trains on the winner as one more trial; `--resume --verify` again continues that
    # trial (here finished) where a fresh start of it is refused.
    winner, options = tmp_path / "m.json", {"num_cpus": 2, "trainable": synthetic_optimum_trial}
    checked = verify_optimum(spec, result, winner, **options)
    assert checked["metric"] == pytest.approx(synthetic_loss(found))
    again = verify_optimum(spec, result, winner, resume=True, **options)
    assert again["metric"] == checked["metric"] and again["trial_id"] == checked["trial_id"]
    with pytest.raises(InputError, match="was started before"):
        verify_optimum(spec, result, winner, **options)


def test_each_regression_ranks_unseen_trials_of_a_smooth_target():
    from experiments.mixture_search import MODELS, cross_validated_spearman, sample_mixtures

    rng = np.random.default_rng(0)
    x = sample_mixtures(OPTIMUM, 40, 1.0, rng)
    y = np.array([synthetic_loss(dict(zip(OPTIMUM, row, strict=True))) for row in x])
    scores = {m: cross_validated_spearman(m, x, y, folds=5) for m in MODELS}
    assert scores["quadratic"] > 0.95  # the true form
    assert scores["linear"] < scores["quadratic"]
    assert scores["lightgbm"] > 0.3


def test_dirichlet_samples_centre_on_the_token_shares():
    from experiments.mixture_search import sample_mixtures

    shares = {"a": 0.6, "b": 0.3, "c": 0.1}
    samples = sample_mixtures(shares, 4000, 1.0, np.random.default_rng(1), min_weight=0.01)
    assert np.allclose(samples.sum(axis=1), 1.0)
    assert samples.min() >= 0.01 - 1e-12
    assert samples.mean(axis=0) == pytest.approx([0.6, 0.3, 0.1], abs=0.02)


def curve_trial(config: dict, setup) -> None:
    """Four evaluations whose loss falls from the trial's own level: the worst levels stay worst."""
    from ray import tune

    level = config["params"]["level"]
    for step in range(1, 5):
        loss = level + 1.0 / step
        tune.report({"target": loss, "final_loss": {"a": loss}, "step": step, "done_training": step == 4})


@pytest.mark.engine
@pytest.mark.slow
def test_asha_stops_the_worst_trials_early_and_they_are_recorded_as_stopped(catalog, factory_home, tmp_path):
    from ray import tune

    from experiments.sweep import Schedule, run_trials, sweep_dir_of
    from experiments.sweep_spec import Asha
    from experiments.trial import TrialSetup

    # The trials are synthetic curves, not training runs: the base config only says not to track them.
    config = tmp_path / "base.toml"
    config.write_text('[data]\nmanifest = "m.json"\ntokenizer = "t.json"\n\n[mlflow]\nenabled = false\n')
    setup = TrialSetup("asha", "sweep", str(sweep_dir_of("asha")), "/", str(config), (), 1, 1, "-")
    space = {"params": {"level": tune.grid_search([1.0, 2.0, 3.0, 4.0])}}
    # One trial at a time, so each reaches a rung after the better ones have set its bar.
    schedule = Schedule(cpus=2, asha=Asha(grace_period=1, reduction_factor=2))
    outcome = run_trials(setup, space, schedule, num_cpus=2, trainable=curve_trial)

    status = {r["params"]["level"]: r["status"] for r in outcome.rows}
    assert status[1.0] == "completed"
    assert "stopped" in status.values()
    stopped = [r for r in outcome.rows if r["status"] == "stopped"]
    assert all(r["metric"] is not None and r["params"]["level"] > 1.0 for r in stopped)
