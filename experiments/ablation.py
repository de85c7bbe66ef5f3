"""Ablations: a base run and named variants that each change one thing, all over N seeds.

A spec is a TOML file::

    name = "text-filter"
    config = "configs/demo-train.toml"   # the base run
    seeds = 3                            # every variant and the base run with run.seed 0..N-1
    set = ["train.steps=40"]
    target = { text = 1.0 }              # the metric (default: every component alike)
    [resources]
    cpus = 1
    [variants.low-lr]
    "optim.lr" = 3e-5                    # any training config key
    [variants.stricter-text]
    "component.text" = "filtered.text@strict"   # a component read from another table or snapshot
    [variants.wider]
    "model.dim" = 128

A filter config is ablated through its output: run ``factory filter`` with it into a new table
(or tag), then name that table in a ``component.<name>`` variant.

The report gives each variant's difference from the base, paired by seed, as mean ± standard
deviation, and whether it exceeds seed noise by Welch's t-test (two-sided, ``alpha``): the
base's and the variant's metrics over seeds are two samples whose variances need not be equal
(a change can make training more or less stable), and with a handful of seeds a t-test's
heavier tails are what keep two or three lucky seeds from reading as an effect.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.sweep_spec import (
    check_number,
    check_overrides,
    check_shared,
    is_int,
    read_spec,
    require,
    spec_hash,
    table,
    trial_resources,
)
from experiments.tracking import log_to_sweep_run
from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError
from trainer.tracking import metric_values

BASE = "base"
SEED_KEY = "run.seed"
# ``ladder``: the sizes of `factory ablate --ladder` (experiments/ladder_spec.py); a plain ablation runs at the base's size.
_SPEC_KEYS = {"name", "config", "seeds", "set", "target", "nproc", "resources", "variants", "alpha", "ladder"}
ABLATION = "the ablation spec"


@dataclass(frozen=True)
class AblationSpec:
    name: str
    config: str
    variants: Mapping[str, Mapping[str, Any]]
    seeds: int = 3
    set: tuple[str, ...] = ()
    target: Mapping[str, float] = field(default_factory=dict)
    nproc: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    alpha: float = 0.05

    def __post_init__(self) -> None:
        check_shared(self, ABLATION)
        rule = "an integer >= 2 (seed noise needs two seeds at least)"
        require(is_int(self.seeds) and self.seeds >= 2, ABLATION, "seeds", rule, self.seeds)
        check_number(self.alpha, "alpha", ABLATION, "in (0, 1)", lambda a: 0 < a < 1)
        if not self.variants:
            raise ConfigError("an ablation needs at least one [variants.NAME] table")
        if BASE in self.variants:
            raise ConfigError(f"{BASE!r} is the base run; give the variant another name")
        for name, changes in self.variants.items():
            if not isinstance(changes, Mapping) or not changes:
                raise ConfigError(f"variant {name!r}: give the key(s) it changes")
            if SEED_KEY in changes:
                raise ConfigError(f"variant {name!r}: {SEED_KEY} is set by `seeds`")
            for key in changes:
                if "." not in key:
                    raise ConfigError(f"variant {name!r}: {key!r} is not section.key or component.<name>")

    @property
    def ablation_id(self) -> str:
        return f"{self.name}-{spec_hash(self.__dict__)[:10]}"

    def trials(self) -> list[dict[str, Any]]:
        """Every (variant, seed) as one trial's parameters, the base first."""
        runs = [(BASE, {}), *self.variants.items()]
        return [{"variant": name, SEED_KEY: seed, **changes} for name, changes in runs for seed in range(self.seeds)]


def load_ablation_spec(path: str | Path) -> AblationSpec:
    path = Path(path)
    data = read_spec(path, "ablation")
    try:
        return ablation_spec_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def ablation_spec_from_dict(data: Mapping[str, Any]) -> AblationSpec:
    """An ablation spec from its keys (a spec file's, or a factory definition's ablation)."""
    refuse_unknown_keys(data, _SPEC_KEYS, ABLATION)
    if "name" not in data or "config" not in data:
        raise ConfigError("an ablation spec needs `name` and `config` (the base training config)")
    cpus, gpus = trial_resources(data, ABLATION)
    alpha = data.get("alpha", 0.05)
    check_number(alpha, "alpha", ABLATION, "in (0, 1)", lambda a: 0 < a < 1)  # before float() takes a string
    return AblationSpec(
        name=data["name"],
        config=str(data["config"]),
        variants=table(data, "variants", ABLATION),
        seeds=data.get("seeds", 3),
        set=check_overrides(data.get("set", []), ABLATION),
        target=table(data, "target", ABLATION),
        nproc=data.get("nproc", 1),
        cpus=cpus,
        gpus=gpus,
        alpha=float(alpha),
    )


@dataclass(frozen=True)
class VariantReport:
    variant: str
    metrics: tuple[float, ...]  # by seed
    differences: tuple[float, ...]  # variant - base, paired by seed
    p_value: float | None
    exceeds_noise: bool

    @property
    def mean(self) -> float:
        return statistics.fmean(self.metrics)

    @property
    def std(self) -> float:
        return statistics.stdev(self.metrics) if len(self.metrics) > 1 else 0.0

    @property
    def difference(self) -> float:
        return statistics.fmean(self.differences) if self.differences else math.nan

    @property
    def difference_std(self) -> float:
        return statistics.stdev(self.differences) if len(self.differences) > 1 else 0.0


def noise_test(base: Sequence[float], variant: Sequence[float], alpha: float) -> tuple[float | None, bool]:
    """Welch's two-sided t-test: (p, whether the variant's mean differs beyond seed noise).

    Two samples with no spread at all (the same seeds give the same run, bit for bit) differ
    exactly when their values do; the t statistic is undefined there."""
    from scipy.stats import ttest_ind

    if len(base) < 2 or len(variant) < 2:
        return None, False
    if statistics.pstdev(base) == 0 and statistics.pstdev(variant) == 0:
        same = statistics.fmean(base) == statistics.fmean(variant)
        return (1.0 if same else 0.0), not same
    p = float(ttest_ind(variant, base, equal_var=False).pvalue)
    return p, p < alpha


# A variant with fewer than two completed seeds, or beside a base with fewer: no test was possible.
UNTESTED = "not tested (fewer than 2 completed seeds)"


def untested(reports: Sequence[VariantReport]) -> list[str]:
    """The variants that could not be tested against the base (failed trials)."""
    return [r.variant for r in reports if r.variant != BASE and r.p_value is None]


def completed_metric(row: Mapping[str, Any]) -> float | None:
    """A trial's metric if it completed; None for a failed one, whose metric (if it has one) is from
    an evaluation before it failed: a missing seed, not a measurement."""
    return row.get("metric") if row.get("status") == "completed" else None


def analyse(rows: Sequence[Mapping[str, Any]], alpha: float) -> list[VariantReport]:
    """Each variant (the base first) against the base, from the ablation's trial rows; a variant
    none of whose trials completed is there with no seeds, never left out."""
    by_variant: dict[str, dict[int, float]] = {}
    for row in rows:
        params = row.get("params") or {}
        seeds = by_variant.setdefault(params["variant"], {})
        if completed_metric(row) is not None:
            seeds[int(params[SEED_KEY])] = row["metric"]
    base = by_variant.get(BASE, {})
    reports = []
    for name in [BASE, *sorted(set(by_variant) - {BASE})]:
        seeds = by_variant.get(name, {})
        metrics = tuple(seeds[s] for s in sorted(seeds))
        differences = tuple(seeds[s] - base[s] for s in sorted(seeds) if s in base)
        p, exceeds = (None, False) if name == BASE else noise_test(list(base.values()), list(metrics), alpha)
        reports.append(VariantReport(name, metrics, differences, p, exceeds))
    return reports


def format_ablation(reports: Sequence[VariantReport], alpha: float) -> str:
    lines = [
        f"{'VARIANT':<20} {'SEEDS':>5}  {'METRIC mean ± std':<20} {'DIFF vs base mean ± std':<26} {'p (Welch)':>9}  "
        "BEYOND SEED NOISE"
    ]
    for r in reports:
        metric = f"{r.mean:.4f} ± {r.std:.4f}" if r.metrics else "-"
        if r.variant == BASE:
            diff, p, verdict = "-", "-", "(base)"
        else:
            diff = f"{r.difference:+.4f} ± {r.difference_std:.4f}" if r.differences else "-"
            p = "-" if r.p_value is None else f"{r.p_value:.3g}"
            verdict = "yes" if r.exceeds_noise else "no" if r.p_value is not None else UNTESTED
        lines.append(f"{r.variant:<20} {len(r.metrics):>5}  {metric:<20} {diff:<26} {p:>9}  {verdict}")
    lines.append(f"(Welch's two-sided t-test of the variant's seeds against the base's, alpha {alpha:g})")
    return "\n".join(lines)


def run_ablation(
    spec: AblationSpec,
    *,
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    catalog_name: str | None = None,
):
    """Every variant and the base over the seeds as trials on Ray Tune; their rows and the report."""
    from ray import tune

    from experiments.sweep import Schedule, prepare_setup, run_trials

    setup = prepare_setup(
        spec.ablation_id, "ablate", spec.config, spec.set, nproc=spec.nproc, cpus=spec.cpus, target=spec.target,
        catalog_name=catalog_name, trials=[(f"variants.{name}", changes) for name, changes in spec.variants.items()],
    )  # fmt: skip
    space = {"params": tune.grid_search(spec.trials())}
    outcome = run_trials(
        setup, space, Schedule(cpus=spec.cpus, gpus=spec.gpus), resume=resume, address=address, num_cpus=num_cpus
    )
    reports = analyse(outcome.rows, spec.alpha)
    log_to_sweep_run(outcome.sweep_dir, *verdicts(reports))
    return outcome, reports


def verdicts(reports: Sequence[VariantReport]) -> tuple[dict[str, float], dict[str, str]]:
    """The report as the ablation's MLflow parent run holds it: metrics ``ablation/<variant>/…`` (the
    metric's mean and std over seeds, the paired difference's, the p-value) and a tag per variant,
    ``ablation.<variant>``: ``beyond seed noise``, ``within seed noise`` or ``base``."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    for r in reports:
        values = {"metric_mean": r.mean, "metric_std": r.std} if r.metrics else {}
        if r.variant != BASE:
            tags[f"ablation.{r.variant}"] = (
                "beyond seed noise" if r.exceeds_noise else "within seed noise" if r.p_value is not None else UNTESTED
            )
            values |= {"difference": r.difference, "difference_std": r.difference_std} if r.differences else {}
            values |= {"p_value": r.p_value} if r.p_value is not None else {}
        else:
            tags[f"ablation.{BASE}"] = BASE
        metrics |= metric_values(f"ablation/{r.variant}", values)
    return metrics, tags
