"""MLflow, the experiment tracker people already use, as one more sink of the training metrics.

Rank 0 logs its run to MLflow: the resolved config as params (flattened, credentials redacted),
every record of ``metrics.jsonl`` as metrics at its step, named as TensorBoard names them
(``train/loss``, ``eval/<component>/loss``…), and tags naming the factory's run (its folder, the
manifest's fingerprint, the checkpoints). The run folder's ``mlflow.json`` and each checkpoint's
``lineage.json`` name the MLflow run back. Where runs go and the keys: docs/training.md#experiment-tracking.

MLflow is imported (a few seconds) only when tracking is on, and never by the data path. The
tracker is never in training's way: a dead server or an unwritable store is reported once, and the
run goes on without it (``metrics.jsonl`` keeps every record).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import queue
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lakehouse.catalog import factory_home
from lakehouse.local_files import write_atomically
from lakehouse.redact import MASK, redact
from lakehouse.version import code_version

log = logging.getLogger("factory.tracking")

# In a run folder (and a sweep's folder): the MLflow run it logs to, {tracking_uri (redacted),
# experiment_id, experiment, run_id}.
RECORD = "mlflow.json"
DEFAULT_EXPERIMENT = "factory/train"
# Set unless the environment sets them. MLflow's HTTP client retries 7 times with exponential
# backoff and waits up to 120 s a request: minutes against a dead server. Bounded so, a dead server
# costs a few seconds once. MLflow's INFO lines (creating a SQLite store's tables) are noise in a
# training log.
CLIENT_ENVIRONMENT = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_LOGGING_LEVEL": "WARNING",
}
START_WAIT_S = 30.0  # the first checkpoint waits at most this long for the run's id, for its lineage
CLOSE_WAIT_S = 30.0  # the end of training waits at most this long for the last records to be sent
MAX_METRICS, MAX_PARAMS, MAX_TAG_VALUE = 1000, 100, 8000  # MLflow's limits per call and per value
_NOT_IN_A_NAME = re.compile(r"[^\w./\- :]")  # MLflow refuses any other character in a metric or param name


def tracking_uri(configured: str = "") -> str:
    """Where runs go: ``mlflow.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else a SQLite store
    at ``$FACTORY_HOME/mlflow/mlflow.db`` (MLflow 3 refuses its old file store by default; SQLite
    is what it recommends without a server). A relative SQLite path is made absolute, so evals run
    from another folder find the same store."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        return f"sqlite:///{factory_home() / 'mlflow' / 'mlflow.db'}"
    path = _sqlite_path(uri)
    return f"sqlite:///{path.resolve()}" if path is not None else uri


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def bound_client_environment() -> None:
    """``CLIENT_ENVIRONMENT`` where the environment does not say otherwise; before MLflow's import,
    which reads its logging level."""
    for name, value in CLIENT_ENVIRONMENT.items():
        os.environ.setdefault(name, value)


def open_client(uri: str) -> Any:
    """An ``MlflowClient`` for ``uri`` (importing MLflow); a SQLite store's folder is made first."""
    bound_client_environment()
    path = _sqlite_path(uri)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def ensure_experiment(client: Any, name: str, uri: str) -> str:
    """The id of experiment ``name``, created if new (its artifacts beside a SQLite store)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    path = _sqlite_path(uri)
    location = (path.parent / "artifacts").as_uri() if path is not None else None
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException:  # another process created it since the lookup
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def experiment_name(configured: str, run_dir: Path) -> str:
    """``mlflow.experiment``, else ``factory/<factory>/<run>`` for a run of a factory definition
    (its folder's ``factory.json`` says which), else ``factory/train``."""
    if configured:
        return configured
    record = _factory_record(run_dir)
    if record.get("factory") and record.get("run"):
        return f"factory/{record['factory']}/{record['run']}"
    return DEFAULT_EXPERIMENT


def _factory_record(run_dir: Path) -> dict[str, Any]:
    """The run folder's ``factory.json`` (a factory definition's run), or nothing."""
    from trainer.lineage import RUN_RECORD  # here: a sweep's Ray worker imports this module, not the lineage

    try:
        record = json.loads((run_dir / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def metric_key(name: str) -> str:
    """A metric name MLflow takes: ``pass@1`` → ``pass_at_1``, other characters it refuses → ``_``."""
    return _NOT_IN_A_NAME.sub("_", name.replace("@", "_at_"))


def metric_values(prefix: str, values: Mapping[str, Any]) -> dict[str, float]:
    """The numbers in ``values`` (nested mappings flattened with ``/``), as ``prefix/key`` metrics."""
    found = {}
    for key, value in values.items():
        name = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            found.update(metric_values(name, value))
        elif isinstance(value, (int, float)):  # bool too, as 0 or 1
            found[metric_key(name)] = float(value)
    return found


def run_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A config as MLflow params: ``section.key`` → the value as text (lists as JSON), redacted."""
    params = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            params.update(run_params(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            params[_NOT_IN_A_NAME.sub("_", name)] = redact(text)
    return params


def run_tags(run_dir: Path, lineage: Mapping[str, Any], world_size: int) -> dict[str, str]:
    """The tags that name the factory's run in MLflow (redacted: a factory name is free text)."""
    manifest = lineage.get("manifest", {})
    tags = {
        "factory.run_id": str(run_dir.resolve()),
        "factory.manifest": str(manifest.get("path", "")),
        "factory.manifest_fingerprint": str(manifest.get("fingerprint", "")),
        "factory.code_version": code_version(),
        "factory.world_size": str(world_size),
    }
    record = _factory_record(run_dir)
    tags |= {f"factory.{key}": str(record[key]) for key in ("factory", "run") if record.get(key)}
    return {key: redact(value) for key, value in tags.items()}


def checkpoint_tags(checkpoints: list[Path]) -> dict[str, str]:
    """The newest complete checkpoint and the kept ones (``checkpoints``, oldest first; the oldest
    left out past MLflow's longest tag value)."""
    kept = [str(path.resolve()) for path in checkpoints]
    while len(json.dumps(kept)) > MAX_TAG_VALUE:
        kept.pop(0)
    return {"factory.checkpoint": kept[-1], "factory.checkpoints": json.dumps(kept)} if kept else {}


def write_record(folder: Path, uri: str, client: Any, run: Any) -> dict[str, str]:
    """Record in ``folder`` the MLflow run it logs to (the URI redacted); returns the record."""
    record = {
        "tracking_uri": redact(uri),
        "experiment_id": run.info.experiment_id,
        "experiment": client.get_experiment(run.info.experiment_id).name,
        "run_id": run.info.run_id,
    }
    write_atomically(folder / RECORD, json.dumps(record, indent=2) + "\n")
    return record


def recorded_run(client: Any, folder: Path, uri: str) -> Any | None:
    """The run ``folder`` logged to before at ``uri``, if it is still there (a resumed run continues it)."""
    from mlflow.exceptions import MlflowException

    record = read_record(folder)
    if not record or record.get("tracking_uri") != redact(uri):
        return None
    try:
        run = client.get_run(record["run_id"])
    except MlflowException:
        return None  # deleted for good, or the store was replaced
    return run if run.info.lifecycle_stage == "active" else None


def read_record(folder: Path) -> dict[str, str] | None:
    """The MLflow run a run (or sweep) folder logged to, or None."""
    try:
        record = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("run_id") else None


def recorded_uri(record: Mapping[str, str]) -> str | None:
    """The URI to reach a recorded run from here: the recorded one, or, when it was recorded
    redacted (it held a credential), ``$MLFLOW_TRACKING_URI`` if that is the same server; else None."""
    recorded = record.get("tracking_uri", "")
    if MASK not in recorded:
        return recorded
    here = os.environ.get("MLFLOW_TRACKING_URI", "")
    return here if here and redact(here) == recorded else None


def describe_failure(uri: str, exc: BaseException) -> str:
    """What went wrong with MLflow, in one line, without a credential."""
    message = " ".join(str(exc).split())
    return redact(f"MLflow at {uri} failed ({type(exc).__name__}: {message[:300]})")


def log_checkpoint_metrics(
    checkpoint: Path, lineage: Mapping[str, Any], step: int, metrics: Mapping[str, float]
) -> bool:
    """Log ``metrics`` at ``step`` into the MLflow run that trained ``checkpoint`` (its lineage names
    it, else its run folder's record); False, with one warning, if that run cannot be reached."""
    run_dir = checkpoint.parent.parent
    record = lineage.get("mlflow") or read_record(run_dir)
    if not record:
        return False  # its training was not tracked
    uri = recorded_uri(record)
    if uri is None:
        log.warning(
            "MLflow: %s's run was tracked at %s, which holds a credential; set MLFLOW_TRACKING_URI to it "
            "to log these metrics there", run_dir, record.get("tracking_uri"),
        )  # fmt: skip
        return False
    try:
        from mlflow.entities import Metric

        client = open_client(uri)
        stamp = int(time.time() * 1000)
        batch = [Metric(metric_key(key), float(value), stamp, step) for key, value in metrics.items()]
        for start in range(0, len(batch), MAX_METRICS):
            client.log_batch(record["run_id"], metrics=batch[start : start + MAX_METRICS])
    except Exception as exc:  # an eval never fails for its tracker
        log.warning("%s; these metrics are in evals.results only", describe_failure(uri, exc))
        return False
    return True


class TrainingTracker:
    """Rank 0's MLflow run, written by one daemon thread from a queue.

    MLflow's own asynchronous logging (``synchronous=False``) queues metrics, but imports MLflow
    and creates the run on the caller's thread and reports every failed batch. Here the import,
    the run and every call are off the training loop, and the first failure is reported once;
    what follows is dropped."""

    def __init__(self, uri: str, run_dir: Path) -> None:
        self.uri = uri
        self.run_dir = run_dir
        self._queue: queue.Queue[tuple] = queue.Queue()
        self._settled = threading.Event()  # the run exists, or tracking gave up
        self._waited = False
        self._reference: dict[str, str] | None = None
        self._run_id: str | None = None
        self._owned = False  # this process made (or resumed) the run, so it ends it
        self._failed = False
        # For a continued run: the last step each metric already has there. A run killed after its
        # last checkpoint logged steps that the resumed training computes (and logs) again.
        self._recorded: dict[str, float] | None = None
        self._thread = threading.Thread(target=self._work, name="mlflow-tracker", daemon=True)
        self._thread.start()

    def start(self, experiment: str, params: dict[str, str], tags: dict[str, str]) -> None:
        """Create the run (or continue the one ``$MLFLOW_RUN_ID`` or the run folder's record names)."""
        self._queue.put(("start", (experiment, params, tags)))

    def log(self, step: int, metrics: dict[str, float], timestamp: float) -> None:
        if metrics:
            self._queue.put(("metrics", (step, metrics, timestamp)))

    def set_tags(self, tags: dict[str, str]) -> None:
        if tags:
            self._queue.put(("tags", tags))

    def reference(self) -> dict[str, str] | None:
        """The run for a checkpoint's lineage: tracking URI (redacted), experiment, run id. The first
        call waits for the run's creation, at most START_WAIT_S; later ones take what is known."""
        if not self._waited:
            self._settled.wait(START_WAIT_S)
            self._waited = True
        return self._reference

    def close(self, status: str = "FINISHED") -> None:
        """End the run with ``status`` once the queue is sent, waiting at most CLOSE_WAIT_S."""
        self._queue.put(("end", status))
        self._thread.join(CLOSE_WAIT_S)
        if self._thread.is_alive():
            log.warning(
                "MLflow at %s took over %.0f s to take this run's last records; the run ends without them "
                "(metrics.jsonl has them)", redact(self.uri), CLOSE_WAIT_S,
            )  # fmt: skip

    def _work(self) -> None:
        try:
            client = open_client(self.uri)
        except Exception as exc:
            client = None
            self._fail(exc)
        while True:
            items = [self._queue.get()]
            while len(items) < MAX_METRICS:  # whatever else is waiting goes in the same calls
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for kind, group in itertools.groupby(items, key=lambda item: item[0]):
                payloads = [payload for _, payload in group]
                if kind == "end":
                    self._end(client, payloads[-1])
                    return
                if self._failed:
                    continue  # dropped: metrics.jsonl has it
                try:
                    self._send(client, kind, payloads)
                except Exception as exc:
                    self._fail(exc)

    def _send(self, client: Any, kind: str, payloads: list) -> None:
        from mlflow.entities import Metric, RunTag

        if kind == "start":
            self._open_run(client, *payloads[0])
        elif kind == "metrics":
            batch = [
                Metric(key, value, round(stamp * 1000), step)
                for step, values, stamp in payloads
                for key, value in values.items()
                if step > self._last_recorded_step(client, key)
            ]
            for start in range(0, len(batch), MAX_METRICS):
                client.log_batch(self._run_id, metrics=batch[start : start + MAX_METRICS])
        elif kind == "tags":
            merged = {k: v for tags in payloads for k, v in tags.items()}  # a later value of a tag wins
            client.log_batch(self._run_id, tags=[RunTag(k, v) for k, v in merged.items()])

    def _open_run(self, client: Any, experiment: str, params: dict[str, str], tags: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag

        run_id = os.environ.get("MLFLOW_RUN_ID")  # MLflow's own way to say "log into this run"
        self._owned = not run_id
        run = client.get_run(run_id) if run_id else recorded_run(client, self.run_dir, self.uri)
        continued = run is not None
        if run is not None:
            if self._owned:
                client.update_run(run.info.run_id, status="RUNNING")
            client.log_batch(run.info.run_id, tags=[RunTag(k, v) for k, v in tags.items()])  # a handful
        else:
            experiment_id = ensure_experiment(client, experiment_name(experiment, self.run_dir), self.uri)
            run = client.create_run(experiment_id, run_name=self.run_dir.name, tags=tags)
        self._run_id = run.info.run_id
        self._recorded = {} if continued else None
        known = run.data.params
        new = [Param(k, v) for k, v in params.items() if k not in known]
        for start in range(0, len(new), MAX_PARAMS):
            client.log_batch(self._run_id, params=new[start : start + MAX_PARAMS])
        changed = sorted(k for k, v in params.items() if k in known and known[k] != v)
        if changed:  # MLflow never changes a param once logged
            log.warning(
                "MLflow run %s keeps the first values of %s (this start changed them)", self._run_id, ", ".join(changed)
            )
        self._reference = write_record(self.run_dir, self.uri, client, run)
        self._settled.set()

    def _last_recorded_step(self, client: Any, key: str) -> float:
        """The last step at which the continued run already holds ``key`` (-inf for a new run):
        steps a resumed training repeats are not logged twice. Its resume is exact, so the values
        already there are the ones it would log."""
        if self._recorded is None:
            return -math.inf
        if key not in self._recorded:
            steps = [m.step for m in client.get_metric_history(self._run_id, key)]
            self._recorded[key] = max(steps, default=-math.inf)
        return self._recorded[key]

    def _end(self, client: Any, status: str) -> None:
        if self._run_id and self._owned and not self._failed:
            try:
                client.set_terminated(self._run_id, status=status)
            except Exception as exc:
                self._fail(exc)
        self._settled.set()

    def _fail(self, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            log.warning(
                "%s; the run goes on without it (metrics.jsonl keeps every record)", describe_failure(self.uri, exc)
            )
        self._settled.set()
