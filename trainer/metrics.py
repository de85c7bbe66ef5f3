"""Training metrics: JSON lines always, TensorBoard when it is installed, MLflow when ``mlflow.enabled``
(``trainer/tracking.py``), a line on the console, and Prometheus gauges and counters on every rank
(served when ``run.metrics_port`` is set; the names are listed in docs/architecture.md#metrics-and-alerts)."""

from __future__ import annotations

import errno
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge, start_http_server

from lakehouse.errors import ConfigError
from trainer.launch import quiet
from trainer.tracking import TrainingTracker, metric_values

STEP = Gauge("factory_train_step", "Optimizer steps done")
STEPS = Counter("factory_train_steps", "Optimizer steps taken by this process")
LAST_STEP = Gauge("factory_train_last_step_timestamp_seconds", "Unix time the last optimizer step ended")
LOSS = Gauge("factory_train_loss", "Training loss of the last step")
LEARNING_RATE = Gauge("factory_train_learning_rate", "Learning rate of the last step")
TOKENS = Counter("factory_train_tokens", "Tokens trained on (global batch × sequence length per step)")
STEP_SECONDS = Counter("factory_train_step_seconds", "Seconds spent in optimizer steps, data wait included")
DATA_WAIT = Counter("factory_train_data_wait_seconds", "Seconds steps waited for the loader's next batch")
EVAL_LOSS = Gauge("factory_eval_loss", "Held-out loss at the last evaluation", ["component"])


def serve_prometheus(port: int, host: str, local_rank: int) -> None:
    """Expose this process's metrics (trainer's and loader's) at ``http://host:port+local_rank/metrics``;
    a ``ConfigError`` naming the setting when that address cannot be bound."""
    if not port:
        return
    mine = port + local_rank
    if mine > 65535:  # `factory train` refuses this before starting; torchrun run by hand does not
        raise ConfigError(
            f"run.metrics_port {port} + local rank {local_rank} is {mine}, past the last port 65535: lower run.metrics_port"
        )
    try:
        start_http_server(mine, addr=host)
    except OSError as exc:
        raise ConfigError(_bind_failure(exc, host, mine, port != mine)) from None


def _bind_failure(exc: OSError, host: str, port: int, offset: bool) -> str:
    """What to change when the metrics server cannot listen on ``host:port``."""
    which = f"{port} (run.metrics_port + local rank)" if offset else str(port)
    if isinstance(exc, socket.gaierror):
        return f"run.metrics_host {host!r} cannot be resolved ({exc.strerror}): set it to an address of this machine"
    if exc.errno == errno.EADDRINUSE:
        return f"the metrics port {which} is in use on {host}: set run.metrics_port to a free one, or 0 for no metrics server"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"run.metrics_host {host!r} is not an address of this machine: set it to one, e.g. 127.0.0.1 or 0.0.0.0"
    return (
        f"cannot serve metrics on {host}:{which} ({exc.strerror or exc}): check run.metrics_host and run.metrics_port"
    )


def export_step(step: int, loss: float, lr: float, tokens: int, seconds: float, waited: float) -> None:
    STEP.set(step)
    STEPS.inc()
    LOSS.set(loss)
    LEARNING_RATE.set(lr)
    TOKENS.inc(tokens)
    STEP_SECONDS.inc(seconds)
    DATA_WAIT.inc(waited)
    LAST_STEP.set(time.time())


def export_eval(results: dict[str, dict[str, float]]) -> None:
    for component, values in results.items():
        EVAL_LOSS.labels(component).set(values["loss"])


def say_fresh_start(run_dir: Path) -> None:
    """Say that ``--resume`` found no complete checkpoint in ``run_dir`` to continue: a note, not a
    warning, so none under ``-q`` (``FACTORY_QUIET``), as the progress lines."""
    if not quiet():
        print(f"no complete checkpoint under {run_dir / 'checkpoints'}; starting from step 0", file=sys.stderr)


class MetricsLog:
    """Rank 0 writes ``<run_dir>/metrics.jsonl`` (appending across resumes), echoes progress (a line
    a record on stderr, none under ``factory train -q``) and hands each record to its MLflow
    ``tracker``, if any. As a context manager it ends the MLflow run as the block ends: FINISHED,
    FAILED on an error, KILLED on Ctrl-C."""

    def __init__(self, run_dir: Path, enabled: bool, total_steps: int, tracker: TrainingTracker | None = None) -> None:
        self.enabled = enabled
        self.total_steps = total_steps
        self.tracker = tracker
        self.echo = not quiet()
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
        if self.tracker is not None:
            self.tracker.log(step, metric_values(kind, values), record["time"])
        if self.echo:
            print(_console_line(step, self.total_steps, kind, values), file=sys.stderr, flush=True)

    def close(self, status: str = "FINISHED") -> None:
        if self._file:
            self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self.tracker is not None:
            self.tracker.close(status)

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close("FINISHED" if kind is None else "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED")


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
