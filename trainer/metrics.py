"""Training metrics: JSON lines always, TensorBoard when it is installed, a line on the console."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


class MetricsLog:
    """Rank 0 writes ``<run_dir>/metrics.jsonl`` (appending across resumes) and echoes progress."""

    def __init__(self, run_dir: Path, enabled: bool, total_steps: int) -> None:
        self.enabled = enabled
        self.total_steps = total_steps
        self._file = None
        self._tensorboard = None
        if not enabled:
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        self._file = (run_dir / "metrics.jsonl").open("a", buffering=1)
        try:  # optional: only when the tensorboard package is installed
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(str(run_dir / "tensorboard"))
        except ImportError:
            self._tensorboard = None

    def log(self, step: int, kind: str, values: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"step": step, "kind": kind, "time": round(time.time(), 3), **values}
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        if self._tensorboard is not None:
            for key, value in _flatten(values).items():
                if isinstance(value, (int, float)):
                    self._tensorboard.add_scalar(f"{kind}/{key}", value, step)
        print(_console_line(step, self.total_steps, kind, values), file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._file:
            self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _console_line(step: int, total: int, kind: str, values: dict[str, Any]) -> str:
    shown = ", ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in _flatten(values).items()
        if not isinstance(v, (list, dict))
    )
    return f"[{kind} step {step}/{total}] {shown}"
