"""Arguments more than one command takes, defined once."""

from __future__ import annotations

import argparse


def add_run_id_argument(parser: argparse.ArgumentParser) -> None:
    """``--run-id`` of the jobs that commit (ingest, dedup, filter)."""
    parser.add_argument(
        "--run-id",
        type=_run_id,
        help="id of this logical run, bound to its inputs and parameters: the same command again finishes "
        "what an interrupted run left (or does nothing); other inputs or parameters are refused",
    )


def add_num_cpus_argument(parser: argparse.ArgumentParser) -> None:
    """``--num-cpus`` of the commands that start a local Ray (sweep, ablate, mix search)."""
    parser.add_argument("--num-cpus", type=positive_int, metavar="N", help="CPUs for a local Ray (default: all)")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse then refuses anything else, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def tag_name(text: str) -> str:
    """An argparse type: a name a tag may take (``lakehouse.refs.validate_tag_name``), refused with
    the usage (exit 2) before any work: not ``main``, not an ``audit-`` branch's name."""
    from lakehouse.errors import InvalidIdentifierError
    from lakehouse.refs import validate_tag_name

    try:
        return validate_tag_name(text)
    except InvalidIdentifierError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def table_identifier(text: str) -> tuple[str, ...]:
    """An argparse type: ``NS.TABLE`` as an identifier, for the commands that act on a table itself
    (its staging, its snapshots, its files): a pinned snapshot (``NS.TABLE@REF``) is refused with
    the usage (exit 2), as is a name that is not one."""
    from lakehouse.errors import InvalidIdentifierError
    from lakehouse.refs import parse_identifier

    if "@" in text:
        raise argparse.ArgumentTypeError(f"{text}: give a table, not a pinned snapshot")
    try:
        return parse_identifier(text)
    except InvalidIdentifierError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bounded_number(text: str, *, low: float, high: float, what: str) -> float:
    """``text`` as a finite number from ``low`` to ``high``, else ``ArgumentTypeError`` saying so
    (``float`` takes ``nan`` and ``inf``, which no count of hours or rows is)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of {what}, got {text!r}") from None
    if not low <= value <= high:  # also false for nan
        raise argparse.ArgumentTypeError(f"must be a number of {what} from {low:g} to {high:g}, got {text!r}")
    return value


def _run_id(text: str) -> str:
    """An argparse type: a valid run id, refused with the usage (exit 2) before any work starts."""
    from lakehouse.commit import check_run_id
    from lakehouse.errors import InvalidIdentifierError

    try:
        return check_run_id(text)
    except InvalidIdentifierError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
