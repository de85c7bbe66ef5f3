"""``factory filter``: its arguments, and the result printed."""

from __future__ import annotations

import argparse

from factory_cli.arguments import add_run_id_argument, tag_name
from lakehouse.catalog import load_catalog
from pipelines.filter import FilterOptions, FilterRunResult, filter_documents
from pipelines.spark_session import get_spark
from quality.config import load_config


def add_arguments(parser: argparse.ArgumentParser, _name: str = "filter") -> None:
    parser.epilog = "The config's keys: docs/jobs.md#the-filter-config-key-by-key"
    parser.add_argument("--input", required=True, metavar="NS.TABLE[@REF]", help="the documents to filter")
    parser.add_argument("--output", required=True, metavar="NS.TABLE", help="table whose main becomes the result")
    parser.add_argument(
        "--config", required=True, metavar="FILE", help="filter config (TOML); `code`, `text`, `docs`: the shipped ones"
    )
    parser.add_argument(
        "--quarantine", metavar="NS.TABLE", help="where dropped documents go (default: <namespace>.quarantine)"
    )
    parser.add_argument(
        "--tag", metavar="NAME", type=tag_name, help="tag the published snapshot (not 'main' nor audit-*)"
    )
    add_run_id_argument(parser)


def run(args: argparse.Namespace) -> int:
    opts = FilterOptions(args.input, args.output, args.config, args.quarantine, args.run_id, args.tag)
    load_config(opts.config)  # a bad config fails here, before Spark starts
    catalog = load_catalog(args.catalog)
    result = filter_documents(get_spark("factory-filter"), catalog, opts)
    print(format_result(result))
    return 0


def format_result(result: FilterRunResult) -> str:
    s = result.stats
    state = "already published: nothing done" if result.already_committed else "published to main"
    lines = [
        f"run {result.run_id} ({state})",
        f"  {result.output}@{result.audited_snapshot_id}: {s.get('kept', 0)} documents kept",
        f"  quarantined: {s.get('quarantined', 0)} of {s.get('documents-in', 0)}",
        f"  validation: {result.report}",
    ]
    if result.seconds:
        lines.append("  seconds: " + ", ".join(f"{step} {secs:.1f}" for step, secs in result.seconds.items()))
    per_filter = {k.removeprefix("dropped."): v for k, v in s.items() if k.startswith("dropped.")}
    for name, n in per_filter.items():
        if "." not in name:
            reasons = {k.split(".", 1)[1]: v for k, v in per_filter.items() if k.startswith(f"{name}.")}
            lines.append(f"  dropped by {name}: {n} (" + ", ".join(f"{r}={v}" for r, v in reasons.items()) + ")")
    return "\n".join(lines)
