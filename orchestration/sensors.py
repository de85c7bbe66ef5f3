"""The sensors that run the chain by itself.

- ``checkpoint_sensor`` ("eval waits for checkpoint"): one ``evaluate_checkpoint`` run (the
  ``eval_results`` asset, `factory eval`) per new complete checkpoint of the training run.
  A checkpoint counts once its ``COMPLETE`` marker is written, after every other file of it is
  on disk (``trainer.checkpoint``), so a partial one is never evaluated. Never twice for a
  step: the cursor holds the newest step requested per run folder, and each request's run key
  is ``<run dir>:step-<N>``, which Dagster runs at most once per sensor even if the cursor were lost.
- ``raw_snapshot_sensor`` (incremental refinement): a new snapshot of ``raw.code`` starts
  ``refine_code``: dedup of that snapshot ``--against`` the published ``dedup.code``, then the
  filter, which validates and publishes, then decontamination. Run key ``raw.code@<id>``.
"""

import json

import dagster as dg

from orchestration.assets import DedupConfig, EvalConfig, decontaminated_code, dedup_code, eval_results, filtered_code
from orchestration.commands import snapshot_id
from orchestration.settings import FactorySettings

evaluate_checkpoint = dg.define_asset_job(
    "evaluate_checkpoint", selection=[eval_results], description="`factory eval` of one checkpoint"
)
refine_code = dg.define_asset_job(
    "refine_code",
    selection=[dedup_code, filtered_code, decontaminated_code],
    description="dedup a raw snapshot against the published one, filter and publish, decontaminate",
)


@dg.sensor(job=evaluate_checkpoint, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def checkpoint_sensor(context: dg.SensorEvaluationContext, factory: FactorySettings) -> dg.SensorResult:
    from trainer.checkpoint import complete_checkpoints

    run_dir = str(factory.training_dir())
    cursor = json.loads(context.cursor) if context.cursor else {}
    newest = cursor.get(run_dir, -1)
    new = [(step, path) for step, path in complete_checkpoints(factory.training_dir()) if step > newest]
    if not new:
        return dg.SensorResult(skip_reason=f"no complete checkpoint after step {newest} in {run_dir}")
    requests = [
        dg.RunRequest(
            run_key=f"{run_dir}:step-{step}",
            run_config=dg.RunConfig(ops={"eval_results": EvalConfig(checkpoint=str(path))}),
            tags={"factory/checkpoint": str(path), "factory/step": str(step)},
        )
        for step, path in new
    ]
    return dg.SensorResult(run_requests=requests, cursor=json.dumps({**cursor, run_dir: new[-1][0]}))


@dg.sensor(job=refine_code, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def raw_snapshot_sensor(context: dg.SensorEvaluationContext, factory: FactorySettings) -> dg.SensorResult:
    current = snapshot_id(factory, "raw.code")
    if current is None:
        return dg.SensorResult(skip_reason="raw.code has no snapshot yet")
    if context.cursor == str(current):
        return dg.SensorResult(skip_reason=f"raw.code@{current} was already refined")
    request = dg.RunRequest(
        run_key=f"raw.code@{current}",
        run_config=dg.RunConfig(ops={"dedup_code": DedupConfig(raw_snapshot=current)}),
        tags={"factory/raw-snapshot": str(current)},
    )
    return dg.SensorResult(run_requests=[request], cursor=str(current))
