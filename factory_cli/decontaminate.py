"""``factory decontaminate``: its arguments, and the result printed."""

from __future__ import annotations

import argparse
import sys

from factory_cli.arguments import add_run_id_argument, positive_int
from lakehouse.catalog import load_catalog
from pipelines.decontaminate import DecontaminateOptions, DecontaminateResult, decontaminate
from pipelines.spark_session import get_spark
from quality.contamination import EVAL_SETS, NGRAM, check_suites


def add_arguments(parser: argparse.ArgumentParser, _name: str = "decontaminate") -> None:
    parser.add_argument("--input", required=True, metavar="NS.TABLE[@REF]", help="the documents to check")
    parser.add_argument(
        "--against", required=True, nargs="+", action="extend", metavar="SUITE",
        help=f"eval set(s) whose prompts and solutions must not leak into training: {', '.join(sorted(EVAL_SETS))}",
    )  # fmt: skip
    parser.add_argument("--output", required=True, metavar="NS.TABLE", help="table the clean documents are added to")
    parser.add_argument(
        "--quarantine", metavar="NS.TABLE", help="where contaminated documents go (default: <namespace>.quarantine)"
    )
    parser.add_argument(
        "--ngram", type=positive_int, default=NGRAM, help=f"words per n-gram of normalised text (default {NGRAM})"
    )
    add_run_id_argument(parser)


def run(args: argparse.Namespace) -> int:
    check_suites(args.against)  # an unknown suite fails here, before Spark starts
    opts = DecontaminateOptions(args.input, tuple(args.against), args.output, args.ngram, args.quarantine, args.run_id)
    result = decontaminate(get_spark("factory-decontaminate"), load_catalog(args.catalog), opts)
    print(format_result(result))
    warning = short_ngram_warning(result.stats, args.ngram)
    if warning:
        print(warning, file=sys.stderr)
    return 0


def short_ngram_warning(stats: dict[str, int], ngram: int) -> str | None:
    """A warning when most documents matched: what a leak of a few eval problems never does, and
    what an n-gram too short to tell a leak from common text (``for i in range``) does."""
    seen, quarantined = stats.get("documents-in", 0), stats.get("quarantined", 0)
    if not seen or quarantined * 2 <= seen:
        return None
    return (
        f"warning: {quarantined} of {seen} documents matched an eval set; an n-gram of {ngram} word(s) may be "
        f"too short to tell a leak from common text (default {NGRAM}). Check the quarantine's detail column"
    )


def format_result(result: DecontaminateResult) -> str:
    s = result.stats
    state = "already committed: nothing done" if result.already_committed else "committed"
    lines = [
        f"run {result.run_id} ({state})",
        f"  {result.documents.table}@{result.documents.snapshot_id}: {s.get('kept', 0)} documents kept "
        f"of {s.get('documents-in', 0)}",
        f"  {result.quarantine.table}@{result.quarantine.snapshot_id}: {s.get('quarantined', 0)} contaminated",
    ]
    lines += [
        f"    {k.removeprefix('contaminated.')}: {v}" for k, v in sorted(s.items()) if k.startswith("contaminated.")
    ]
    return "\n".join(lines)
