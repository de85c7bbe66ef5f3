"""``factory lineage``: which data, exactly, made a checkpoint."""

from __future__ import annotations

import argparse
import json

from trainer.lineage import format_lineage, read_lineage


def add_arguments(parser: argparse.ArgumentParser, _name: str = "lineage") -> None:
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoints/step-N folder, or a run folder")
    parser.add_argument("--json", action="store_true", help="print the whole lineage as JSON")


def run(args: argparse.Namespace) -> int:
    lineage = read_lineage(args.checkpoint)
    print(json.dumps(lineage, indent=2, sort_keys=True) if args.json else format_lineage(lineage))
    return 0
