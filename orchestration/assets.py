"""The chain as software-defined assets, each materialised by `factory` commands:

    raw_code → dedup_code → filtered_code → decontaminated_code → tokenizer → manifest
             → training_run → checkpoints → eval_results

Each asset reads its upstream table pinned to the snapshot that is main's head when it starts,
records the snapshot it made (metadata ``snapshot_id``), and passes Dagster's run id on as the
command's ``--run-id`` (``commands.factory_run_id``).
"""

import json

import dagster as dg

from orchestration.commands import factory_run_id, pinned, recorded_inputs, run_factory, snapshot_id
from orchestration.settings import FactorySettings

# One group: the UI draws a group expanded only when it is the only one, and the chain reads best whole.
GROUP = "factory"


def _table_result(settings: FactorySettings, table: str, output: str) -> dg.MaterializeResult:
    metadata = {"table": table, "snapshot_id": snapshot_id(settings, table), "output": _printed(output)}
    return dg.MaterializeResult(metadata=metadata)


def _printed(output: str) -> dg.MetadataValue:
    """The command's last lines, as the run's page shows them."""
    return dg.MetadataValue.md(f"```\n{output[-3000:]}\n```")


@dg.asset(group_name=GROUP, kinds={"iceberg", "spark"})
def raw_code(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """``raw.code``: the source tree's files (`factory ingest --format files`)."""
    argv = ["ingest", "--source", "code", "--format", "files", factory.source_tree(), "--output", "raw.code"]
    argv += [a for pattern in factory.include for a in ("--include", pattern)]
    argv += [a for pattern in factory.exclude for a in ("--exclude", pattern)]
    output = run_factory(context, factory, [*argv, "--run-id", factory_run_id(context, "ingest")])
    return _table_result(factory, "raw.code", output)


class DedupConfig(dg.Config):
    raw_snapshot: int = 0  # raw.code's snapshot to deduplicate (0: main's head)


@dg.asset(deps=[raw_code], group_name=GROUP, kinds={"iceberg", "spark"})
def dedup_code(
    context: dg.AssetExecutionContext, config: DedupConfig, factory: FactorySettings
) -> dg.MaterializeResult:
    """``dedup.code``: exact and near duplicates removed (`factory dedup`).

    Always ``--against`` the published ``dedup.code`` (main's head) once it exists, as
    docs/jobs.md shows: only documents that are new and duplicate nothing already there are
    appended, so materialising again, or the raw-snapshot sensor's refinement, never puts a
    document in twice, and the filter after it sees the whole corpus."""
    run_id = factory_run_id(context, "dedup")
    earlier = recorded_inputs(factory, "dedup.code", run_id)
    if earlier is not None:  # a re-execution: the run's own commit is now main's head, not its reference
        source = next(f"{i['table']}@{i['snapshot_id']}" for i in earlier if i.get("role") != "against")
        against = next((f"{i['table']}@{i['snapshot_id']}" for i in earlier if i.get("role") == "against"), None)
    else:
        source = f"raw.code@{config.raw_snapshot}" if config.raw_snapshot else pinned(factory, "raw.code")
        published = snapshot_id(factory, "dedup.code")
        against = None if published is None else f"dedup.code@{published}"
    argv = ["dedup", "--input", source, "--output", "dedup.code", *(["--against", against] if against else [])]
    output = run_factory(context, factory, [*argv, "--run-id", run_id])
    return _table_result(factory, "dedup.code", output)


@dg.asset(deps=[dedup_code], group_name=GROUP, kinds={"iceberg", "spark"})
def filtered_code(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """``filtered.code``: quality-filtered, validated and published to main (`factory filter`)."""
    argv = ["filter", "--input", pinned(factory, "dedup.code"), "--output", "filtered.code", "--config", "code"]
    output = run_factory(context, factory, [*argv, "--run-id", factory_run_id(context, "filter")])
    return _table_result(factory, "filtered.code", output)


@dg.asset(deps=[filtered_code], group_name=GROUP, kinds={"iceberg", "spark"})
def decontaminated_code(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """``decontaminated.code``: no document sharing a 13-gram with HumanEval (`factory decontaminate`)."""
    argv = ["decontaminate", "--input", pinned(factory, "filtered.code"), "--against", "humaneval"]
    argv += ["--output", "decontaminated.code", "--run-id", factory_run_id(context, "decontaminate")]
    output = run_factory(context, factory, argv)
    return _table_result(factory, "decontaminated.code", output)


@dg.asset(deps=[decontaminated_code], group_name=GROUP, kinds={"json"})
def tokenizer(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """A byte-level BPE tokenizer trained on the pinned clean code (`factory tokenizer train`)."""
    path = factory.folder() / "tokenizer.json"
    source = pinned(factory, "decontaminated.code")
    argv = ["tokenizer", "train", "--input", source, "--vocab-size", str(factory.vocab_size), "--output", str(path)]
    run_factory(context, factory, [*argv, "--max-bytes", str(8 << 20)])
    return dg.MaterializeResult(metadata={"path": str(path), "trained_on": source})


@dg.asset(deps=[decontaminated_code], group_name=GROUP, kinds={"json"})
def manifest(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """The mixture pinned to snapshot ids and data files (`factory mix pin`)."""
    folder = factory.folder()
    spec = folder / "mixture.yaml"
    component = {"name": "code", "table": "decontaminated.code", "weight": 1.0, "heldout_fraction": 0.1}
    spec.write_text(json.dumps({"name": "dagster", "seed": 0, "components": [component]}))  # JSON is YAML
    path = folder / "manifest.json"
    run_factory(context, factory, ["mix", "pin", str(spec), "--output", str(path)])
    fingerprint = json.loads(path.read_text())["fingerprint"]
    return dg.MaterializeResult(metadata={"path": str(path), "fingerprint": fingerprint})


@dg.asset(deps=[manifest, tokenizer], group_name=GROUP, kinds={"torch"})
def training_run(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """A training run on the manifest under torchrun (`factory train --resume`: a retried
    Dagster run continues from the newest complete checkpoint)."""
    folder, run_dir = factory.folder(), factory.training_dir()
    argv = ["train", "--config", factory.train_config, "--nproc", str(factory.nproc), "--resume"]
    overrides = [f"data.manifest='{folder / 'manifest.json'}'", f"data.tokenizer='{folder / 'tokenizer.json'}'",
                 f"run.dir='{run_dir}'", *factory.train_overrides]  # fmt: skip
    argv += [a for override in overrides for a in ("--set", override)]
    run_factory(context, factory, argv)
    return dg.MaterializeResult(metadata={"run_dir": str(run_dir)})


@dg.asset(deps=[training_run], group_name=GROUP, kinds={"torch"})
def checkpoints(context: dg.AssetExecutionContext, factory: FactorySettings) -> dg.MaterializeResult:
    """The run's complete checkpoints (a folder counts once its ``COMPLETE`` marker is written)."""
    from trainer.checkpoint import complete_checkpoints

    steps = [step for step, _ in complete_checkpoints(factory.training_dir())]
    context.log.info("complete checkpoints at steps %s", steps)
    return dg.MaterializeResult(metadata={"run_dir": str(factory.training_dir()), "steps": steps})


class EvalConfig(dg.Config):
    checkpoint: str = ""  # a checkpoint folder ("" = the run's newest complete one)


@dg.asset(deps=[checkpoints], group_name=GROUP, kinds={"iceberg"})
def eval_results(
    context: dg.AssetExecutionContext, config: EvalConfig, factory: FactorySettings
) -> dg.MaterializeResult:
    """Rows of ``evals.results`` for one checkpoint (`factory eval`).

    The one command given no ``--run-id``: `factory eval` derives its run id from the checkpoint's
    identity, the suite and the options, so any Dagster run of the same checkpoint (the sensor's,
    a retry, a manual one) commits its rows once."""
    from trainer.checkpoint import latest_checkpoint

    path = config.checkpoint
    if not path:
        latest = latest_checkpoint(factory.training_dir())
        if latest is None:
            raise dg.Failure(f"{factory.training_dir()} has no complete checkpoint to evaluate")
        path = str(latest[1])
    output = run_factory(context, factory, ["eval", path, "--suite", *factory.eval_suites])
    return dg.MaterializeResult(metadata={"checkpoint": path, "output": _printed(output)})


CHAIN = [raw_code, dedup_code, filtered_code, decontaminated_code, tokenizer, manifest, training_run, checkpoints,
         eval_results]  # fmt: skip
