"""Running trials on Ray Tune and recording each one in ``experiments.trials``.

Ray Tune is the scheduler: it expands the search space (grid, or random with a seed), runs as
many trials at once as the CPUs and GPUs each asks for allow (locally or on a cluster given its
address), stops poor ones early when ASHA is on, keeps an errored trial from stopping the
others, and saves its state so an interrupted sweep resumes (``Tuner.restore``) without
re-running finished trials. A driver-side callback commits each trial's row as the trial ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ray.tune import Callback

from experiments.sweep_spec import MIXTURE_KEY, SweepSpec, toml_literal
from experiments.tracking import environment_variable, log_sweep_outcome, sweep_run
from experiments.trial import (
    TrialSetup,
    is_config_key,
    named_components,
    param_overrides,
    run_dir_of,
    run_trial,
)
from experiments.trials_table import commit_trial, read_trials
from lakehouse.catalog import factory_home
from lakehouse.errors import ConfigError, InputError, ManifestError, RunConflictError
from lakehouse.file_locks import LockHeld, locked
from trainer.config import Config, load_config

log = logging.getLogger("factory.experiments")

TUNE_DIR = "tune"
# A sweep's space is checked before Ray starts: every combination of its training config values
# when there are at most this many, else each value on its own.
MAX_CHECKED_COMBINATIONS = 1000


@dataclass(frozen=True)
class Schedule:
    """How Tune runs the trials: what each asks for, how many, in what order, stopped how."""

    cpus: float = 1.0
    gpus: float = 0.0
    samples: int = 1
    seed: int = 0
    asha: Any = None  # sweep_spec.Asha or None


@dataclass(frozen=True)
class SweepOutcome:
    sweep_id: str
    sweep_dir: Path
    rows: list[dict[str, Any]]
    trials: int  # trials Tune knows of; those without a row were interrupted

    @property
    def unfinished(self) -> int:
        return self.trials - len(self.rows)


def sweep_dir_of(sweep_id: str) -> Path:
    return factory_home() / "sweeps" / sweep_id


def prepare_setup(
    sweep_id: str,
    kind: str,
    config: str,
    overrides: tuple[str, ...] | list[str],
    *,
    nproc: int = 1,
    cpus: float = 1.0,
    target: Mapping[str, float] | None = None,
    catalog_name: str | None = None,
    trials: Iterable[tuple[str, Mapping[str, Any]]] = (),
) -> TrialSetup:
    """Check the base config here, before Ray starts, and fix what every trial shares.

    ``trials``: (label, parameters) of what the trials will set, each checked now as well: its
    training config keys applied to the base config as a trial applies them, and the components it
    names (and ``target``'s) against the base manifest's. A mistake fails here, not in every trial."""
    overrides = list(overrides)
    cfg = _checked_config(config, overrides, nproc)
    components = _base_components(cfg)
    _check_components("target", set(target or {}), components)
    for label, params in trials:
        if extra := param_overrides(params):
            _checked_config(config, [*overrides, *extra], nproc, label)
        _check_components(label, named_components(params), components)
    if not cfg.eval.every:  # a trial's metric is a held-out loss: evaluate at least at the last step
        overrides.append("eval.every=1000000000")
    return TrialSetup(
        sweep_id=sweep_id,
        kind=kind,
        sweep_dir=str(sweep_dir_of(sweep_id)),
        cwd=os.getcwd(),
        config=str(Path(config).resolve()),
        overrides=tuple(overrides),
        nproc=nproc,
        threads=max(1, int(cpus // nproc)),
        base_manifest=str(Path(cfg.data.manifest).resolve()),
        target=dict(target or {}),
        factory_home=str(factory_home()),
        catalog_name=catalog_name,
    )


def _checked_config(config: str, overrides: list[str], nproc: int, label: str = "") -> Config:
    """The training config with ``overrides``, checked for ``nproc`` ranks; a refusal prefixed by ``label``."""
    try:
        cfg = load_config(config, overrides)
        cfg.check_world(nproc)
    except ConfigError as exc:
        if not label:
            raise
        raise ConfigError(f"{label}: {exc}") from None
    return cfg


def _base_components(cfg: Config) -> list[str] | None:
    """The components of the base manifest (``data.manifest``); None if it cannot be read (a trial, or
    the search, reports that in its own words)."""
    from mixtures.manifest import Manifest

    try:
        return [c.name for c in Manifest.load(cfg.data.manifest).components]
    except ManifestError:
        return None


def _check_components(label: str, names: set[str], components: list[str] | None) -> None:
    unknown = sorted(names - set(components)) if components is not None else []
    if unknown:
        raise ConfigError(
            f"{label}: unknown component(s) {', '.join(unknown)}; the base manifest's: {', '.join(components)}"
        )


def space_checks(space: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """What of a sweep's space ``prepare_setup`` checks, as (label, parameters): the values a trial
    may take (a list's; a distribution's choices, or its two ends), the training config keys' values
    in every combination (each on its own past MAX_CHECKED_COMBINATIONS)."""
    values = {key: _values_to_check(value) for key, value in space.items()}
    config = {key: v for key, v in values.items() if is_config_key(key)}
    checks = [(f"space.{key}", {key: v}) for key, vs in values.items() if key not in config for v in vs]
    if math.prod(len(v) for v in config.values()) <= MAX_CHECKED_COMBINATIONS:
        combinations = [dict(zip(config, c, strict=True)) for c in itertools.product(*config.values())]
    else:
        combinations = [{key: v} for key, vs in config.items() for v in vs]
    for combination in filter(None, combinations):
        shown = ", ".join(f"{key} = {toml_literal(v)}" for key, v in combination.items())
        checks.append((f"space ({shown})", combination))
    return checks


def _values_to_check(value: Any) -> list[Any]:
    """A dimension's grid values or choices, or a distribution's lowest and highest draws."""
    if isinstance(value, list):
        return value
    kind, args = next(iter(value.items()))
    if kind == "randint":  # as tune_space: integers in [low, high)
        low, high = int(args[0]), int(args[1])
        return [low] if high - 1 <= low else [low, high - 1]
    return list(args)


def tune_space(space: Mapping[str, Any], method: str) -> dict[str, Any]:
    """A sweep spec's space in Tune's terms: lists are grid axes (random: a choice)."""
    from ray import tune

    made = {}
    for key, value in space.items():
        if isinstance(value, list):
            made[key] = tune.grid_search(value) if method == "grid" or key == MIXTURE_KEY else tune.choice(value)
            continue
        kind, args = next(iter(value.items()))
        made[key] = {
            "uniform": lambda a: tune.uniform(*a),
            "loguniform": lambda a: tune.loguniform(*a),
            "randint": lambda a: tune.randint(int(a[0]), int(a[1])),
            "choice": tune.choice,
        }[kind](args)
    return made


def run_sweep(
    spec: SweepSpec,
    *,
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    catalog_name: str | None = None,
    sweep_id: str | None = None,
) -> SweepOutcome:
    """``factory sweep SPEC``: every trial of the spec's space, as training runs, on Ray Tune."""
    sweep_id = sweep_id or spec.sweep_id
    setup = prepare_setup(
        sweep_id, "sweep", spec.config, spec.set, nproc=spec.nproc, cpus=spec.cpus, target=spec.target,
        catalog_name=catalog_name, trials=space_checks(spec.space),
    )  # fmt: skip
    schedule = Schedule(cpus=spec.cpus, gpus=spec.gpus, samples=spec.samples, seed=spec.seed, asha=spec.asha)
    space = {"params": tune_space(spec.space, spec.method)}
    return run_trials(setup, space, schedule, resume=resume, address=address, num_cpus=num_cpus)


def run_trials(
    setup: TrialSetup,
    param_space: Mapping[str, Any],
    schedule: Schedule,
    *,
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    trainable: Callable[[dict[str, Any], TrialSetup], None] = run_trial,
) -> SweepOutcome:
    """Run (or resume) the trials of ``param_space`` (Tune's, each trial's parameters under
    ``params``) on Ray Tune; one row per finished trial. Tracked in MLflow as the base config says
    (``experiments/tracking.py``)."""
    sweep_dir = Path(setup.sweep_dir)
    state = sweep_dir / TUNE_DIR
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with _only_process(sweep_dir, setup.sweep_id):
        _refuse_a_wrong_start(setup, state, resume)
        with sweep_run(setup) as tracking:
            tracked = dataclasses.replace(setup, mlflow=tracking)
            outcome = _fit(tracked, param_space, schedule, resume, address, num_cpus, trainable)
            log_sweep_outcome(tracking, outcome.rows)
    return outcome


def _refuse_a_wrong_start(setup: TrialSetup, state: Path, resume: bool) -> None:
    """--resume needs Tune's saved state; a fresh start needs neither that state nor rows under
    the sweep's id. Rows that outlived their state (the folder removed) would mix two runs' rows
    under one id: every count, report and decision read from them."""
    from lakehouse.catalog import load_catalog

    if resume:
        if not state.is_dir():
            raise InputError(f"sweep {setup.sweep_id} has no saved state at {state}: nothing to resume (drop --resume)")
        return
    if state.is_dir():
        raise InputError(
            f"sweep {setup.sweep_id} was started before ({state}): --resume continues it; to run it again "
            f"from scratch, change the spec's `name` (its rows stay under this id)"
        )
    if earlier := read_trials(load_catalog(setup.catalog_name), setup.sweep_id):
        raise InputError(
            f"sweep {setup.sweep_id} has {len(earlier)} trial row(s) in experiments.trials from an earlier run "
            f"whose saved state is gone ({state}): it can be neither resumed nor "
            f"started again under this id; change the spec's `name` to run it afresh"
        )


@contextlib.contextmanager
def _only_process(sweep_dir: Path, sweep_id: str) -> Iterator[None]:
    """Refuse a second process on a sweep while one runs it: Tune's saved state and the sweep's rows
    belong to one run of it (two at once each count the other's rows as theirs). The kernel drops
    the lock when its holder dies, so --resume after a kill is never refused."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(locked(sweep_dir / "sweep.lock", wait=False))
        except LockHeld:
            raise RunConflictError(
                f"sweep {sweep_id} is being run by another process now; wait for it to end "
                f"(--resume then continues it if it was interrupted)"
            ) from None
        yield


def _fit(
    setup: TrialSetup,
    param_space: Mapping[str, Any],
    schedule: Schedule,
    resume: bool,
    address: str | None,
    num_cpus: int | None,
    trainable: Callable[[dict[str, Any], TrialSetup], None],
) -> SweepOutcome:
    """The trials on Ray Tune: started, or restored from the sweep's saved state."""
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import BasicVariantGenerator

    sweep_dir = Path(setup.sweep_dir)
    state = sweep_dir / TUNE_DIR
    recorder = TrialRecorder(setup)
    fn = tune.with_resources(tune.with_parameters(trainable, setup=setup), {"cpu": schedule.cpus, "gpu": schedule.gpus})
    with ray_session(address, num_cpus):
        if resume:
            # Finished trials stay finished; unfinished ones run again (from their run's last
            # checkpoint); errored ones stay errored, as their rows say.
            tuner = tune.Tuner.restore(str(state), fn, resume_unfinished=True, resume_errored=False)
        else:
            scheduler = None
            if schedule.asha is not None:
                scheduler = ASHAScheduler(
                    time_attr="training_iteration",
                    grace_period=schedule.asha.grace_period,
                    reduction_factor=schedule.asha.reduction_factor,
                    max_t=10**6,
                )
            tuner = tune.Tuner(
                fn,
                param_space=dict(param_space),
                tune_config=tune.TuneConfig(
                    metric="target",
                    mode="min",
                    num_samples=schedule.samples,
                    search_alg=BasicVariantGenerator(random_state=schedule.seed),
                    scheduler=scheduler,
                    # A trial's worker is kept for the next one: a new one would start a Python
                    # process and import Ray Tune again for every trial (seconds each).
                    reuse_actors=True,
                ),
                run_config=tune.RunConfig(
                    name=TUNE_DIR,
                    storage_path=str(sweep_dir),
                    callbacks=[recorder, CSVLoggerCallback(), JsonLoggerCallback()],
                    failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
                    verbose=0,
                ),
            )
        # Tune adds its TensorBoard logger unless this says not to (its CSV and JSON ones are kept
        # above): importing tensorboardX and writing event files nothing here reads (a trial's curves
        # are in MLflow and its run's metrics.jsonl) cost 2.4-3.0 s of each sweep driver's CPU.
        with environment_variable("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1"):
            results = tuner.fit()
        recorder.record_results(results)
    from lakehouse.catalog import load_catalog

    rows = read_trials(load_catalog(setup.catalog_name), setup.sweep_id)
    return SweepOutcome(setup.sweep_id, sweep_dir, rows, trials=len(results))


@contextlib.contextmanager
def ray_session(address: str | None, num_cpus: int | None) -> Iterator[None]:
    """Ray for one sweep: joined at ``address``, else started here with ``num_cpus``; shut down
    after if this call started it."""
    import ray

    if ray.is_initialized():
        yield
        return
    ray.init(
        address=address,
        num_cpus=None if address else (num_cpus or os.cpu_count()),
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()


class TrialRecorder(Callback):
    """A Tune callback in the driver: each trial's row is committed as soon as it ends."""

    def __init__(self, setup: TrialSetup) -> None:
        self.trial_setup = setup

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._record(trial.trial_id, trial.config.get("params", {}), trial.last_result or {}, None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._record(trial.trial_id, trial.config.get("params", {}), trial.last_result or {}, _error_text(trial))

    def record_results(self, results: Any) -> None:
        """After ``fit``: a finished trial the callback missed (it failed to commit) is recorded now."""
        for result in results:
            trial_id = (result.metrics or {}).get("trial_id")
            if trial_id and (result.error is not None or result.metrics.get("done_training")):
                error = None if result.error is None else str(result.error)
                self._record(trial_id, (result.config or {}).get("params", {}), result.metrics, error, quiet=True)

    def _record(
        self, trial_id: str, params: Mapping[str, Any], result: Mapping[str, Any], error: str | None, quiet=False
    ) -> None:
        from lakehouse.catalog import load_catalog

        row = trial_row(self.trial_setup, trial_id, params, result, error)
        try:
            committed = commit_trial(load_catalog(self.trial_setup.catalog_name), row)
        except Exception as exc:  # the sweep goes on; the row is retried after fit
            log.warning("trial %s: its row could not be committed (%s)", trial_id, exc)
            return
        if committed is not None or not quiet:
            metric = "-" if row["metric"] is None else f"{row['metric']:.4f}"
            print(f"trial {trial_id} {row['status']}: metric {metric}  {_short(params)}", file=sys.stderr, flush=True)


def _error_text(trial: Any) -> str:
    """Why a trial failed, from the error file Tune has just written beside it: our own
    ``TrialFailed`` line (the run's last log lines) when there is one, else its last lines."""
    try:
        text = Path(trial.error_file).read_text(errors="replace") if trial.error_file else ""
    except OSError:
        text = ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [line.split("TrialFailed: ", 1)[1] for line in lines if "TrialFailed: " in line]
    return ours[-1] if ours else (" | ".join(lines[-3:]) or "failed (no error recorded)")


def trial_row(
    setup: TrialSetup, trial_id: str, params: Mapping[str, Any], result: Mapping[str, Any], error: str | None
) -> dict[str, Any]:
    status = "failed" if error is not None else "completed" if result.get("done_training") else "stopped"
    return {
        "sweep_id": setup.sweep_id,
        "trial_id": trial_id,
        "kind": setup.kind,
        "params": dict(params),
        "run_dir": str(run_dir_of(setup, trial_id)),
        "manifest_fingerprint": result.get("manifest_fingerprint"),
        "status": status,
        "metric": result.get("target"),
        "final_loss": result.get("final_loss"),
        "best_loss": result.get("best_loss"),
        "tokens_seen": result.get("tokens_seen"),
        "wall_seconds": result.get("wall_seconds"),
        "loss_curve": result.get("loss_curve"),
        "error": None if error is None else error[-2000:],
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _short(params: Mapping[str, Any]) -> str:
    def shown(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {shown(x)}" for k, x in v.items()) + "}"
        return str(v)

    return "  ".join(f"{k}={shown(v)}" for k, v in params.items())


def check_address(address: str | None) -> None:
    if address is not None and not address.strip():
        raise ConfigError("--address is empty: give ray://host:10001, host:6379 or auto")
