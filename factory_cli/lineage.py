"""``factory lineage``: which data, exactly, made a checkpoint, the decisions that shaped that data
(``factory.decisions``), and how it scored (``evals.results``, with the samples behind each eval run
in ``evals.samples``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog

from factory_cli.text import printable
from lakehouse.redact import redact, redact_json
from rl.lineage import check_rl_lineage
from trainer.lineage import checkpoint_decisions, checkpoint_dir, format_lineage, read_lineage, resolve_checkpoint


def add_arguments(parser: argparse.ArgumentParser, _name: str = "lineage") -> None:
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoints/step-N folder, or a run folder")
    parser.add_argument("--json", action="store_true", help="print the whole lineage as JSON")


def run(args: argparse.Namespace) -> int:
    checkpoint = checkpoint_dir(args.checkpoint)
    lineage = read_lineage(checkpoint, to_print=True)
    check_rl_lineage(lineage, checkpoint / "lineage.json")  # an RL checkpoint's own part, printed first
    catalog = existing_catalog(args.catalog)
    decisions, not_found = checkpoint_decisions(catalog, lineage, checkpoint)
    evals = eval_results(catalog, args.checkpoint)
    runs = checkpoint_eval_runs(catalog, args.checkpoint) if evals else []
    if args.json:
        extra = {"decisions_not_found": not_found} if not_found else {}
        whole = {**lineage, "decisions": decisions, **extra, "evals": evals, "eval_runs": runs}
        print(json.dumps(redact_json(whole), indent=2, sort_keys=True))
    else:  # masked again and escaped: a lineage.json is a file anyone may have edited, or an older trainer wrote
        print(printable(redact(format_lineage(lineage))))
        print(printable(redact(format_decisions(decisions, not_found))))
        print(printable(redact(format_evals(evals))))
        if runs:
            print(printable(redact(format_eval_runs(runs))))
    return 0


def existing_catalog(catalog_name: str | None) -> Catalog | None:
    """The catalog ``--catalog`` names, else the embedded one if this machine has it; None if not."""
    import os

    from lakehouse.catalog import factory_home, load_catalog

    if not (catalog_name or os.environ.get("FACTORY_CATALOG")) and not (factory_home() / "catalog.db").exists():
        return None  # no embedded lakehouse here: nothing evaluated or decided, and none made just to look
    return load_catalog(catalog_name)


def eval_results(catalog: Catalog | None, checkpoint: str) -> list[dict[str, Any]]:
    """The checkpoint's rows in ``evals.results`` of the catalog (empty before any eval)."""
    if catalog is None:
        return []
    from evals.results import checkpoint_results

    return checkpoint_results(catalog, str(resolve_checkpoint(Path(checkpoint))))


def checkpoint_eval_runs(catalog: Catalog, checkpoint: str) -> list[dict[str, Any]]:
    """Each eval run of the checkpoint: its ``evals.results`` and ``evals.samples`` snapshots, what its samples say."""
    from evals.samples import eval_runs

    return eval_runs(catalog, str(resolve_checkpoint(Path(checkpoint))))


def format_eval_runs(runs: list[dict[str, Any]]) -> str:
    from evals.samples import format_tally

    lines = ["eval runs (evals.results, evals.samples):"]
    for run in runs:
        samples = "no samples"
        if run["samples_snapshot"] is not None:
            samples = f"evals.samples@{run['samples_snapshot']}: {format_tally(run)}"
        lines.append(f"  {run['suite']:<13} {run['eval_run_id']}  evals.results@{run['results_snapshot']}  {samples}")
    return "\n".join(lines)


def format_decisions(rows: list[dict[str, Any]], not_found: list[str]) -> str:
    if not rows and not not_found:
        return "decisions: none recorded for its snapshots, manifest or run (factory decisions lists them all)"
    lines = ["decisions that shaped it (factory.decisions):"]
    for row in rows:
        reason = " ".join(row["reason"].split())
        lines.append(f"  {row['kind']} {row['subject']}: {row['verdict']}, {reason}  [{row['decision_id']}]")
    for decision_id in not_found:
        lines.append(f"  [{decision_id}] named by the run's factory.json, not recorded in this catalog")
    return "\n".join(lines)


def format_evals(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "evals: none yet (factory eval CHECKPOINT)"
    lines = ["evals (evals.results):"]
    for row in rows:
        lines.append(
            f"  {row['suite']:<13} {row['metric']:<20} {row['value']:.6g}  samples {row['samples']}  "
            f"run {row['eval_run_id']}  code {row['code_version']}"
        )
    return "\n".join(lines)
