"""Running suites on a checkpoint and committing their metrics and samples: what ``factory eval`` does.

Each suite is one eval run: one commit to ``evals.samples`` (if it has samples), then one to
``evals.results`` (``evals/results.py: commit_eval``). Its run id is derived from the
checkpoint's identity (its DCP index and lineage), the suite and the suite's options, so
evaluating the same checkpoint and suite again finds the run committed and does nothing; a
caller's own ``--run-id`` (an orchestrator's) names it ``<run-id>-<suite>`` and is bound to those
same things, so a retry with other options is refused. A suite's metrics also go to the MLflow run
that trained the checkpoint, if it was tracked, at the checkpoint's step (``evals/<suite>/<metric>``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path, PurePath

import torch
from pyiceberg.catalog import Catalog

from evals.checkpoint_model import LoadedCheckpoint, checkpoint_identity, load_checkpoint, resolve_checkpoint
from evals.registry import Metric, SuiteOptions, load_suite
from evals.results import RESULTS_TABLE, commit_eval, result_rows
from evals.samples import sample_rows
from lakehouse.commit import Run, existing_commits
from lakehouse.run_binding import find_run_commits
from trainer.lineage import read_lineage
from trainer.tracking import log_checkpoint_metrics

log = logging.getLogger("factory.evals")

JOB = "eval"


@dataclass(frozen=True)
class SuiteOutcome:
    suite: str
    eval_run_id: str
    snapshot_id: int
    metrics: list[Metric]  # empty when the run was already committed (read them with checkpoint_results)
    already_committed: bool
    samples_snapshot_id: int | None = None  # its evals.samples snapshot, when this call committed samples


def eval_run(checkpoint: Path, suite: str, options: SuiteOptions, run_id: str | None = None) -> Run:
    """The eval run of ``suite`` on ``checkpoint``: its id and what it is bound to."""
    lineage = read_lineage(checkpoint)
    identity = checkpoint_identity(checkpoint)
    params = {"suite": suite, **load_suite(suite).params(options)}
    inputs = [{"checkpoint": str(checkpoint), "sha256": identity, "step": int(lineage["step"])}]
    inputs += [
        {"table": c["table"], "snapshot_id": int(c["snapshot_id"]), "ref": c.get("ref")}
        for c in lineage.get("components", [])
    ]
    if run_id is None:
        where = {"path": str(checkpoint)} if _moved(checkpoint, lineage) else {}
        key = json.dumps({"checkpoint": identity, "params": params, **where}, sort_keys=True)
        run_id = f"eval-{suite}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    else:
        run_id = f"{run_id}-{suite}"
    return Run(job=JOB, run_id=run_id, params=params, inputs=inputs)


def _moved(checkpoint: Path, lineage: dict) -> bool:
    """Whether ``checkpoint`` is read elsewhere than where its run saved it (a copied or moved run).

    Its run id then names the path too: a copy holds the same bytes, so the same identity, and its
    evaluation, recorded with the original's path, was refused as bound to other inputs; the path
    joins the key only then, so the run ids of checkpoints where they were saved stay as they were."""
    saved = PurePath(str(lineage.get("checkpoint", "")))
    if saved.is_absolute():
        return Path(saved).resolve() != checkpoint
    return checkpoint.parts[-len(saved.parts) :] != saved.parts  # a relative run.dir, from where it ran


def evaluate_checkpoint(
    catalog: Catalog,
    checkpoint: str | Path,
    suites: list[str],
    options: SuiteOptions,
    run_id: str | None = None,
    device: torch.device | None = None,
) -> list[SuiteOutcome]:
    """Run each suite not yet committed for this checkpoint and commit its metrics and samples."""
    path = resolve_checkpoint(checkpoint)
    outcomes = []
    loaded: LoadedCheckpoint | None = None
    for suite in dict.fromkeys(suites):  # each once, in the order given
        run = eval_run(path, suite, options, run_id)
        done = find_run_commits(catalog, run, [RESULTS_TABLE])[RESULTS_TABLE]  # RunConflictError if bound otherwise
        if done is not None:
            (result,), _ = existing_commits({RESULTS_TABLE: done})
            log.info("%s: %s already evaluated by run %s (snapshot %s)", path, suite, run.run_id, result.snapshot_id)
            outcomes.append(SuiteOutcome(suite, run.run_id, result.snapshot_id, [], True))
            continue
        if loaded is None:
            loaded = load_checkpoint(path, device)
        log.info("%s: running %s as eval run %s", path, suite, run.run_id)
        result = load_suite(suite).run(loaded, options)
        common = {"run_dir": str(loaded.run_dir), "checkpoint": str(path), "step": loaded.step, "suite": suite}
        results = result_rows(
            **common,
            manifest_fingerprint=loaded.manifest_fingerprint,
            snapshot_ids=loaded.snapshot_ids,
            metrics=result.metrics,
            eval_run_id=run.run_id,
        )
        samples = sample_rows(**common, eval_run_id=run.run_id, samples=result.samples)
        committed, samples_committed = commit_eval(catalog, run, results, samples)
        if not committed.already_committed:
            tracked = {f"evals/{suite}/{m.name}": m.value for m in result.metrics}
            log_checkpoint_metrics(path, loaded.lineage, loaded.step, tracked)
        outcomes.append(
            SuiteOutcome(
                suite,
                run.run_id,
                committed.snapshot_id,
                result.metrics,
                committed.already_committed,
                samples_committed.snapshot_id if samples_committed else None,
            )
        )
    return outcomes
