"""``factory lineage``: which data, exactly, made a checkpoint, and how it scored (``evals.results``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainer.lineage import format_lineage, read_lineage


def add_arguments(parser: argparse.ArgumentParser, _name: str = "lineage") -> None:
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoints/step-N folder, or a run folder")
    parser.add_argument("--json", action="store_true", help="print the whole lineage as JSON")


def run(args: argparse.Namespace) -> int:
    lineage = read_lineage(args.checkpoint)
    evals = eval_results(args.catalog, args.checkpoint)
    if args.json:
        print(json.dumps({**lineage, "evals": evals}, indent=2, sort_keys=True))
    else:
        print(format_lineage(lineage))
        print(format_evals(evals))
    return 0


def eval_results(catalog_name: str | None, checkpoint: str) -> list[dict[str, Any]]:
    """The checkpoint's rows in ``evals.results`` of the catalog (empty before any eval)."""
    import os

    from evals.checkpoint_model import resolve_checkpoint
    from evals.results import checkpoint_results
    from lakehouse.catalog import factory_home, load_catalog

    if not (catalog_name or os.environ.get("FACTORY_CATALOG")) and not (factory_home() / "catalog.db").exists():
        return []  # no embedded lakehouse here: nothing evaluated, and none made just to look
    return checkpoint_results(load_catalog(catalog_name), str(resolve_checkpoint(Path(checkpoint))))


def format_evals(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "evals: none yet (factory eval CHECKPOINT)"
    lines = ["evals (evals.results):"]
    for row in rows:
        lines.append(
            f"  {row['suite']:<10} {row['metric']:<20} {row['value']:.6g}  samples {row['samples']}  "
            f"run {row['eval_run_id']}  code {row['code_version']}"
        )
    return "\n".join(lines)
