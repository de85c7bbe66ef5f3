"""One trial: an ordinary training run, launched as ``factory train`` launches it, watched for Tune.

The trial runs ``trainer.launch`` (torchrun) in its own run directory
(``<sweep dir>/runs/<trial id>``), so it has its metrics, checkpoints and lineage like any
run; a one-rank trial starts its rank itself, as torchrun would have (``trial_command``), without
a launcher's second torch import. While it trains, each held-out evaluation it writes to ``metrics.jsonl`` is reported to
Ray Tune (ASHA decides on these); when it ends, a last report carries the whole summary. A run
that fails raises ``TrialFailed`` with the end of its log: Tune marks the trial errored and the
sweep goes on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.sweep_spec import COMPONENT_PREFIX, MIXTURE_KEY, MIXTURE_PREFIX, toml_literal
from trainer.launch import ONE_RANK_ENV, command, failed_one_rank, one_rank_command, signal_on_parent_death

MAX_CURVE_POINTS = 200
POLL_S = 0.25


class TrialFailed(RuntimeError):
    """The trial's training run exited with an error; the message ends with its last log lines."""


@dataclass(frozen=True)
class TrialSetup:
    """What every trial of one sweep shares (sent to the Ray workers once)."""

    sweep_id: str
    kind: str
    sweep_dir: str
    cwd: str  # relative paths in the config mean what they mean to `factory train` run here
    config: str
    overrides: tuple[str, ...]
    nproc: int
    threads: int
    base_manifest: str
    target: Mapping[str, float] = field(default_factory=dict)
    factory_home: str | None = None
    catalog_name: str | None = None
    mlflow: Any = None  # experiments.tracking.SweepTracking: where the trials log; None: not tracked


def run_dir_of(setup: TrialSetup, trial_id: str) -> Path:
    return Path(setup.sweep_dir) / "runs" / trial_id


def named_components(params: Mapping[str, Any]) -> set[str]:
    """The components a trial's parameters name (``mixture``, ``mixture.<name>``, ``component.<name>``)."""
    names = {k.removeprefix(MIXTURE_PREFIX) for k in params if k.startswith(MIXTURE_PREFIX)}
    names |= {k.removeprefix(COMPONENT_PREFIX) for k in params if k.startswith(COMPONENT_PREFIX)}
    whole = params.get(MIXTURE_KEY, {})
    return names | set(whole if isinstance(whole, Mapping) else ())


def mixture_weights(params: Mapping[str, Any]) -> dict[str, float]:
    """The component weights a trial's parameters set (``mixture`` or ``mixture.<name>``)."""
    weights = {k.removeprefix(MIXTURE_PREFIX): float(v) for k, v in params.items() if k.startswith(MIXTURE_PREFIX)}
    weights.update({k: float(v) for k, v in params.get(MIXTURE_KEY, {}).items()})
    return weights


def component_tables(params: Mapping[str, Any]) -> dict[str, str]:
    """Components a trial reads from another table or snapshot (``component.<name> = "ns.table@ref"``)."""
    return {k.removeprefix(COMPONENT_PREFIX): str(v) for k, v in params.items() if k.startswith(COMPONENT_PREFIX)}


def is_config_key(key: str) -> bool:
    """A training config key (``section.key``) rather than data (mixture, component) or a label (variant)."""
    return "." in key and not key.startswith((MIXTURE_PREFIX, COMPONENT_PREFIX))


def param_overrides(params: Mapping[str, Any]) -> list[str]:
    """The ``--set`` overrides a trial's parameters make: its training config keys."""
    return [f"{key}={toml_literal(value)}" for key, value in params.items() if is_config_key(key)]


def trial_overrides(setup: TrialSetup, params: Mapping[str, Any], run_dir: Path) -> list[str]:
    """The ``--set`` overrides of one trial: the sweep's fixed ones, the run directory, its parameters."""
    return [*setup.overrides, f"run.dir={toml_literal(str(run_dir))}", *param_overrides(params)]


def run_trial(config: dict[str, Any], setup: TrialSetup) -> None:
    """Ray Tune's function trainable: train, report each evaluation, raise if the run failed."""
    from ray import tune

    from experiments.tracking import TrialRun

    trial_id = tune.get_context().get_trial_id()
    params = config.get("params", {})
    run_dir = run_dir_of(setup, trial_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    overrides = trial_overrides(setup, params, run_dir)
    weights, tables = mixture_weights(params), component_tables(params)
    if weights or tables:
        manifest = pin_trial_manifest(setup, weights, tables, run_dir, trial_id)
        overrides += [f"data.manifest={toml_literal(manifest)}", f"eval.manifest={toml_literal(setup.base_manifest)}"]
    resume = (run_dir / "checkpoints").is_dir()  # a trial restarted after an interruption continues
    env = {**os.environ, "OMP_NUM_THREADS": str(setup.threads)}
    if setup.factory_home:
        env["FACTORY_HOME"] = setup.factory_home
    watcher = MetricsWatcher(run_dir / "metrics.jsonl", setup.target)
    with (run_dir / "trial.log").open("ab") as log, TrialRun(setup, config, run_dir, trial_id, log) as tracked:
        argv, launched = trial_command(setup, [*overrides, *tracked.overrides], resume)
        env.update({**tracked.env, **launched})
        started = time.time()
        process = subprocess.Popen(
            argv, cwd=setup.cwd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=signal_on_parent_death
        )
        try:
            while process.poll() is None:
                for summary in watcher.new_evaluations():
                    tune.report({**summary, "wall_seconds": time.time() - started})
                time.sleep(POLL_S)
        finally:  # stopped by ASHA or the sweep interrupted: the run must not outlive its trial
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        status = process.returncode
        if status != 0 and launched:  # the rank alone: its log and status end as torchrun's would have
            status, lines = failed_one_rank(status)
            log.write("".join(f"{line}\n" for line in lines).encode())
            log.flush()
        if status != 0:
            raise TrialFailed(f"training exited {status}: {_tail(run_dir / 'trial.log')}")
        list(watcher.new_evaluations())
        summary = {**watcher.summary(run_dir, setup.cwd), "wall_seconds": time.time() - started}
        tracked.finish(summary)
    tune.report({**summary, "done_training": True})


def trial_command(setup: TrialSetup, overrides: list[str], resume: bool) -> tuple[list[str], dict[str, str]]:
    """The training command of a trial and what it adds to the environment. Several ranks: torchrun
    (``trainer.launch``), as ``factory train`` runs it. One: its rank, given the environment torchrun
    gives it (the same world of one, the same run); this process watches it as torchrun would."""
    if setup.nproc == 1:
        return one_rank_command(setup.config, overrides, resume=resume), dict(ONE_RANK_ENV)
    return command(setup.config, setup.nproc, overrides, resume=resume), {}


def pin_trial_manifest(
    setup: TrialSetup, weights: Mapping[str, float], tables: Mapping[str, str], run_dir: Path, trial_id: str
) -> str:
    """This trial's manifest: the base manifest's snapshots (or the tables it names instead) pinned
    again with its weights."""
    from experiments.reweight import pin_reweighted
    from lakehouse.catalog import load_catalog
    from mixtures.manifest import Manifest

    if setup.factory_home:
        os.environ["FACTORY_HOME"] = setup.factory_home
    base = Manifest.load(setup.base_manifest)
    manifest = pin_reweighted(load_catalog(setup.catalog_name), base, weights, f"{base.name}.{trial_id}", tables)
    path = run_dir / "manifest.json"
    manifest.save(path)
    return str(path)


class MetricsWatcher:
    """Reads a run's ``metrics.jsonl`` as it grows; summarises losses for Tune and the trials table."""

    def __init__(self, path: Path, target: Mapping[str, float]) -> None:
        self.path = path
        self.target = dict(target)
        self._offset = 0
        self.curve: list[list[float]] = []
        self.evals: list[tuple[int, dict[str, float]]] = []

    def new_evaluations(self) -> list[dict[str, Any]]:
        """A summary after each evaluation written since the last call."""
        found = []
        for record in self._read_new():
            if record.get("kind") == "train":
                self.curve.append([record["step"], record["loss"]])
            elif record.get("kind") == "eval":
                losses = {k: v["loss"] for k, v in record.items() if isinstance(v, dict) and "loss" in v}
                self.evals.append((record["step"], losses))
                found.append(self._so_far(record["step"]))
        return found

    def _read_new(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next look
        self._offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def _so_far(self, step: int) -> dict[str, Any]:
        final = self.evals[-1][1] if self.evals else {}
        best: dict[str, float] = {}
        for _, losses in self.evals:
            for name, loss in losses.items():
                best[name] = min(loss, best.get(name, float("inf")))
        return {
            "step": step,
            "target": target_metric(final, self.target),
            "final_loss": final,
            "best_loss": best,
            "loss_curve": _thin(self.curve),
        }

    def summary(self, run_dir: Path, cwd: str) -> dict[str, Any]:
        """The whole run: losses, the tokens it trained on and the manifest it read (a relative
        path in its config is relative to ``cwd``, where its training ran, not to Ray's worker)."""
        step = self.curve[-1][0] if self.curve else 0
        resolved = json.loads((run_dir / "config.resolved.json").read_text())
        data = resolved["data"]
        from mixtures.manifest import Manifest

        fingerprint = Manifest.load(Path(cwd) / data["manifest"]).fingerprint
        tokens = int(step) * data["global_batch_size"] * data["seq_len"]
        return {**self._so_far(step), "tokens_seen": tokens, "manifest_fingerprint": fingerprint}


def target_metric(losses: Mapping[str, float], target: Mapping[str, float]) -> float | None:
    """The weighted mean of held-out losses the sweep ranks by; every component alike when
    ``target`` is empty. None when a named component was not evaluated."""
    weights = dict(target) or dict.fromkeys(losses, 1.0)
    if not weights or any(name not in losses for name, w in weights.items() if w > 0):
        return None
    total = sum(weights.values())
    return sum(losses[name] * w for name, w in weights.items() if w > 0) / total


def _thin(curve: list[list[float]]) -> list[list[float]]:
    if len(curve) <= MAX_CURVE_POINTS:
        return list(curve)
    stride = -(-len(curve) // MAX_CURVE_POINTS)
    return curve[::stride] + ([curve[-1]] if (len(curve) - 1) % stride else [])


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text[-lines:] if line.strip())[-1500:]
