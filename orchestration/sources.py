"""One source's assets, made from its declaration: raw → dedup → filtered → decontaminated →
production (docs/factory.md, "Sources").

Each step reads its upstream table pinned to main's head when it starts and runs one `factory`
command whose run id is derived from that snapshot and the step's options, so a step whose input
has not moved since it last ran is a no-op (checked in the catalog before any command starts).
The last step, ``production``, is the refinement gate (``orchestration.gate``): it decides whether
the chain's newest snapshot becomes the one training reads.
"""

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from lakehouse.errors import ConfigError, InputError
from orchestration.commands import printed, run_factory, run_id
from orchestration.definition import FactoryDefinition, Source, SourceInput
from orchestration.keys import step_key
from orchestration.locks import exclusive, source_lock
from orchestration.state import catalog, committed, head, refined_inputs


def source_assets(definition: FactoryDefinition, source: Source) -> list[dg.AssetsDefinition]:
    """The chain's assets for ``source``, each depending on the step before it."""
    from orchestration.gate import production_asset

    steps = source.tables()
    made = [_raw_asset(definition, source)]
    for (step, table), (previous, upstream) in zip(steps[1:], steps[:-1], strict=True):
        build = {"dedup": _dedup_argv, "filtered": _filter_argv, "decontaminated": _decontaminate_argv}[step]
        made.append(_refine_asset(definition, source, (previous, upstream), (step, table), build))
    made.append(production_asset(definition, source, step_key(source.name, steps[-1][0])))
    return made


def _raw_asset(definition: FactoryDefinition, source: Source) -> dg.AssetsDefinition:
    table = f"raw.{source.name}"

    @dg.asset(
        key=step_key(source.name, "raw"),
        group_name=source.name,
        kinds={"iceberg", "spark"},
        required_resource_keys={"commands"},
        description=f"`{table}`: the source's files, ingested (`factory ingest --format {source.format}`)",
    )
    def raw(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        output = ""
        with exclusive(definition.folder(), source_lock(source.name), context.log.info):
            for n, given in enumerate(source.inputs):
                ingest_id = ingest_run_id(definition, source, n)
                if committed(catalog(), table, ingest_id):
                    context.log.info("%s: input %d ingested before (run %s)", table, n, ingest_id)
                    continue
                output += run_factory(context, [*ingest_argv(source, given), "--run-id", ingest_id])
        return _result(table, output)

    return raw


def ingest_run_id(definition: FactoryDefinition, source: Source, n: int) -> str:
    """A run id that changes only when the input's files (names and sizes) or the options do."""
    from pipelines.ingest_inputs import discover

    given = source.inputs[n]
    files = discover(list(given.paths), source.format, given.include, given.exclude)
    listing = [(f.relpath, f.size) for f in files]
    return run_id(f"{definition.name}-{source.name}-ingest{n}", listing, source.format, source.record_options)


def check_local_inputs(definition: FactoryDefinition, names: Iterable[str]) -> None:
    """Refuse (``ConfigError`` naming the file and the key) a named source's local input path that
    does not exist, or a local input whose patterns match no file.

    For `factory run`, before any step: found at the source's ingest instead, it would come after
    other sources' chains had run. URIs are not listed here (that is the ingest's work, with its
    credentials). Under Dagster's daemon nothing is refused: a source's files may arrive later, and
    its sensor looks again at each tick."""
    from pipelines.ingest_inputs import discover

    for name in names:
        for given in definition.sources[name].inputs:
            local = [path for path in given.paths if "://" not in path]
            for path in local:
                if not Path(path).exists():
                    raise ConfigError(f"{definition.path}: {given.key}.paths: {path} does not exist")
            if len(local) == len(given.paths):
                try:
                    discover(list(given.paths), definition.sources[name].format, given.include, given.exclude)
                except InputError as exc:
                    field = "include" if given.include else "paths"
                    raise ConfigError(f"{definition.path}: {given.key}.{field}: {exc}") from None


def ingest_argv(source: Source, given: SourceInput) -> list[str]:
    argv = [
        "ingest",
        "--source",
        source.name,
        "--format",
        source.format,
        *given.paths,
        "--output",
        f"raw.{source.name}",
        # The listing changed, so the run id did: read only the files not ingested before, or
        # every old record would be read again, into quarantine as `duplicate-id`.
        "--only-new-files",
    ]
    argv += [a for pattern in given.include for a in ("--include", pattern)]
    argv += [a for pattern in given.exclude for a in ("--exclude", pattern)]
    return argv + _flags(source.record_options)


def _refine_asset(
    definition: FactoryDefinition, source: Source, before: tuple[str, str], this: tuple[str, str], build
) -> dg.AssetsDefinition:
    (previous, upstream), (step, table) = before, this

    @dg.asset(
        key=step_key(source.name, step),
        deps=[step_key(source.name, previous)],
        group_name=source.name,
        kinds={"iceberg", "spark"},
        required_resource_keys={"commands"},
        description=f"`{table}` from `{upstream}` (`factory {build.__doc__}`)",
    )
    def refine(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        with exclusive(definition.folder(), source_lock(source.name), context.log.info):
            cat = catalog()
            snapshot = head(cat, upstream)
            if snapshot is None:
                raise dg.Failure(f"{upstream} has no snapshot yet: nothing to refine into {table}")
            # Dedup appends, against its own output: an input it has taken in is done, whatever its
            # options. Filter and decontaminate replace the table's content: an input refined before
            # is refined again when their options changed (a filter config, the eval sets).
            taken_in = (upstream, snapshot) in refined_inputs(cat, table)
            if taken_in and step == "dedup":
                context.log.info("%s@%s is already refined into %s", upstream, snapshot, table)
                return _result(table, "")
            argv, options = build(source, f"{upstream}@{snapshot}", table, head(cat, table))
            step_id = run_id(f"{definition.name}-{source.name}-{step}", f"{upstream}@{snapshot}", options)
            if committed(cat, table, step_id):
                return _result(table, "")
            if taken_in:
                context.log.warning("%s: %s's options changed; refining %s@%s again", table, step, upstream, snapshot)
            return _result(table, run_factory(context, [*argv, "--run-id", step_id]))

    return refine


def _dedup_argv(source: Source, given: str, table: str, published: int | None) -> tuple[list[str], Any]:
    """dedup"""
    # Against the published table once it exists: only new documents that duplicate nothing
    # already there are appended, so the table never holds a document twice.
    against = [] if published is None else ["--against", f"{table}@{published}"]
    argv = ["dedup", "--input", given, "--output", table, *against, *_flags(source.dedup or {})]
    return argv, {"against": published, "options": source.dedup}


def _filter_argv(source: Source, given: str, table: str, _published: int | None) -> tuple[list[str], Any]:
    """filter"""
    from quality.config import load_config

    argv = ["filter", "--input", given, "--output", table, "--config", source.filter]
    return argv, {"config": load_config(source.filter).sha256}


def _decontaminate_argv(source: Source, given: str, table: str, _published: int | None) -> tuple[list[str], Any]:
    """decontaminate"""
    from quality.contamination import eval_set_digests

    argv = ["decontaminate", "--input", given, "--against", *source.decontaminate, "--output", table]
    argv += [] if source.ngram is None else ["--ngram", str(source.ngram)]
    return argv, {"ngram": source.ngram, "sets": eval_set_digests(list(source.decontaminate))}


def _flags(options: Mapping[str, Any]) -> list[str]:
    """``{num_perm: 64, verify: false}`` → ``--num-perm 64 --no-verify``, as the commands take them."""
    argv = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else flag.replace("--", "--no-", 1))
        else:
            argv += [flag, str(value)]
    return argv


def _result(table: str, output: str) -> dg.MaterializeResult:
    metadata = {"table": table, "snapshot_id": head(catalog(), table)}
    if output:
        metadata["output"] = printed(output)
    return dg.MaterializeResult(metadata=metadata)
