"""A training run's curves from its ``metrics.jsonl``, drawn as PNG plots by matplotlib."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

TRAIN_CURVES = (
    ("loss", "training loss"),
    ("lr", "learning rate"),
    ("tokens_per_s", "tokens/s"),
    ("data_wait_frac", "data-wait fraction"),
)


def read_metrics(run_dir: Path) -> list[dict]:
    """The run's records; a step logged twice (before a crash and after resume) keeps its last value."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # a line cut short by a crash
            continue
        if isinstance(record, dict) and "step" in record and "kind" in record:
            records[(record["kind"], record["step"])] = record
    return sorted(records.values(), key=lambda r: (r["step"], r["kind"]))


def curves(records: list[dict]) -> list[tuple[str, str]]:
    """(title, data URI of a PNG) for each curve the run has."""
    train = [r for r in records if r["kind"] == "train"]
    plots = []
    for key, title in TRAIN_CURVES:
        points = [(r["step"], r[key]) for r in train if isinstance(r.get(key), (int, float))]
        if points:
            plots.append((title, _plot(title, {key: points})))
    evals: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r["kind"] == "eval":
            for name, values in r.items():
                if isinstance(values, dict) and isinstance(values.get("loss"), (int, float)):
                    evals.setdefault(name, []).append((r["step"], values["loss"]))
    if evals:
        plots.append(("eval loss per component", _plot("eval loss per component", evals)))
    return plots


def result_curves(rows: list[dict]) -> list[tuple[str, str]]:
    """One plot per eval suite from ``evals.results`` rows: each metric over the checkpoints' steps."""
    by_suite: dict[str, dict[str, dict[int, float]]] = {}
    for row in rows:
        if isinstance(row.get("step"), int) and isinstance(row.get("value"), (int, float)):
            series = by_suite.setdefault(str(row.get("suite")), {}).setdefault(str(row.get("metric")), {})
            series[row["step"]] = row["value"]  # a checkpoint evaluated twice: its last row
    return [
        (
            f"{suite} (evals.results)",
            _plot(f"{suite} (evals.results)", {m: sorted(p.items()) for m, p in metrics.items()}),
        )
        for suite, metrics in sorted(by_suite.items())
    ]


def _plot(title: str, series: dict[str, list[tuple[int, float]]]) -> str:
    # Imported on the first plot (a second or two): the other pages and `factory ui` start without it.
    # The Agg backend draws without a display or GUI toolkit.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(4.2, 2.6), dpi=80)
    try:
        for name, points in sorted(series.items()):
            steps, values = zip(*points, strict=True)
            axes.plot(steps, values, marker="o" if len(points) < 20 else None, markersize=3, label=name)
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("step", fontsize=8)
        axes.tick_params(labelsize=7)
        axes.grid(alpha=0.3)
        if len(series) > 1:
            axes.legend(fontsize=7)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
