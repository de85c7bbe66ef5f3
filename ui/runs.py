"""A training run's curves from its ``metrics.jsonl`` and its ``evals.results`` rows, as SVG plots
(ui/plots.py). A run's records and curves are kept per state of its metrics file (path, size,
modification time: a run still training is read and drawn again once it has logged more).
"""

from __future__ import annotations

import json
from pathlib import Path

from ui.cache import file_key, memo
from ui.plots import line_plot

TRAIN_CURVES = (
    ("loss", "training loss"),
    ("lr", "learning rate"),
    ("tokens_per_s", "tokens/s"),
    ("data_wait_frac", "data-wait fraction"),
)


def read_metrics(run_dir: Path) -> list[dict]:
    """The run's records; a step logged twice (before a crash and after resume) keeps its last value."""
    key = file_key(run_dir / "metrics.jsonl")
    return _records(*key) if key else []


def curves(run_dir: Path) -> list[tuple[str, str]]:
    """(title, data URI of a PNG) for each curve in the run's ``metrics.jsonl``."""
    key = file_key(run_dir / "metrics.jsonl")
    return _curves(*key) if key else []


@memo(32)
def _records(path: str, _size: int, _mtime_ns: int) -> list[dict]:
    records = {}
    # errors="replace": bytes that are no UTF-8 (a damaged or hand-edited file) spoil their line only.
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a crash
            continue
        if _well_formed(record):
            records[(record["kind"], record["step"])] = record
    return sorted(records.values(), key=lambda r: (r["step"], r["kind"]))


def _well_formed(record: object) -> bool:
    """A record the trainer writes: a kind, and a whole step (a hand-edited "three", or 1e400 read
    as inf, cannot be ordered among the others)."""
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return False
    step = record.get("step")
    return isinstance(step, int) and not isinstance(step, bool)


@memo(32)
def _curves(path: str, size: int, mtime_ns: int) -> list[tuple[str, str]]:
    records = _records(path, size, mtime_ns)
    train = [r for r in records if r["kind"] == "train"]
    plots = []
    for key, title in TRAIN_CURVES:
        points = [(r["step"], r[key]) for r in train if isinstance(r.get(key), (int, float))]
        if points:
            plots.append((title, line_plot(title, ((key, tuple(points)),))))
    evals: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r["kind"] == "eval":
            for name, values in r.items():
                if isinstance(values, dict) and isinstance(values.get("loss"), (int, float)):
                    evals.setdefault(name, []).append((r["step"], values["loss"]))
    if evals:
        series = tuple((name, tuple(points)) for name, points in sorted(evals.items()))
        plots.append(("eval loss per component", line_plot("eval loss per component", series)))
    return plots


def result_curves(rows: list[dict]) -> list[tuple[str, str]]:
    """Plots of ``evals.results`` rows, each metric over the checkpoints' steps: one per eval suite
    and kind of metric. Metrics of one kind (``loss/code``, ``loss/text``) share a plot; metrics
    of other kinds (HumanEval's ``pass@1``, a fraction, and ``problems``, a count) get plots of
    their own, so that neither is drawn on the other's scale."""
    by_plot: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    for row in rows:
        if isinstance(row.get("step"), int) and isinstance(row.get("value"), (int, float)):
            metric = str(row.get("metric"))
            kind = metric.split("/", 1)[0]
            series = by_plot.setdefault((str(row.get("suite")), kind), {}).setdefault(metric, {})
            series[row["step"]] = row["value"]  # a checkpoint evaluated twice: its last row
    kinds_per_suite: dict[str, int] = {}
    for suite, _kind in by_plot:
        kinds_per_suite[suite] = kinds_per_suite.get(suite, 0) + 1
    plots = []
    for (suite, kind), metrics in sorted(by_plot.items()):
        title = f"{suite} (evals.results)" if kinds_per_suite[suite] == 1 else f"{suite} {kind} (evals.results)"
        series = tuple((m, tuple(sorted(points.items()))) for m, points in sorted(metrics.items()))
        plots.append((title, line_plot(title, series, kind)))
    return plots
