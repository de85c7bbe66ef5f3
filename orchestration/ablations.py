"""Running an ablation for a decision: its spec written to a file, `factory ablate` run on it (with
``--ladder`` for a ladder), its trials read back from ``experiments.trials`` and compared with the
ablation's own test.

The spec file is named by the hash of its content, and the ablation id is the spec's name and
hash (``experiments.ablation``), so a decision retried after a crash runs the same ablation:
Ray Tune's saved state is resumed (``--resume``), finished trials are not run again.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import tomlkit

from orchestration.commands import run_factory
from orchestration.state import catalog


@dataclass(frozen=True)
class AblationOutcome:
    ablation_id: str
    rows: list[dict[str, Any]]
    reports: list[Any]  # experiments.ablation.VariantReport, the base first
    alpha: float

    def evidence(self, variant: str) -> dict[str, Any]:
        """What a decision records of one variant against the base."""
        base = self.reports[0]
        report = next(r for r in self.reports if r.variant == variant)
        return {
            "sweep_id": self.ablation_id,
            "variant": variant,
            "seeds": len(report.metrics),
            "base": list(base.metrics),
            "candidate": list(report.metrics),
            "differences": list(report.differences),
            "difference": report.difference,
            "test": "welch",
            "p_value": report.p_value,
            "interval": welch_interval(base.metrics, report.metrics, self.alpha),
            "alpha": self.alpha,
            "runs": [r["run_dir"] for r in self.rows],
        }


def run_ablation(context: dg.AssetExecutionContext, spec: Mapping[str, Any], folder: Path) -> AblationOutcome:
    """Write ``spec`` (an ablation spec's keys) under ``folder``, run `factory ablate` on it (resuming
    its saved state if an earlier attempt left one) and return its trials compared with the base."""
    from experiments.ablation import analyse, load_ablation_spec

    path = _spec_file(spec, folder)
    loaded = load_ablation_spec(path)
    rows = _run(context, path, loaded.ablation_id, len(loaded.trials()), [])
    return AblationOutcome(loaded.ablation_id, rows, analyse(rows, loaded.alpha), loaded.alpha)


@dataclass(frozen=True)
class LadderOutcome:
    ladder_id: str
    rows: list[dict[str, Any]]
    verdicts: list[Any]  # experiments.ladder.LadderVerdict, one per variant
    alpha: float

    def evidence(self) -> dict[str, Any]:
        """What a decision records of the ladder: per variant its verdict, and per size the paired test."""
        return {
            "sweep_id": self.ladder_id,
            "test": "paired t",
            "alpha": self.alpha,
            "variants": [
                {
                    "variant": v.variant, "verdict": v.verdict, "reason": v.reason, "trend": v.trend,
                    "slope_per_doubling": v.slope,
                    "sizes": [
                        {
                            "size": r.size, "compute": r.compute, "base": list(r.base), "candidate": list(r.metrics),
                            "differences": list(r.differences), "difference": r.difference, "p_value": r.p_value,
                            "interval": None if r.interval is None else list(r.interval), "outcome": r.outcome,
                        }
                        for r in v.sizes
                    ],
                }
                for v in self.verdicts
            ],
            "runs": [r["run_dir"] for r in self.rows],
        }  # fmt: skip


def run_ladder(context: dg.AssetExecutionContext, spec: Mapping[str, Any], folder: Path) -> LadderOutcome:
    """As ``run_ablation``, with `factory ablate --ladder`: every variant's ladder verdict."""
    from experiments.ladder import analyse_ladder
    from experiments.ladder_spec import load_ladder_spec, plan_ladder

    path = _spec_file(spec, folder)
    loaded = load_ladder_spec(path)
    expected = len(plan_ladder(loaded).trials(loaded.ablation.seeds))
    rows = _run(context, path, loaded.ladder_id, expected, ["--ladder"])
    return LadderOutcome(loaded.ladder_id, rows, analyse_ladder(rows), loaded.ablation.alpha)


def _spec_file(spec: Mapping[str, Any], folder: Path) -> Path:
    text = tomlkit.dumps(dict(spec))
    path = folder / f"{spec['name']}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"
    folder.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    return path


def _run(context: dg.AssetExecutionContext, path: Path, sweep_id: str, expected: int, flags: list[str]) -> list[dict]:
    """`factory ablate` on the spec file (resumed if an earlier attempt left state); its trials' rows,
    every one of them with a metric."""
    from experiments.ablation import completed_metric
    from experiments.sweep import TUNE_DIR, sweep_dir_of
    from experiments.trials_table import read_trials

    resume = ["--resume"] if (sweep_dir_of(sweep_id) / TUNE_DIR).is_dir() else []
    run_factory(context, ["ablate", str(path), *flags, *resume])
    rows = read_trials(catalog(), sweep_id)
    failed = [r for r in rows if completed_metric(r) is None]
    if failed or len(rows) < expected:
        raise dg.Failure(
            f"ablation {sweep_id}: {len(failed)} of its trials failed and {expected - len(rows)} never finished; "
            f"nothing was decided (`factory sweep report {sweep_id}` shows each trial's error)"
        )
    return rows


def welch_interval(base: tuple[float, ...], variant: tuple[float, ...], alpha: float) -> list[float]:
    """The (1 - alpha) interval of mean(variant) - mean(base) with Welch's degrees of freedom; both
    ends the difference itself when neither sample varies (the same seeds give the same run)."""
    from scipy.stats import ttest_ind

    difference = statistics.fmean(variant) - statistics.fmean(base)
    if statistics.pstdev(base) == 0 and statistics.pstdev(variant) == 0:
        return [difference, difference]
    interval = ttest_ind(variant, base, equal_var=False).confidence_interval(confidence_level=1 - alpha)
    return [float(interval.low), float(interval.high)]
