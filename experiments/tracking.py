"""Sweeps, ablations and mixture searches in MLflow, through Ray Tune's MLflow integration.

Each sweep is one MLflow experiment (``factory/<kind>/<sweep id>``, unless the base config's
``mlflow.experiment`` names one) holding a parent run for the sweep and, nested under it, one run
per trial. A trial's run is made in its Ray worker by ``ray.air.integrations.mlflow.setup_mlflow``
(the trial's parameters as params, ``params/<key>``), and the trial's training process logs into
that same run (``MLFLOW_RUN_ID``): per-step metrics, the resolved config, the factory's tags. The
trial's outcome follows as ``trial/…`` metrics. An ablation's verdicts and a mixture search's fit
go to the parent run. docs/experiments.md#experiment-tracking.

Why ``setup_mlflow`` and not Tune's ``MLflowLoggerCallback``: the callback makes each trial's run in
the driver, where the training process that has the per-step metrics cannot join it; setup_mlflow
makes it in the trial's worker, which starts that process. MLflow failing never fails a sweep or a
trial: it is said once and the sweep (or trial) goes on untracked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lakehouse.redact import redact
from trainer.tracking import (
    bound_client_environment,
    describe_failure,
    ensure_experiment,
    metric_values,
    open_client,
    read_record,
    recorded_run,
    recorded_uri,
    tracking_uri,
    write_record,
)

log = logging.getLogger("factory.experiments")

# What a trial's training is told when the sweep is not tracked (or its run could not be made).
UNTRACKED = "mlflow.enabled=false"
TRIAL_OUTCOME = ("target", "final_loss", "best_loss", "tokens_seen", "wall_seconds")


@dataclass(frozen=True)
class SweepTracking:
    """Where a sweep's trials log: sent to every trial with its ``TrialSetup``."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str


@contextlib.contextmanager
def sweep_run(setup: Any) -> Iterator[SweepTracking | None]:
    """The sweep's parent run, made before any trial (or, resuming, the one the sweep folder's
    ``mlflow.json`` names) and ended as the block ends; None when the base config turns tracking off
    or MLflow cannot be reached (said once)."""
    tracking = _open_sweep_run(setup)
    status = "FAILED"
    try:
        yield tracking
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        if tracking is not None:
            _guarded(tracking.tracking_uri, lambda: _end_run(tracking, status))


def _end_run(tracking: SweepTracking, status: str) -> None:
    open_client(tracking.tracking_uri).set_terminated(tracking.parent_run_id, status=status)


def _open_sweep_run(setup: Any) -> SweepTracking | None:
    from trainer.config import load_config

    cfg = load_config(setup.config, list(setup.overrides)).mlflow
    if not cfg.enabled:
        return None
    uri, folder = tracking_uri(cfg.tracking_uri), Path(setup.sweep_dir)

    def open_run() -> SweepTracking:
        client = open_client(uri)
        run = recorded_run(client, folder, uri)
        if run is not None:
            client.update_run(run.info.run_id, status="RUNNING")
        else:
            experiment_id = ensure_experiment(client, cfg.experiment or f"factory/{setup.kind}/{setup.sweep_id}", uri)
            tags = {"factory.sweep_id": setup.sweep_id, "factory.kind": setup.kind, "factory.sweep_dir": str(folder)}
            run = client.create_run(experiment_id, run_name=setup.sweep_id, tags=tags)
            client.log_param(run.info.run_id, "config", setup.config)
            client.log_param(run.info.run_id, "set", redact(json.dumps(list(setup.overrides))))
        folder.mkdir(parents=True, exist_ok=True)
        write_record(folder, uri, client, run)
        return SweepTracking(uri, run.info.experiment_id, run.info.run_id)

    return _guarded(uri, open_run, "the sweep goes on without it")


def log_sweep_outcome(tracking: SweepTracking | None, rows: Sequence[Mapping[str, Any]]) -> None:
    """The sweep's trials counted on its parent run, and the best metric."""
    if tracking is None:
        return
    scored = [r["metric"] for r in rows if r.get("metric") is not None]
    metrics = {
        "sweep/trials": len(rows),
        "sweep/completed": sum(r.get("status") == "completed" for r in rows),
        "sweep/failed": sum(r.get("status") == "failed" for r in rows),
        **({"sweep/best_metric": min(scored)} if scored else {}),
    }
    log_to_sweep_run(tracking, metrics)


def log_to_sweep_run(
    where: SweepTracking | Path | None, metrics: Mapping[str, float], tags: Mapping[str, str] | None = None
) -> None:
    """Metrics and tags on a sweep's parent run (``where``: its tracking, or the sweep's folder)."""
    if isinstance(where, Path):
        record = read_record(where)
        uri = recorded_uri(record) if record else None
        where = SweepTracking(uri, record["experiment_id"], record["run_id"]) if uri else None
    if where is not None:
        _guarded(where.tracking_uri, lambda: _log(where, metrics, tags or {}))


def _log(tracking: SweepTracking, metrics: Mapping[str, float], tags: Mapping[str, str]) -> None:
    from mlflow.entities import Metric, RunTag

    stamp = int(time.time() * 1000)
    open_client(tracking.tracking_uri).log_batch(
        tracking.parent_run_id,
        metrics=[Metric(key, float(value), stamp, 0) for key, value in metrics.items()],
        tags=[RunTag(key, value) for key, value in tags.items()],
    )


class TrialRun:
    """One trial's MLflow run, made by Ray Tune's ``setup_mlflow`` in the trial's worker and ended
    as the block ends. ``env`` and ``overrides`` tell the trial's training process to log into it,
    or not to track at all; ``finish`` logs the trial's outcome."""

    def __init__(self, setup: Any, config: Mapping[str, Any], run_dir: Path, trial_id: str, out: IO[bytes]) -> None:
        self.setup, self.config, self.run_dir, self.trial_id, self.out = setup, config, run_dir, trial_id, out
        self.env: dict[str, str] = {}
        self.overrides: list[str] = []
        self._mlflow: Any = None

    def __enter__(self) -> TrialRun:
        tracking: SweepTracking | None = self.setup.mlflow
        if tracking is None:
            self.overrides = [UNTRACKED]
            return self
        try:
            self._mlflow = self._start(tracking)
        except Exception as exc:  # the trial trains untracked
            self._say(f"{describe_failure(tracking.tracking_uri, exc)}; this trial goes on without it")
            self.overrides = [UNTRACKED]
            return self
        run_id = self._mlflow.active_run().info.run_id
        self.env = {"MLFLOW_RUN_ID": run_id, "MLFLOW_TRACKING_URI": tracking.tracking_uri}
        return self

    def _start(self, tracking: SweepTracking) -> Any:
        bound_client_environment()
        import mlflow
        from ray.air.integrations.mlflow import setup_mlflow

        if mlflow.active_run() is not None:  # left by a trial this worker ran before and Tune stopped
            mlflow.end_run("KILLED")
        client = open_client(tracking.tracking_uri)
        earlier = recorded_run(client, self.run_dir, tracking.tracking_uri)
        tags = {
            "mlflow.parentRunId": tracking.parent_run_id,
            "factory.sweep_id": self.setup.sweep_id,
            "factory.kind": self.setup.kind,
            "factory.trial_id": self.trial_id,
            "factory.run_id": str(self.run_dir),  # also when its training dies before it tags the run
        }
        # A trial restarted after an interruption continues its run: MLflow's start_run, inside
        # setup_mlflow, takes the run to continue from MLFLOW_RUN_ID.
        with environment_variable("MLFLOW_RUN_ID", earlier.info.run_id if earlier is not None else None):
            module = setup_mlflow(
                dict(self.config),
                tracking_uri=tracking.tracking_uri,
                experiment_id=tracking.experiment_id,
                run_name=self.trial_id,
                tags=tags,
            )
        # Recorded now, not only by the training process: a trial interrupted before its training
        # starts still finds its run when the sweep resumes.
        write_record(self.run_dir, tracking.tracking_uri, client, client.get_run(module.active_run().info.run_id))
        return module

    def finish(self, summary: Mapping[str, Any]) -> None:
        """The trial's outcome (``trial/target``, ``trial/final_loss/<component>``…) at its last step."""
        if self._mlflow is None:
            return
        metrics = metric_values("trial", {key: summary.get(key) for key in TRIAL_OUTCOME})
        try:
            self._mlflow.log_metrics(metrics, step=int(summary.get("step") or 0))
        except Exception as exc:
            self._say(f"{describe_failure(self.setup.mlflow.tracking_uri, exc)}; the trial's outcome is in its row")

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self._mlflow is None:
            return
        status = "FINISHED" if kind is None else "FAILED" if issubclass(kind, Exception) else "KILLED"
        try:
            self._mlflow.end_run(status)
        except Exception as exc:
            self._say(describe_failure(self.setup.mlflow.tracking_uri, exc))

    def _say(self, text: str) -> None:
        """In the trial's log (where its run's output goes) and the worker's."""
        self.out.write(f"warning: {text}\n".encode())
        self.out.flush()
        log.warning("%s", text)


@contextlib.contextmanager
def environment_variable(name: str, value: str | None) -> Iterator[None]:
    """``$name`` set to ``value`` (None: unset) inside the block, as it was after."""
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _guarded(uri: str, call: Any, consequence: str = "") -> Any:
    """``call()``, or None with one warning on stderr if MLflow fails."""
    try:
        return call()
    except Exception as exc:
        message = describe_failure(uri, exc) + (f"; {consequence}" if consequence else "")
        print(f"warning: {message}", file=sys.stderr, flush=True)
        return None
