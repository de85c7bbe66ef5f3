"""Arguments more than one command takes, defined once."""

from __future__ import annotations

import argparse


def add_run_id_argument(parser: argparse.ArgumentParser) -> None:
    """``--run-id`` of the jobs that commit (ingest, dedup, filter)."""
    parser.add_argument(
        "--run-id",
        help="id of this logical run, bound to its inputs and parameters: the same command again finishes "
        "what an interrupted run left (or does nothing); other inputs or parameters are refused",
    )
