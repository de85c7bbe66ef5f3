"""``factory mix search``: the data mixture decided by small proxy runs, in the RegMix style.

RegMix (Liu et al., 2024, github.com/sail-sg/regmix): train many small proxy models on
mixtures drawn around the natural token distribution, fit a regression from the weights to the
target loss, search the fitted model over many candidate mixtures and average the best ones.
Here:

1. K mixtures are drawn from a Dirichlet centred on the components' token shares (the pinned
   files' text bytes stand in for tokens: the same tokenizer compresses each component at
   its own but fixed rate, and bytes are known without tokenizing anything).
2. Each is a trial of a sweep (``experiments.sweep``): a training run on its own manifest,
   pinned from the base manifest's snapshots, evaluated on the base manifest's held-out split.
3. Three regressions are fitted from weights to the target (a component's held-out loss or a
   weighted average): linear, quadratic (ridge) and LightGBM as RegMix uses. The one with the
   highest cross-validated Spearman correlation between predicted and actual metric (each
   trial predicted by a model that did not see it) is chosen; with a few dozen trials the
   simpler models usually win, with hundreds LightGBM does.
4. Many candidates from the same prior are scored by the chosen model; the mean of the best
   ``top`` is the optimum, written as a spec and pinned as a manifest whose ``provenance``
   records the search (sweep id, trials, fit), which every checkpoint's lineage carries.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from experiments import sweep_spec as checks
from experiments.sweep_spec import MIXTURE_KEY, read_spec, spec_hash, trial_resources
from experiments.tracking import log_to_sweep_run
from experiments.trial import TrialSetup
from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError, InputError
from trainer.tracking import metric_values

MODELS = ("linear", "quadratic", "lightgbm")
_SPEC_KEYS = {"name", "config", "trials", "seed", "set", "target", "nproc", "resources", "concentration",
              "candidates", "top", "folds", "min_weight", "prior"}  # fmt: skip
SEARCH = "the search spec"


@dataclass(frozen=True)
class SearchSpec:
    name: str
    config: str
    trials: int = 16
    seed: int = 0
    set: tuple[str, ...] = ()
    target: Mapping[str, float] = field(default_factory=dict)
    nproc: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    concentration: float = 1.0  # Dirichlet alpha = concentration × components × share: 1 spreads widely
    candidates: int = 20000
    top: int = 100
    folds: int = 0  # cross-validation folds; 0 = leave one out
    min_weight: float = 0.0  # floor on every sampled weight (so no component is left out entirely)
    # The Dirichlet's centre, {component: weight} (normalised); empty: the components' token shares.
    # A search run again after its data changed starts from the earlier optimum (docs/factory.md).
    prior: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        checks.check_shared(self, SEARCH)
        rule = "an integer >= 6 (a regression over the weights needs a few points)"
        checks.require(checks.is_int(self.trials) and self.trials >= 6, SEARCH, "trials", rule, self.trials)
        checks.check_int(self.seed, "seed", SEARCH, 0)
        checks.check_number(self.concentration, "concentration", SEARCH, "> 0", lambda v: v > 0)
        checks.check_int(self.top, "top", SEARCH, 1)
        checks.check_int(self.candidates, "candidates", SEARCH, self.top)
        folds, rule = self.folds, "an integer >= 0 other than 1 (0: leave one out)"
        checks.require(checks.is_int(folds) and folds >= 0 and folds != 1, SEARCH, "folds", rule, folds)
        checks.check_number(self.min_weight, "min_weight", SEARCH, "in [0, 0.5)", lambda v: 0 <= v < 0.5)
        checks.check_weights(self.prior, "prior", SEARCH)

    @cached_property
    def search_id(self) -> str:
        """The name and a hash of the spec and of the base manifest it searches over: trials
        measured on other data are never taken for this search's (``--resume`` finds only its own)."""
        from trainer.config import load_config

        manifest = Path(load_config(self.config, list(self.set)).data.manifest)
        try:
            fingerprint = json.loads(manifest.read_text(encoding="utf-8")).get("fingerprint")
        except (OSError, ValueError):
            fingerprint = None  # the search refuses a missing base manifest with its own message
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return f"{self.name}-{spec_hash({**fields, 'base_manifest': fingerprint})[:10]}"


def load_search_spec(path: str | Path) -> SearchSpec:
    path = Path(path)
    data = read_spec(path, "search")
    try:
        return search_spec_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def search_spec_from_dict(data: Mapping[str, Any]) -> SearchSpec:
    """A search spec from its keys (a spec file's, or a factory definition's mixture search)."""
    refuse_unknown_keys(data, _SPEC_KEYS, SEARCH)
    if "name" not in data or "config" not in data:
        raise ConfigError("a search spec needs `name` and `config` (the base training config)")
    cpus, gpus = trial_resources(data, SEARCH)
    data = {k: v for k, v in data.items() if k != "resources"}
    data["set"] = checks.check_overrides(data.get("set", []), SEARCH)
    return SearchSpec(**data, cpus=cpus, gpus=gpus)


def sample_mixtures(
    shares: Mapping[str, float], n: int, concentration: float, rng: np.random.Generator, min_weight: float = 0.0
) -> np.ndarray:
    """``n`` weight vectors (rows, in ``shares`` order) from a Dirichlet whose mean is ``shares``."""
    prior = np.array(list(shares.values()), dtype=float)
    alpha = concentration * len(prior) * prior / prior.sum()
    weights = rng.dirichlet(np.maximum(alpha, 1e-3), size=n)
    if min_weight:  # every component keeps at least min_weight; the rest is shared as drawn
        weights = min_weight + (1 - len(prior) * min_weight) * weights
    return weights


# --- the regressions: fit(X, y) -> predict(X) ---------------------------------------------------


def _linear(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    design = np.column_stack([x, np.ones(len(x))])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return lambda z: np.column_stack([z, np.ones(len(z))]) @ coef


def _quadratic_features(x: np.ndarray) -> np.ndarray:
    pairs = [x[:, i] * x[:, j] for i in range(x.shape[1]) for j in range(i, x.shape[1])]
    return np.column_stack([x, *pairs, np.ones(len(x))])


def _quadratic(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    # Ridge (a small penalty, intercept free): with few trials the squared terms would otherwise
    # fit the noise; written with numpy because the closed form is three lines.
    features = _quadratic_features(x)
    penalty = 1e-4 * len(x) * np.eye(features.shape[1])
    penalty[-1, -1] = 0.0
    coef = np.linalg.solve(features.T @ features + penalty, features.T @ y)
    return lambda z: _quadratic_features(z) @ coef


def _lightgbm(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    import lightgbm as lgb

    params = {
        "objective": "regression",
        "learning_rate": 0.05,
        "num_leaves": 7,
        "min_data_in_leaf": max(2, len(x) // 8),
        "min_data_in_bin": 1,
        "verbose": -1,
        "seed": 0,
        "deterministic": True,
        "num_threads": 1,
    }
    booster = lgb.train(params, lgb.Dataset(x, y, params={"verbose": -1}), num_boost_round=200)
    return booster.predict


FITTERS: dict[str, Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]] = {
    "linear": _linear,
    "quadratic": _quadratic,
    "lightgbm": _lightgbm,
}


def cross_validated_spearman(model: str, x: np.ndarray, y: np.ndarray, folds: int = 0) -> float:
    """Spearman's rho between each trial's metric and its prediction by ``model`` fitted on the
    other folds (leave-one-out when ``folds`` is 0): how well the fit ranks trials it never saw."""
    from scipy.stats import spearmanr

    n = len(y)
    k = n if not folds else min(folds, n)
    order = np.random.default_rng(0).permutation(n)
    predicted = np.empty(n)
    for fold in range(k):
        held = order[fold::k]
        kept = np.setdiff1d(order, held)
        predicted[held] = FITTERS[model](x[kept], y[kept])(x[held])
    rho = spearmanr(predicted, y).statistic
    return float(rho) if math.isfinite(rho) else -1.0


@dataclass(frozen=True)
class Fit:
    model: str
    cv_spearman: float
    scores: dict[str, float]  # every model's cross-validated Spearman
    optimum: dict[str, float]
    predicted: float  # the fitted model's prediction at the optimum


def fit_and_optimise(
    components: Sequence[str],
    weights: np.ndarray,
    metrics: np.ndarray,
    shares: Mapping[str, float],
    spec: SearchSpec,
) -> Fit:
    """Choose the regression by cross-validated Spearman, score candidates, average the best."""
    scores = {m: cross_validated_spearman(m, weights, metrics, spec.folds) for m in MODELS}
    model = max(MODELS, key=lambda m: (scores[m], -MODELS.index(m)))  # a tie goes to the simpler model
    predict = FITTERS[model](weights, metrics)
    rng = np.random.default_rng(spec.seed + 1)
    candidates = sample_mixtures(shares, spec.candidates, spec.concentration, rng, spec.min_weight)
    best = np.argsort(predict(candidates), kind="stable")[: spec.top]
    optimum = candidates[best].mean(axis=0)
    predicted = float(predict(optimum[None, :])[0])
    return Fit(model, scores[model], scores, dict(zip(components, map(float, optimum), strict=True)), predicted)


def search_prior(spec: SearchSpec, shares: Mapping[str, float]) -> dict[str, float]:
    """The Dirichlet's centre: the spec's ``prior`` (normalised, in the manifest's component order),
    else the components' token ``shares``."""
    if not spec.prior:
        return dict(shares)
    missing, unknown = sorted(set(shares) - set(spec.prior)), sorted(set(spec.prior) - set(shares))
    if missing or unknown:
        raise ConfigError(
            f"prior must give a weight for each component ({', '.join(shares)}): "
            f"missing {', '.join(missing) or 'none'}, unknown {', '.join(unknown) or 'none'}"
        )
    total = sum(spec.prior.values())
    return {name: float(spec.prior[name]) / total for name in shares}


def token_shares(manifest: Any) -> dict[str, float]:
    """Each component's share of the pinned text bytes (the Dirichlet's centre)."""
    sizes = {c.name: sum(f.text_bytes for f in c.files) for c in manifest.components}
    total = sum(sizes.values())
    if total <= 0:
        raise InputError("the base manifest's components hold no text: nothing to mix")
    return {name: size / total for name, size in sizes.items()}


@dataclass(frozen=True)
class SearchResult:
    search_id: str
    components: tuple[str, ...]
    shares: dict[str, float]
    rows: list[dict[str, Any]]
    fit: Fit
    outcome: Any  # the sweep's SweepOutcome

    def provenance(self, spec: SearchSpec) -> dict[str, Any]:
        """What a manifest pinned from this search records of it (into every checkpoint's lineage)."""
        return {
            "method": "factory mix search",
            "sweep_id": self.search_id,
            "table": "experiments.trials",
            "target": dict(spec.target),
            "prior": self.shares,
            "trials": [
                {"trial_id": r["trial_id"], "weights": r["params"][MIXTURE_KEY], "metric": r["metric"]}
                for r in self.rows
                if r.get("metric") is not None
            ],
            "fit": {
                "model": self.fit.model,
                "cv_spearman": self.fit.cv_spearman,
                "scores": self.fit.scores,
                "predicted_metric": self.fit.predicted,
                "candidates": spec.candidates,
                "top": spec.top,
            },
        }


@dataclass(frozen=True)
class SearchPlan:
    """What a search has checked before Ray starts: the trials' shared setup and the Dirichlet's centre."""

    setup: TrialSetup
    shares: dict[str, float]  # in the base manifest's component order


def plan_search(spec: SearchSpec, catalog_name: str | None = None) -> SearchPlan:
    """Check the search against its base config and manifest, before Ray starts."""
    from experiments.sweep import prepare_setup
    from mixtures.manifest import Manifest

    setup = prepare_setup(
        spec.search_id, "mix-search", spec.config, spec.set, nproc=spec.nproc, cpus=spec.cpus, target=spec.target,
        catalog_name=catalog_name,
    )  # fmt: skip
    shares = search_prior(spec, token_shares(Manifest.load(setup.base_manifest)))
    if len(shares) * spec.min_weight >= 1:  # the floors would take the whole mixture, or more
        raise ConfigError(
            f"{SEARCH}: min_weight {spec.min_weight:g} × {len(shares)} components is {len(shares) * spec.min_weight:g}: "
            f"it must stay below 1, so min_weight below {1 / len(shares):.4g}"
        )
    return SearchPlan(setup, shares)


def run_search(
    spec: SearchSpec,
    *,
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    catalog_name: str | None = None,
    trainable: Callable | None = None,
    plan: SearchPlan | None = None,
) -> SearchResult:
    """Sample K mixtures, run them as sweep trials, fit, and find the optimum. ``plan``: the search
    already checked by ``plan_search`` (else it is checked here, before Ray starts)."""
    from ray import tune

    from experiments.sweep import Schedule, run_trials
    from experiments.trial import run_trial

    plan = plan or plan_search(spec, catalog_name)
    setup, shares = plan.setup, plan.shares
    components = tuple(shares)
    samples = sample_mixtures(
        shares, spec.trials, spec.concentration, np.random.default_rng(spec.seed), spec.min_weight
    )
    mixtures = [dict(zip(components, map(float, row), strict=True)) for row in samples]
    space = {"params": {MIXTURE_KEY: tune.grid_search(mixtures)}}
    outcome = run_trials(
        setup,
        space,
        Schedule(cpus=spec.cpus, gpus=spec.gpus),
        resume=resume,
        address=address,
        num_cpus=num_cpus,
        trainable=trainable or run_trial,
    )
    scored = [r for r in outcome.rows if r.get("metric") is not None]
    if len(scored) < 6:
        raise InputError(
            f"only {len(scored)} of {spec.trials} proxy trials gave a metric (see `factory sweep report "
            f"{spec.search_id}`); a regression needs at least 6"
        )
    x = np.array([[float(r["params"][MIXTURE_KEY][c]) for c in components] for r in scored])
    y = np.array([float(r["metric"]) for r in scored])
    fit = fit_and_optimise(components, x, y, shares, spec)
    log_to_sweep_run(outcome.sweep_dir, fit_metrics(fit), {"search.model": fit.model})
    return SearchResult(spec.search_id, components, shares, outcome.rows, fit, outcome)


def fit_metrics(fit: Fit) -> dict[str, float]:
    """The fit as the search's MLflow parent run holds it: ``fit/cv_spearman`` (the chosen model's),
    ``fit/scores/<model>``, ``fit/predicted_metric`` and ``fit/optimum/<component>``."""
    values = {"cv_spearman": fit.cv_spearman, "scores": fit.scores, "predicted_metric": fit.predicted}
    return metric_values("fit", {**values, "optimum": fit.optimum})


def write_winner(catalog: Any, result: SearchResult, spec: SearchSpec, base_manifest: str, output: str | Path):
    """The optimum as a mixture spec (``<output stem>.toml``) and a pinned manifest at ``output``
    whose ``provenance`` records the search. Returns (manifest, spec path)."""
    from dataclasses import replace

    from experiments.reweight import pin_reweighted, reweighted_spec
    from lakehouse.local_files import write_atomically
    from mixtures.manifest import Manifest

    base = Manifest.load(base_manifest)
    name = f"{spec.name}-optimum"
    mixture = reweighted_spec(base, result.fit.optimum, name)
    spec_path = Path(output).with_suffix(".toml")
    write_atomically(spec_path, format_mixture_spec(mixture, result))
    manifest = replace(pin_reweighted(catalog, base, result.fit.optimum, name), provenance=result.provenance(spec))
    manifest.save(output)
    return manifest, spec_path


def format_mixture_spec(mixture: Any, result: SearchResult) -> str:
    """The winning mixture as a spec ``factory mix pin`` takes (snapshots pinned by id)."""
    lines = [
        f"# Chosen by `factory mix search` {result.search_id}: {result.fit.model} fit, cross-validated",
        f"# Spearman {result.fit.cv_spearman:.3f} over {len(result.rows)} proxy trials (experiments.trials).",
        f'name = "{mixture.name}"',
        f"seed = {mixture.seed}",
    ]
    for c in mixture.components:
        lines += ["", "[[components]]", f'name = "{c.name}"', f'table = "{c.table}"', f'ref = "{c.ref}"']
        lines.append(f"weight = {c.weight!r}")
        if c.filter is not None:
            lines.append(f"filter = {_toml_string(c.filter)}")
        lines.append(f"heldout_fraction = {c.heldout_fraction!r}")
    return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)


def format_search(result: SearchResult) -> str:
    fit = result.fit
    scored = [r["metric"] for r in result.rows if r.get("metric") is not None]
    lines = [
        f"mixture search {result.search_id}: {len(scored)} of {len(result.rows)} proxy trials gave a metric",
        "fit (cross-validated Spearman, predicted vs actual on held-out trials): "
        + ", ".join(f"{m} {s:.3f}" for m, s in fit.scores.items())
        + f"  → {fit.model}",
        "prior (Dirichlet centre): " + ", ".join(f"{k} {v:.3f}" for k, v in result.shares.items()),
        "optimum:              " + ", ".join(f"{k} {v:.3f}" for k, v in fit.optimum.items()),
        f"predicted metric {fit.predicted:.4f}; swarm median {float(np.median(scored)):.4f}, best {min(scored):.4f}",
    ]
    return "\n".join(lines)


def verify_optimum(
    spec: SearchSpec,
    result: SearchResult,
    manifest: str | Path,
    *,
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    catalog_name: str | None = None,
    trainable: Callable | None = None,
) -> dict[str, Any] | None:
    """Train on the winning ``manifest`` fresh, as one more trial (sweep id ``<search>-optimum``),
    evaluated on the same held-out batches as the proxies; its row, or None if it failed. Its
    checkpoints' lineage names the search (the manifest's provenance). ``resume``: continue that
    trial where a run was interrupted (or finished), else start it."""
    from ray import tune

    from experiments.sweep import TUNE_DIR, Schedule, prepare_setup, run_trials
    from experiments.sweep_spec import toml_literal
    from experiments.trial import run_trial
    from trainer.config import load_config

    base = str(Path(load_config(spec.config, list(spec.set)).data.manifest).resolve())
    overrides = [
        *spec.set,
        f"data.manifest={toml_literal(str(Path(manifest).resolve()))}",
        f"eval.manifest={toml_literal(base)}",
    ]
    setup = prepare_setup(
        f"{spec.search_id}-optimum", "mix-search", spec.config, overrides, nproc=spec.nproc, cpus=spec.cpus,
        target=spec.target, catalog_name=catalog_name,
    )  # fmt: skip
    space = {"params": {"variant": tune.grid_search(["optimum"])}}
    resume = resume and (Path(setup.sweep_dir) / TUNE_DIR).is_dir()  # interrupted before it began: start it
    outcome = run_trials(
        setup, space, Schedule(cpus=spec.cpus, gpus=spec.gpus), resume=resume, address=address, num_cpus=num_cpus,
        trainable=trainable or run_trial,
    )  # fmt: skip
    return next((r for r in outcome.rows if r.get("metric") is not None), None)


def format_verification(result: SearchResult, row: Mapping[str, Any] | None) -> str:
    scored = [r["metric"] for r in result.rows if r.get("metric") is not None]
    median, best = float(np.median(scored)), min(scored)
    if row is None:
        return "the chosen mixture, trained fresh: FAILED (see its row in experiments.trials)"
    metric = row["metric"]
    verdict = "beats the swarm median" if metric < median else "does NOT beat the swarm median"
    rank = 1 + sum(m < metric for m in scored)
    return (
        f"the chosen mixture, trained fresh: metric {metric:.4f} ({verdict} {median:.4f}; swarm best {best:.4f}; "
        f"it would rank {rank} of {len(scored) + 1})"
    )
