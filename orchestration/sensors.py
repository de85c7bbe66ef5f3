"""The sensors that run a factory by itself (docs/factory.md, "Running it under Dagster").

- One per source, every ``watch`` seconds: files that no ingest has taken in (the listing of an
  input differs from every ingest run's) start ``<source>_refresh`` (ingest and everything
  downstream of it); a raw snapshot that the next step has not taken in (an ingest by hand)
  starts ``<source>_refine`` (dedup, filter, decontaminate, the gate, then the mixtures and runs).
  While a run it started for the source is queued or at work, it starts nothing for it: the
  refresh's own ingest makes a raw snapshot not yet refined, which is that run's to refine.
- ``checkpoint_sensor``, as often as the most watched source, at most every 30 s ("eval waits
  for checkpoint"): each complete checkpoint of
  each run's current folder that an eval's cadence covers starts that eval's job for it, once
  (the cursor holds the newest step seen per folder, each request's run key names the eval
  and the checkpoint, which Dagster launches at most once, and a checkpoint already in
  evals.results, evaluated before the cursor was lost, is not requested).
- ``experiment_sensor``, at half that rate: a declared ablation with no decision on its base, or a sweep
  not run on its base, starts its job.

Each sensor names every job it may start: Dagster refuses, at each tick, a request for a job
the sensor does not name.

Run keys come from what a request is about, so a sensor that evaluates again (after a restart,
with its cursor lost) never starts the same work twice.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

import dagster as dg

from lakehouse.decisions import decision_id, find_decision
from orchestration.adoption import KIND as ABLATION
from orchestration.adoption import experiment_inputs, sweep_done
from orchestration.definition import FactoryDefinition, Source
from orchestration.layout import mixture_folder, read_current
from orchestration.sources import ingest_run_id
from orchestration.state import catalog, committed, head, refined_inputs
from orchestration.training import current_run_dir, due_checkpoints, unevaluated

if TYPE_CHECKING:  # what dg.define_asset_job returns (dagster does not export the type)
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition as Job

RUNNING = dg.DefaultSensorStatus.RUNNING
# Every status of a run not yet ended (a dead worker's run ends as failed once run monitoring
# finds it, docs/factory.md).
AT_WORK = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def source_sensor(definition: FactoryDefinition, source: Source, refresh: Job, refine: Job) -> dg.SensorDefinition:
    raw = f"raw.{source.name}"

    @dg.sensor(
        name=f"{source.name}_sensor",
        jobs=[refresh, refine],
        minimum_interval_seconds=max(1, int(source.watch)),
        default_status=RUNNING,
        description=f"new files under {source.name}'s paths → {refresh.name}; a raw snapshot not yet refined → {refine.name}",
    )
    def watch(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        at_work = context.instance.get_run_records(dg.RunsFilter(tags=_tags(source), statuses=AT_WORK), limit=1)
        if at_work:
            run = at_work[0].dagster_run
            return dg.SensorResult(skip_reason=f"{source.name}: run {run.run_id} ({run.job_name}) is at work on it")
        cat = catalog()
        ids = [ingest_run_id(definition, source, n) for n in range(len(source.inputs))]
        if not all(committed(cat, raw, i) for i in ids):
            key = f"{source.name}:files:{hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]}"
            return dg.SensorResult(run_requests=[dg.RunRequest(run_key=key, job_name=refresh.name, tags=_tags(source))])
        snapshot = head(cat, raw)
        steps = source.tables()
        if len(steps) > 1 and snapshot is not None and (raw, snapshot) not in refined_inputs(cat, steps[1][1]):
            request = dg.RunRequest(run_key=f"{source.name}:{raw}@{snapshot}", job_name=refine.name, tags=_tags(source))
            return dg.SensorResult(run_requests=[request])
        return dg.SensorResult(skip_reason=f"{source.name}: every file is ingested and {raw}@{snapshot} refined")

    return watch


def _tags(source: Source) -> dict[str, str]:
    return {"factory/source": source.name}


def checkpoint_sensor(
    definition: FactoryDefinition, eval_jobs: dict[str, tuple[Job, str]], interval: int
) -> dg.SensorDefinition:
    """``eval_jobs``: eval name → (its job, its asset's op name)."""
    from trainer.checkpoint_paths import complete_checkpoints

    @dg.sensor(
        name="checkpoint_sensor",
        jobs=[job for job, _ in eval_jobs.values()],
        minimum_interval_seconds=interval,
        default_status=RUNNING,
        description="each complete checkpoint an eval's cadence covers → that eval's job, once",
    )
    def checkpoints(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor = json.loads(context.cursor) if context.cursor else {}
        requests = []
        for run in definition.runs:
            run_dir = current_run_dir(definition, run)
            if run_dir is None:
                continue
            newest = cursor.get(str(run_dir), -1)
            steps = [step for step, _ in complete_checkpoints(run_dir) if step > newest]
            if not steps:
                continue
            for declared in (e for e in definition.evals.values() if run in e.runs):
                job, op = eval_jobs[declared.name]
                for path in unevaluated(catalog(), declared, due_checkpoints(declared, run_dir, after=newest)):
                    config = dg.RunConfig(ops={op: {"config": {"checkpoint": str(path)}}})
                    requests.append(
                        dg.RunRequest(
                            run_key=f"{declared.name}:{path}",
                            job_name=job.name,
                            run_config=config,
                            tags={"factory/checkpoint": str(path), "factory/eval": declared.name},
                        )
                    )
            cursor[str(run_dir)] = max(steps)
        if not requests and cursor == (json.loads(context.cursor) if context.cursor else {}):
            return dg.SensorResult(skip_reason="no new complete checkpoint")
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(cursor, sort_keys=True))

    return checkpoints


def experiment_sensor(definition: FactoryDefinition, jobs: dict[str, Job], interval: int) -> dg.SensorDefinition:
    """``jobs``: experiment name → its job."""

    @dg.sensor(
        name="experiment_sensor",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval,
        default_status=RUNNING,
        description="a declared ablation or sweep not yet run on its base → its job",
    )
    def experiments(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        requests = []
        for experiment in definition.experiments.values():
            run = definition.runs[experiment.run]
            if read_current(mixture_folder(definition, run.mixture)) is None:
                continue  # its data does not exist yet: the chain's first run makes it
            inputs = experiment_inputs(definition, experiment)
            key = decision_id(ABLATION, experiment.name, inputs)
            if experiment.kind == "ablation" and find_decision(catalog(), key) is not None:
                continue
            if experiment.kind == "sweep" and sweep_done(definition, experiment):
                continue
            requests.append(dg.RunRequest(run_key=f"{experiment.name}:{key}", job_name=jobs[experiment.name].name))
        if not requests:
            return dg.SensorResult(skip_reason="every declared experiment has run on its base")
        return dg.SensorResult(run_requests=requests)

    return experiments
