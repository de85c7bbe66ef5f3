"""Running an ablation for a decision: its spec written to a file, `factory ablate` run on it, its
trials read back from ``experiments.trials`` and compared with the ablation's own test.

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
    from experiments.sweep import TUNE_DIR, sweep_dir_of
    from experiments.trials_table import read_trials

    text = tomlkit.dumps(dict(spec))
    path = folder / f"{spec['name']}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"
    folder.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    loaded = load_ablation_spec(path)
    resume = ["--resume"] if (sweep_dir_of(loaded.ablation_id) / TUNE_DIR).is_dir() else []
    run_factory(context, ["ablate", str(path), *resume])
    rows = read_trials(catalog(), loaded.ablation_id)
    failed = [r for r in rows if r.get("metric") is None]
    if failed or len(rows) < len(loaded.trials()):
        raise dg.Failure(
            f"ablation {loaded.ablation_id}: {len(failed)} of its trials failed and "
            f"{len(loaded.trials()) - len(rows)} never finished; nothing was decided "
            f"(`factory sweep report {loaded.ablation_id}` shows each trial's error)"
        )
    return AblationOutcome(loaded.ablation_id, rows, analyse(rows, loaded.alpha), loaded.alpha)


def welch_interval(base: tuple[float, ...], variant: tuple[float, ...], alpha: float) -> list[float]:
    """The (1 - alpha) interval of mean(variant) - mean(base) with Welch's degrees of freedom; both
    ends the difference itself when neither sample varies (the same seeds give the same run)."""
    from scipy.stats import ttest_ind

    difference = statistics.fmean(variant) - statistics.fmean(base)
    if statistics.pstdev(base) == 0 and statistics.pstdev(variant) == 0:
        return [difference, difference]
    interval = ttest_ind(variant, base, equal_var=False).confidence_interval(confidence_level=1 - alpha)
    return [float(interval.low), float(interval.high)]
