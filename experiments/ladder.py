"""``factory ablate SPEC --ladder``: the ablation's base and variants at several sizes, N seeds each,
at equal training compute; per size a paired test, across sizes the sign and its trend, a verdict.

Per size, a variant's metric is paired with the base's by seed (the same initialisation seed and
data order), and the paired t-test (two-sided, ``alpha``) asks whether the mean of the
differences is zero; its (1 - alpha) interval is the t interval of that mean. Pairing removes
what the two runs of a seed share, which with a handful of seeds is most of the noise.

The verdict asks for the same answer at every size, which is what makes a ladder worth its cost:

- ``adopt``: better than the base (a lower metric) beyond seed noise at every size;
- ``reject``: worse beyond seed noise at every size;
- ``inconclusive``: anything else (within noise at some size, a sign that flips with scale, a
  size without two paired seeds), the reason says which.

Under no effect, a size comes out beyond noise with probability ``alpha``, and a verdict other
than ``inconclusive`` needs that at every size: the false-positive rate stays at or under alpha.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.ablation import BASE, SEED_KEY, completed_metric
from experiments.ladder_spec import STEPS_KEY, LadderSpec, plan_ladder
from trainer.tracking import metric_values

KIND = "ladder"
ADOPT, REJECT, INCONCLUSIVE = "adopt", "reject", "inconclusive"
BETTER, WORSE, NOISE, MISSING = "better", "worse", "within seed noise", "missing seeds"


@dataclass(frozen=True)
class SizeResult:
    """One variant against the base at one size."""

    size: str
    steps: int
    base_steps: int
    flops_ratio: float  # the variant's training FLOPs over the base's at this size
    base_flops: float
    base: tuple[float, ...]  # the base's metric, by seed
    metrics: tuple[float, ...]  # the variant's, by seed
    differences: tuple[float, ...]  # variant - base, paired by seed
    p_value: float | None
    interval: tuple[float, float] | None
    outcome: str  # BETTER, WORSE, NOISE or MISSING

    @property
    def difference(self) -> float:
        return statistics.fmean(self.differences) if self.differences else math.nan

    @property
    def compute(self) -> str:
        """How this size compares: equal steps when the variant costs what the base does per step, else
        equal FLOPs as near as whole steps allow (the variant's steps and its FLOPs over the base's)."""
        if math.isnan(self.flops_ratio):  # the base or the variant has no row at this size
            return "-"
        if self.steps == self.base_steps and self.flops_ratio == 1:
            return "equal steps"
        return f"equal FLOPs: {self.steps} steps, x{self.flops_ratio:.3f}"


@dataclass(frozen=True)
class LadderVerdict:
    variant: str
    sizes: tuple[SizeResult, ...]  # smallest first
    sign_holds: bool
    trend: str
    slope: float | None  # change of the mean difference per doubling of the base's training FLOPs
    verdict: str
    reason: str


def paired_test(base: Sequence[float], variant: Sequence[float], alpha: float):
    """The paired two-sided t-test of ``variant - base``: (p, its (1 - alpha) interval), None for
    fewer than two pairs. Differences that do not vary (the same runs, bit for bit) are their own
    interval: zero is no difference, anything else one beyond noise."""
    from scipy.stats import ttest_rel

    differences = [v - b for b, v in zip(base, variant, strict=True)]
    if len(differences) < 2:
        return None, None
    mean = statistics.fmean(differences)
    if statistics.pstdev(differences) == 0:
        return (1.0 if mean == 0 else 0.0), (mean, mean)
    result = ttest_rel(variant, base)
    interval = result.confidence_interval(confidence_level=1 - alpha)
    return float(result.pvalue), (float(interval.low), float(interval.high))


def analyse_ladder(rows: Sequence[Mapping[str, Any]]) -> list[LadderVerdict]:
    """Each variant's verdict from the ladder's trial rows (their params carry size, variant, seed,
    steps, training FLOPs and alpha)."""
    metric: dict[tuple[str, str], dict[int, float]] = {}
    steps: dict[tuple[str, str], int] = {}
    flops: dict[tuple[str, str], float] = {}
    alpha = 0.05
    for row in rows:
        params = row.get("params") or {}
        key = (params["size"], params["variant"])
        steps[key], flops[key], alpha = int(params[STEPS_KEY]), float(params["train_flops"]), float(params["alpha"])
        if completed_metric(row) is not None:
            metric.setdefault(key, {})[int(params[SEED_KEY])] = row["metric"]
    # Every size any row names, smallest first: a size where the base or a variant has no row yet
    # (an interrupted ladder) is there with its seeds missing, never silently left out.
    any_flops = {size: f for (size, _), f in flops.items()}
    sizes = sorted(any_flops, key=lambda size: flops.get((size, BASE), any_flops[size]))
    variants = sorted({v for _, v in steps} - {BASE})
    return [_verdict(v, [_size(s, v, metric, steps, flops, alpha) for s in sizes]) for v in variants]


def _size(size: str, variant: str, metric, steps, flops, alpha: float) -> SizeResult:
    if (size, BASE) not in steps or (size, variant) not in steps:
        return SizeResult(size, steps.get((size, variant), 0), steps.get((size, BASE), 0), math.nan,
                          flops.get((size, BASE), math.nan), (), (), (), None, None, MISSING)  # fmt: skip
    base_seeds, seeds = metric.get((size, BASE), {}), metric.get((size, variant), {})
    paired = sorted(set(base_seeds) & set(seeds))
    base, values = [base_seeds[s] for s in paired], [seeds[s] for s in paired]
    p, interval = paired_test(base, values, alpha)
    difference = statistics.fmean(values) - statistics.fmean(base) if paired else 0.0
    outcome = MISSING if p is None else NOISE if p >= alpha else BETTER if difference < 0 else WORSE
    return SizeResult(
        size, steps[(size, variant)], steps[(size, BASE)], flops[(size, variant)] / flops[(size, BASE)],
        flops[(size, BASE)], tuple(base), tuple(values), tuple(v - b for b, v in zip(base, values, strict=True)),
        p, interval, outcome,
    )  # fmt: skip


def _verdict(variant: str, sizes: list[SizeResult]) -> LadderVerdict:
    sign_holds, trend, slope = scale_trend(sizes)
    outcomes = [r.outcome for r in sizes]
    if MISSING in outcomes:
        missing = ", ".join(r.size for r in sizes if r.outcome == MISSING)
        return LadderVerdict(
            variant, tuple(sizes), sign_holds, trend, slope, INCONCLUSIVE,
            f"fewer than two paired seeds at {missing} (failed or unfinished trials)",
        )  # fmt: skip
    if all(o == BETTER for o in outcomes):
        verdict, reason = ADOPT, f"better than the base beyond seed noise at every size ({len(sizes)} of {len(sizes)})"
    elif all(o == WORSE for o in outcomes):
        verdict, reason = REJECT, f"worse than the base beyond seed noise at every size ({len(sizes)} of {len(sizes)})"
    else:
        by_outcome = {o: [r.size for r in sizes if r.outcome == o] for o in (BETTER, WORSE, NOISE)}
        verdict = INCONCLUSIVE
        reason = "; ".join(f"{o} at {', '.join(names)}" for o, names in by_outcome.items() if names)
    return LadderVerdict(variant, tuple(sizes), sign_holds, trend, slope, verdict, f"{reason}; the effect {trend}")


def scale_trend(sizes: Sequence[SizeResult]) -> tuple[bool, str, float | None]:
    """(whether the mean difference has one sign at every size, the trend in words, its least-squares
    slope per doubling of the base's training FLOPs)."""
    known = [r for r in sizes if r.differences]
    means = [r.difference for r in known]
    if len(known) < 2:
        return False, "cannot be traced across sizes (fewer than two sizes measured)", None
    slope = None
    if len({r.base_flops for r in known}) > 1:
        slope = statistics.linear_regression([math.log2(r.base_flops) for r in known], means).slope
    if all(m == 0 for m in means):
        return False, "is zero at every size", slope
    sign_holds = all(m > 0 for m in means) or all(m < 0 for m in means)
    magnitudes = [abs(m) for m in means]
    if not sign_holds:
        trend = "changes sign across sizes"
    elif all(a < b for a, b in itertools.pairwise(magnitudes)):
        trend = "holds in sign and grows with scale"
    elif all(a > b for a, b in itertools.pairwise(magnitudes)):
        trend = "holds in sign and shrinks with scale"
    else:
        trend = "holds in sign, with no steady trend in scale"
    return sign_holds, trend, slope


def format_ladder(ladder_id: str, verdicts: Sequence[LadderVerdict], alpha: float) -> str:
    matched = any(r.compute != "equal steps" for v in verdicts for r in v.sizes)
    compute = (
        "at equal training FLOPs: a variant that changes the cost per token trains the steps that spend the base's FLOPs"
        if matched
        else "at equal steps: no variant changes the cost per token, so equal steps are equal FLOPs"
    )
    level = f"{1 - alpha:.0%}"
    lines = [f"ladder {ladder_id}: compared {compute}"]
    header = (
        f"{'VARIANT':<16} {'SIZE':<10} {'COMPUTE':<30} {'SEEDS':>5}  {'BASE mean':>10} {'VARIANT mean':>12}  "
        f"{'DIFF (paired)':>13}  {level + ' interval':<22} {'p (paired t)':>12}  OUTCOME"
    )
    lines.append(header)
    for v in verdicts:
        for r in v.sizes:
            base = f"{statistics.fmean(r.base):.4f}" if r.base else "-"
            mean = f"{statistics.fmean(r.metrics):.4f}" if r.metrics else "-"
            diff = f"{r.difference:+.4f}" if r.differences else "-"
            interval = f"[{r.interval[0]:+.4f}, {r.interval[1]:+.4f}]" if r.interval else "-"
            p = "-" if r.p_value is None else f"{r.p_value:.3g}"
            lines.append(
                f"{v.variant:<16} {r.size:<10} {r.compute:<30} {len(r.differences):>5}  {base:>10} {mean:>12}  "
                f"{diff:>13}  {interval:<22} {p:>12}  {r.outcome}"
            )
    for v in verdicts:
        slope = "" if v.slope is None else f" ({v.slope:+.4f} per doubling of compute)"
        lines.append(f"{v.variant}: across sizes the effect {v.trend}{slope}")
        lines.append(f"VERDICT {v.variant}: {v.verdict} — {v.reason}")
    lines.append(f"(paired t-test by seed, two-sided, alpha {alpha:g}; lower metric is better)")
    return "\n".join(lines)


def ladder_tracking(verdicts: Sequence[LadderVerdict]) -> tuple[dict[str, float], dict[str, str]]:
    """The verdicts as the ladder's MLflow parent run holds them: a tag ``ladder.<variant>`` (the
    verdict) and metrics ``ladder/<variant>/<size>/difference`` and ``…/p_value``."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    for v in verdicts:
        tags[f"ladder.{v.variant}"] = v.verdict
        for r in v.sizes:
            values = {"difference": r.difference} if r.differences else {}
            values |= {"p_value": r.p_value} if r.p_value is not None else {}
            metrics |= metric_values(f"ladder/{v.variant}/{r.size}", values)
    return metrics, tags


def run_ladder(
    spec: LadderSpec,
    *,
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    catalog_name: str | None = None,
):
    """The whole ladder as trials on Ray Tune (one sweep, ``spec.ladder_id``, every row of
    ``experiments.trials`` under it): (the sweep's outcome, each variant's verdict)."""
    from ray import tune

    from experiments.sweep import Schedule, prepare_setup, run_trials
    from experiments.tracking import log_to_sweep_run

    ablation = spec.ablation
    plan = plan_ladder(spec)
    trials = [{**t, "alpha": ablation.alpha} for t in plan.trials(ablation.seeds)]
    setup = prepare_setup(
        spec.ladder_id, KIND, ablation.config, ablation.set, nproc=ablation.nproc, cpus=ablation.cpus,
        target=ablation.target, catalog_name=catalog_name,
        trials=[(f"variant {r.variant} at size {r.size}", r.changes) for r in plan.rungs],
    )  # fmt: skip
    outcome = run_trials(
        setup,
        {"params": tune.grid_search(trials)},
        Schedule(cpus=ablation.cpus, gpus=ablation.gpus),
        resume=resume,
        address=address,
        num_cpus=num_cpus,
    )
    verdicts = analyse_ladder(outcome.rows)
    log_to_sweep_run(outcome.sweep_dir, *ladder_tracking(verdicts))
    return outcome, verdicts
