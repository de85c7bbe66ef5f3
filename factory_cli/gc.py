"""``factory gc``: remove staged files of runs that never committed (docs/architecture.md, "The commit protocol").

Files any table of the catalog references, and files of runs still alive (their lease renewed
within ``lakehouse.lease.TIMEOUT``), stay whatever ``--grace-hours`` says.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from factory_cli.arguments import bounded_number, table_identifier
from lakehouse.catalog import list_tables, load_catalog
from lakehouse.staging_gc import collect_garbage

MAX_GRACE_HOURS = 1_000_000


def add_arguments(parser: argparse.ArgumentParser, _name: str = "gc") -> None:
    parser.add_argument(
        "tables", nargs="*", type=table_identifier, metavar="NS.TABLE", help="tables to clean (default: all)"
    )
    parser.add_argument(
        "--grace-hours",
        type=_grace_hours,
        default=24.0,
        help="leave unreferenced files younger than this (default: 24); files of a run whose lease is "
        "live stay regardless",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")


def _grace_hours(text: str) -> float:
    # A century and more keeps every file; past some 2.4e10 hours a timedelta overflows.
    return bounded_number(text, low=0, high=MAX_GRACE_HOURS, what="hours")


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    identifiers = args.tables or list_tables(catalog)
    reports = collect_garbage(catalog, identifiers, grace=timedelta(hours=args.grace_hours), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for report in reports:
        for path in report.removed:
            print(f"{verb} {path}")
        kept = [f"{report.kept_recent} unreferenced file(s) inside the grace period"] if report.kept_recent else []
        if report.kept_live:
            kept.append(f"{report.kept_live} file(s) of runs still alive")
        print(f"{report.table}: {verb} {len(report.removed)} file(s)" + "".join(f", {k} kept" for k in kept))
    return 0
