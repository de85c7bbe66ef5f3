"""The Dagster graph of a factory definition: every asset made by a factory function from the
file, the jobs the sensors start, and the sensors (docs/factory.md, "The graph").

    <source>/raw → <source>/dedup → <source>/filtered → <source>/decontaminated → <source>/production
    every <source>/production → tokenizer → mixture/<name> → run/<name> → checkpoints/<name> → evals/<name>
    mixture/<name>, tokenizer → experiment/<name>

Nothing is named after a particular factory: two sources give two chains of assets, in two groups.
"""

from __future__ import annotations

import dagster as dg

from orchestration.adoption import experiment_asset
from orchestration.commands import CommandRunner, SubprocessRunner
from orchestration.definition import FactoryDefinition
from orchestration.keys import evals_key, experiment_key, step_key
from orchestration.sensors import checkpoint_sensor, experiment_sensor, source_sensor
from orchestration.sources import source_assets
from orchestration.training import checkpoints_asset, evals_asset, mixture_asset, run_asset, tokenizer_asset


def build_assets(definition: FactoryDefinition) -> list[dg.AssetsDefinition]:
    assets = [a for source in definition.sources.values() for a in source_assets(definition, source)]
    assets.append(tokenizer_asset(definition))
    assets += [mixture_asset(definition, m) for m in definition.mixtures.values()]
    for run in definition.runs.values():
        assets += [run_asset(definition, run), checkpoints_asset(definition, run)]
    assets += [evals_asset(definition, e) for e in definition.evals.values()]
    assets += [experiment_asset(definition, e) for e in definition.experiments.values()]
    return assets


def look_interval(definition: FactoryDefinition) -> int:
    """Seconds between the checkpoint sensor's looks: as often as the most watched source, at most 30."""
    watched = [s.watch for s in definition.sources.values() if s.watch]
    return max(1, int(min([30, *watched])))


def build_definitions(definition: FactoryDefinition, runner: CommandRunner | None = None) -> dg.Definitions:
    """The assets, jobs and sensors of ``definition``; its commands run by ``runner`` (default: each
    in its own `factory` process)."""
    assets = build_assets(definition)
    later = dg.AssetSelection.assets(*[evals_key(e) for e in definition.evals]) | dg.AssetSelection.assets(
        *[experiment_key(e) for e in definition.experiments]
    )
    jobs, sensors = [], []
    for source in definition.sources.values():
        steps = [step for step, _ in source.tables()] + ["production"]
        refresh = dg.define_asset_job(
            f"{source.name}_refresh",
            selection=dg.AssetSelection.assets(step_key(source.name, "raw")).downstream() - later,
            description=f"ingest {source.name}'s new files, refine them, gate, then mix and train",
            tags={"factory/source": source.name},
        )
        refine = dg.define_asset_job(
            f"{source.name}_refine",
            selection=dg.AssetSelection.assets(step_key(source.name, steps[1])).downstream() - later,
            description=f"refine {source.name}'s newest raw snapshot, gate, then mix and train",
            tags={"factory/source": source.name},
        )
        jobs += [refresh, refine]
        if source.watch:
            sensors.append(source_sensor(definition, source, refresh, refine))
    eval_jobs = {}
    for declared in definition.evals.values():
        job = dg.define_asset_job(f"evaluate_{declared.name}", selection=[evals_key(declared.name)])
        jobs.append(job)
        op = next(a for a in assets if evals_key(declared.name) in a.keys).op.name
        eval_jobs[declared.name] = (job, op)
    if eval_jobs:
        sensors.append(checkpoint_sensor(definition, eval_jobs, look_interval(definition)))
    experiment_jobs = {}
    for name in definition.experiments:
        job = dg.define_asset_job(f"experiment_{name}", selection=[experiment_key(name)])
        jobs.append(job)
        experiment_jobs[name] = job
    if experiment_jobs:
        sensors.append(experiment_sensor(definition, experiment_jobs, 2 * look_interval(definition)))
    jobs.append(dg.define_asset_job("factory_all", selection=dg.AssetSelection.all(), description="every asset once"))
    # Steps run one after another in the run's own process: a chain's steps depend on each other,
    # and a process per step would add seconds of Python and Dagster start-up to each.
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        sensors=sensors,
        resources={"commands": runner or SubprocessRunner()},
        executor=dg.in_process_executor,
    )
