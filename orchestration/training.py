"""The assets after the sources: the tokenizer, each mixture, each training run, its checkpoints
and the evals of them (docs/factory.md, "Mixtures", "Runs", "Evals").

A mixture is pinned from its sources' ``production`` snapshots; a training run trains on its
mixture's current manifest in a folder named by that manifest's fingerprint, the training
config and its overrides (adopted ones included), so new data or a new config starts a new run
and the same ones resume it (a finished run: nothing to do). A run in progress is never changed:
its folder keeps the config it started with.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

import dagster as dg
from pyiceberg.catalog import Catalog

from experiments.sweep_spec import toml_literal
from lakehouse.errors import InputError
from lakehouse.local_files import write_atomically
from orchestration.adoption import adopted_overrides
from orchestration.commands import run_factory
from orchestration.definition import Eval, FactoryDefinition, Mixture, Run
from orchestration.keys import TOKENIZER, checkpoints_key, evals_key, mixture_key, production_key, run_key
from orchestration.layout import mixture_folder, read_current, run_folder, tokenizer_path, write_current
from orchestration.locks import exclusive
from orchestration.manifests import Pinned, fingerprint_of, pin_mixture
from orchestration.mixture_policy import determine
from orchestration.state import PRODUCTION, catalog, committed_runs, tagged

GROUP = "training"


def production_snapshots(definition: FactoryDefinition, names: tuple[str, ...]) -> list[Pinned] | str:
    """Each named source's final table pinned at its ``production`` tag; or why not all can be:
    a source whose first snapshot is still being refined has none yet."""
    cat = catalog()
    pinned = []
    for name in names:
        table = definition.sources[name].final_table
        snapshot = tagged(cat, table)
        if snapshot is None:
            return f"{table} has no {PRODUCTION} snapshot yet (its first is still being refined)"
        pinned.append(Pinned(name, table, snapshot))
    return pinned


def tokenizer_asset(definition: FactoryDefinition) -> dg.AssetsDefinition:
    settings = definition.tokenizer
    names = settings.sources or tuple(definition.sources)

    @dg.asset(
        key=TOKENIZER,
        output_required=False,
        deps=[production_key(n) for n in names],
        group_name=GROUP,
        kinds={"json"},
        required_resource_keys={"commands"},
        description="a byte-level BPE tokenizer trained once on the sources' production snapshots "
        "(`factory tokenizer train`); kept while its settings stay, so runs stay comparable",
    )
    def tokenizer(context: dg.AssetExecutionContext):
        path = tokenizer_path(definition)
        pinned = production_snapshots(definition, names)
        if isinstance(pinned, str) and not path.is_file():
            context.log.warning("the tokenizer waits, and what needs it: %s", pinned)
            return
        refs = [] if isinstance(pinned, str) else [p.ref for p in pinned]
        with exclusive(definition.folder(), "tokenizer", context.log.info):
            if not path.is_file():
                argv = ["tokenizer", "train", "--input", *refs, "--vocab-size", str(settings.vocab_size)]
                argv += ["--max-bytes", str(settings.max_bytes), "--min-frequency", str(settings.min_frequency)]
                run_factory(context, [*argv, "--output", str(path)])
        yield dg.MaterializeResult(metadata={"path": str(path), "trained_on": _trained_on(path)})

    return tokenizer


def _trained_on(path: Path) -> str:
    record = json.loads(path.read_text(encoding="utf-8")).get("model", {}).get("factory", {})
    return ", ".join(f"{i['table']}@{i['snapshot_id']}" for i in record.get("inputs", []))


def mixture_asset(definition: FactoryDefinition, mixture: Mixture) -> dg.AssetsDefinition:
    deps = [production_key(c) for c in mixture.components] + ([TOKENIZER] if mixture.search else [])

    @dg.asset(
        key=mixture_key(mixture.name),
        output_required=False,
        deps=deps,
        group_name=GROUP,
        kinds={"json"},
        required_resource_keys={"commands"},
        description=(
            "the mixture's fixed weights pinned at its sources' production snapshots (`factory mix pin`)"
            if mixture.weights
            else "the mixture's weights found by `factory mix search`, searched again when a component changes"
        ),
    )
    def mix(context: dg.AssetExecutionContext):
        pinned = production_snapshots(definition, mixture.components)
        if isinstance(pinned, str):
            context.log.warning("mixture %s waits, and the runs on it: %s", mixture.name, pinned)
            return
        folder = mixture_folder(definition, mixture.name)
        with exclusive(definition.folder(), f"mixture-{mixture.name}", context.log.info):
            if mixture.weights is not None:
                manifest = pin_mixture(
                    context, folder, mixture.name, mixture.seed, pinned, mixture.weights, mixture.heldout
                )
                record = {"manifest": str(manifest), "fingerprint": fingerprint_of(manifest),
                          "components": {p.name: p.ref for p in pinned}, "weights": dict(mixture.weights)}  # fmt: skip
            else:
                record = determine(context, definition, mixture, pinned)
            write_current(folder, record)
        yield dg.MaterializeResult(metadata={k: str(v) for k, v in record.items()})

    return mix


def run_asset(definition: FactoryDefinition, run: Run) -> dg.AssetsDefinition:
    @dg.asset(
        key=run_key(run.name),
        deps=[mixture_key(run.mixture), TOKENIZER],
        group_name=GROUP,
        kinds={"torch"},
        required_resource_keys={"commands"},
        description=f"training run {run.name} on mixture {run.mixture} (`factory train --resume` under torchrun)",
    )
    def train(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        mixture = read_current(mixture_folder(definition, run.mixture))
        if mixture is None:
            raise dg.Failure(f"mixture {run.mixture} has no manifest yet: materialise mixture/{run.mixture} first")
        adopted, decisions = adopted_overrides(definition, run)
        overrides = [*run.set, *adopted]
        run_dir = run_folder(definition, run.name) / _run_name(run, mixture["fingerprint"], overrides)
        record = {"factory": definition.name, "run": run.name, "mixture": run.mixture, "run_dir": str(run_dir),
                  "manifest": mixture["manifest"], "fingerprint": mixture["fingerprint"], "overrides": overrides,
                  "decisions": [d for d in [mixture.get("decision"), *decisions] if d]}  # fmt: skip
        with exclusive(definition.folder(), f"run-{run.name}", context.log.info):
            run_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(run_dir / "factory.json", json.dumps(record, indent=2) + "\n")
            write_current(run_folder(definition, run.name), record)
            finished = _finished_at(run_dir)
            if finished is not None:
                context.log.info("run %s finished at step %d in %s: nothing to train", run.name, finished, run_dir)
                return dg.MaterializeResult(metadata={"run_dir": str(run_dir), "overrides": ", ".join(overrides)})
            argv = ["train", "--config", run.config, "--nproc", str(run.nproc), "--resume"]
            for override in [
                f"data.manifest={toml_literal(mixture['manifest'])}",
                f"data.tokenizer={toml_literal(str(tokenizer_path(definition)))}",
                f"run.dir={toml_literal(str(run_dir))}",
                *overrides,
            ]:
                argv += ["--set", override]
            run_factory(context, argv)
        return dg.MaterializeResult(metadata={"run_dir": str(run_dir), "overrides": ", ".join(overrides)})

    return train


def _finished_at(run_dir: Path) -> int | None:
    """The final step of a run whose newest complete checkpoint is its last step's (the trainer
    always saves that one), else None. A folder's name fixes its config, so its step count: a
    finished run is not started again only to find nothing to do (torchrun, the model, the
    loader, an MLflow run)."""
    from trainer.checkpoint_paths import latest_checkpoint

    latest = latest_checkpoint(run_dir)
    try:
        return latest[0] if latest is not None and latest[0] == _final_step(latest[1]) else None
    except (OSError, ValueError):  # an unreadable lineage: `factory train --resume` says what is wrong
        return None


def _run_name(run: Run, fingerprint: str, overrides: list[str]) -> str:
    """The training folder's name: the manifest, the config's bytes and the overrides it runs with."""
    config = hashlib.sha256(Path(run.config).read_bytes()).hexdigest()
    key = json.dumps([fingerprint, config, overrides])
    return f"{fingerprint.removeprefix('sha256:')[:8]}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def current_run_dir(definition: FactoryDefinition, run: str) -> Path | None:
    record = read_current(run_folder(definition, run))
    return None if record is None else Path(record["run_dir"])


def checkpoints_asset(definition: FactoryDefinition, run: Run) -> dg.AssetsDefinition:
    @dg.asset(
        key=checkpoints_key(run.name),
        deps=[run_key(run.name)],
        group_name=GROUP,
        kinds={"torch"},
        description=f"run {run.name}'s complete checkpoints (a folder counts once its COMPLETE marker is written)",
    )
    def checkpoints(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        from trainer.checkpoint_paths import complete_checkpoints

        run_dir = current_run_dir(definition, run.name)
        steps = [] if run_dir is None else [step for step, _ in complete_checkpoints(run_dir)]
        context.log.info("complete checkpoints at steps %s", steps)
        return dg.MaterializeResult(metadata={"run_dir": str(run_dir), "steps": steps})

    return checkpoints


class EvalConfig(dg.Config):
    checkpoint: str = ""  # one checkpoint folder ("" = every checkpoint of the eval's runs that is due)


def evals_asset(definition: FactoryDefinition, declared: Eval) -> dg.AssetsDefinition:
    @dg.asset(
        key=evals_key(declared.name),
        deps=[checkpoints_key(r) for r in declared.runs],
        group_name=GROUP,
        kinds={"iceberg"},
        required_resource_keys={"commands"},
        description=f"rows of evals.results: {', '.join(declared.suites)} on "
        + ("each checkpoint" if declared.cadence == "checkpoint" else "the last checkpoint")
        + " of "
        + ", ".join(declared.runs)
        + " (`factory eval`)",
    )
    def evals(context: dg.AssetExecutionContext, config: EvalConfig) -> dg.MaterializeResult:
        targets = [config.checkpoint] if config.checkpoint else []
        if not config.checkpoint:
            for run in declared.runs:
                run_dir = current_run_dir(definition, run)
                due = [] if run_dir is None else unevaluated(catalog(), declared, due_checkpoints(declared, run_dir))
                targets += [str(path) for path in due]
        for checkpoint in targets:
            run_factory(context, eval_argv(declared, checkpoint))
        return dg.MaterializeResult(metadata={"checkpoints": targets})

    return evals


def eval_argv(declared: Eval, checkpoint: str) -> list[str]:
    """`factory eval` of one checkpoint: its run id comes from the checkpoint, the suite and these
    options, so evaluating it again (the sensor's run, a retry) commits nothing more."""
    argv = ["eval", checkpoint, "--suite", *declared.suites, "--samples", str(declared.samples)]
    return argv + ([] if declared.limit is None else ["--limit", str(declared.limit)])


def unevaluated(cat: Catalog, declared: Eval, checkpoints: list[Path]) -> list[Path]:
    """Those of ``checkpoints`` for which a suite of ``declared`` has no eval run in evals.results.

    The run ids are computed as `factory eval` computes them from ``eval_argv``'s options, so a
    checkpoint evaluated before (by hand, by `factory run`, or under a sensor since restarted
    without its cursor) starts no process and no Dagster run. One whose run ids cannot be
    computed here (its lineage unreadable) counts as not evaluated: `factory eval` says why.
    """
    from evals.registry import SuiteOptions
    from evals.results import RESULTS_TABLE
    from evals.run import eval_run

    if not checkpoints:
        return []
    done = committed_runs(cat, ".".join(RESULTS_TABLE))
    options = SuiteOptions(samples=declared.samples, limit=declared.limit)

    def evaluated(path: Path) -> bool:
        try:
            return all(eval_run(path, suite, options).run_id in done for suite in declared.suites)
        except (OSError, ValueError, KeyError, InputError):
            return False

    return [path for path in checkpoints if not evaluated(path)]


def due_checkpoints(declared: Eval, run_dir: Path, after: int = -1) -> list[Path]:
    """The complete checkpoints of ``run_dir`` past step ``after`` that the eval's cadence covers."""
    from trainer.checkpoint_paths import complete_checkpoints

    due = []
    for step, path in complete_checkpoints(run_dir):
        if step <= after:
            continue
        if declared.cadence == "final":
            if step == _final_step(path):
                due.append(path)
        elif not declared.every or step % declared.every == 0:
            due.append(path)
    return due


def _final_step(checkpoint: Path) -> Any:
    config = json.loads((checkpoint / "lineage.json").read_text(encoding="utf-8")).get("config", {})
    return config.get("train", {}).get("steps")
