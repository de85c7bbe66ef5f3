"""A sweep's trials ranked, and its plots: every trial's loss curve, the metric against each parameter."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lakehouse.local_files import write_atomically


def flat_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters one per column: a weight vector (``mixture``) becomes ``mixture.<component>``."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            total = sum(float(v) for v in value.values()) or 1.0
            flat.update({f"{key}.{k}": float(v) / total for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def ranked(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Trials with a metric, best (lowest) first; then those without (failed, never evaluated)."""
    return sorted(rows, key=lambda r: (r.get("metric") is None, r.get("metric") or 0.0, r["trial_id"]))


def format_ranking(rows: Sequence[Mapping[str, Any]]) -> str:
    """The trials ranked by metric, one column per parameter and per component's final loss."""
    if not rows:
        return "(no trials)"
    keys = sorted({k for r in rows for k in flat_params(r.get("params") or {})})
    components = sorted({k for r in rows for k in (r.get("final_loss") or {})})
    header = ["RANK", "TRIAL", "STATUS", "METRIC", *keys, *(f"{c}/LOSS" for c in components), "TOKENS", "WALL_S"]
    table = [header]
    for n, row in enumerate(ranked(rows), 1):
        params = flat_params(row.get("params") or {})
        final = row.get("final_loss") or {}
        table.append(
            [
                str(n) if row.get("metric") is not None else "-",
                row["trial_id"],
                row["status"],
                _num(row.get("metric")),
                *(_num(params.get(k)) for k in keys),
                *(_num(final.get(c)) for c in components),
                str(row.get("tokens_seen") or "-"),
                _num(row.get("wall_seconds"), 1),
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
    for row in rows:
        if row["status"] == "failed" and row.get("error"):
            lines.append(f"  {row['trial_id']} failed: {row['error'][-300:]}")
    return "\n".join(lines)


def _num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if digits > 1 else f"{value:.1f}"
    return str(value)


def write_plots(rows: Sequence[Mapping[str, Any]], folder: Path) -> list[Path]:
    """``loss_curves.png`` and ``metric_vs_params.png`` in ``folder`` (matplotlib, no display)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server or in CI
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in ranked(rows):
        curve = row.get("loss_curve") or []
        if curve:
            label = f"{row['trial_id']} ({_num(row.get('metric'))})"
            ax.plot([p[0] for p in curve], [p[1] for p in curve], label=label, linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(f"{rows[0]['sweep_id']}: loss curves")
    if len(rows) <= 12:
        ax.legend(fontsize=7)
    written.append(_save(fig, folder / "loss_curves.png"))
    plt.close(fig)

    scored = [r for r in rows if r.get("metric") is not None]
    keys = sorted({k for r in scored for k, v in flat_params(r["params"]).items() if _is_number(v)})
    if keys:
        cols = min(3, len(keys))
        fig, axes = plt.subplots(
            math.ceil(len(keys) / cols), cols, figsize=(4 * cols, 3.2 * math.ceil(len(keys) / cols)), squeeze=False
        )
        for ax, key in zip(axes.flat, keys, strict=False):
            points = [(flat_params(r["params"]).get(key), r["metric"]) for r in scored]
            points = [(x, y) for x, y in points if _is_number(x)]
            ax.scatter([p[0] for p in points], [p[1] for p in points], s=18)
            xs = [p[0] for p in points]
            if xs and min(xs) > 0 and max(xs) / min(xs) >= 50:
                ax.set_xscale("log")
            ax.set_xlabel(key)
            ax.set_ylabel("metric")
        for ax in list(axes.flat)[len(keys) :]:
            ax.axis("off")
        fig.suptitle(f"{rows[0]['sweep_id']}: metric against each parameter")
        written.append(_save(fig, folder / "metric_vs_params.png"))
        plt.close(fig)
    return written


def _save(fig: Any, path: Path) -> Path:
    import io

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=100)
    write_atomically(path, buffer.getvalue())
    return path


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
