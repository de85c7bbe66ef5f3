"""``factory decisions``: what the factory decided by itself (``factory.decisions``), oldest first."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pyiceberg.catalog import Catalog

from factory_cli.text import format_columns
from lakehouse.catalog import load_catalog
from lakehouse.decisions import VERDICTS, describe_change, read_decisions
from lakehouse.errors import InputError

REASON_CHARS = 100


def add_arguments(parser: argparse.ArgumentParser, _name: str = "decisions") -> None:
    parser.add_argument("--factory", metavar="NAME", help="only this factory definition's decisions")
    parser.add_argument("--kind", choices=list(VERDICTS), help="only decisions of this kind")
    parser.add_argument("--subject", metavar="NAME", help="only decisions about this source, mixture or ablation")
    parser.add_argument("-n", type=int, metavar="N", help="only the newest N")
    parser.add_argument("--json", action="store_true", help="print the whole rows as JSON, evidence included")


def run(args: argparse.Namespace) -> int:
    if args.n is not None and args.n < 0:
        raise InputError("-n must be zero or more")
    rows = select_decisions(load_catalog(args.catalog, read_only=True), args.factory, args.kind, args.subject, args.n)
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True, default=str))
    elif rows:
        print(format_decisions(rows))
    elif args.factory or args.kind or args.subject or args.n is not None:
        print("no recorded decision matches")
    else:
        print("no decisions recorded yet (the factory's gates, mixture searches and ablations record theirs)")
    return 0


def select_decisions(
    catalog: Catalog, factory: str | None, kind: str | None, subject: str | None, newest: int | None
) -> list[dict[str, Any]]:
    """The recorded decisions matching every filter given, oldest first; the newest ``newest`` if set."""
    rows = read_decisions(catalog, factory=factory, kind=kind, subject=subject)
    if newest is not None:
        rows = rows[-newest:] if newest else []
    return rows


def format_decisions(rows: list[dict[str, Any]]) -> str:
    """One line per decision under a header: when, kind, subject, verdict, what changed, why."""
    table = [("WHEN", "KIND", "SUBJECT", "VERDICT", "BEFORE → AFTER", "REASON")]
    for row in rows:
        table.append(
            (
                row["decided_at"],
                row["kind"],
                row["subject"],
                row["verdict"],
                describe_change(row),
                _shorten(row["reason"]),
            )
        )
    return format_columns(table)


def _shorten(text: str) -> str:
    # One line per decision: the whole reason is in --json, `factory ui` and the decision's own page.
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"
