"""``evals.ratings``: people's blind preferences between two checkpoints' completions of one task.

Each rating is committed as its own snapshot through the commit protocol, as run ``<rating id>``
of job ``rate`` (``lakehouse/rows.py``): a vote sent twice (a reload, a retried request) finds its
snapshot and commits nothing. The rater's name is kept as typed and nothing else about them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo

from lakehouse.commit import CommitResult, Run
from lakehouse.rows import commit_rows
from lakehouse.schemas import EVAL_RATINGS_SCHEMA
from lakehouse.version import code_version

RATINGS_TABLE = ("evals", "ratings")
JOB = "rate"
WINNERS = ("a", "b", "tie")


def rating_row(
    rating_id: str,
    rater: str,
    suite: str,
    task_id: str,
    a: tuple[str, str],
    b: tuple[str, str],
    winner: str,
) -> dict[str, Any]:
    """A row of ``evals.ratings``: ``a`` and ``b`` are (checkpoint, sample_id) as shown."""
    if winner not in WINNERS:
        raise ValueError(f"winner must be one of {WINNERS}, got {winner!r}")
    return {
        "rating_id": rating_id,
        "rated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rater": rater,
        "suite": suite,
        "task_id": task_id,
        "checkpoint_a": a[0],
        "sample_a": a[1],
        "checkpoint_b": b[0],
        "sample_b": b[1],
        "winner": winner,
        "code_version": code_version(),
    }


def record_rating(catalog: Catalog, row: dict[str, Any]) -> CommitResult | None:
    """Commit ``row`` as its own snapshot of ``evals.ratings``; None if it was recorded before."""
    # The run's params land in the snapshot summary: the suite only, never the rater.
    run = Run(job=JOB, run_id=row["rating_id"], params={"suite": row["suite"]}, inputs=[])
    return commit_rows(catalog, RATINGS_TABLE, EVAL_RATINGS_SCHEMA, run, [row])


def read_ratings(catalog: Catalog, suite: str = "") -> list[dict[str, Any]]:
    """Every rating (of one suite, if named), oldest first: one row per vote a person gave, few
    enough to read whole."""
    if not catalog.table_exists(RATINGS_TABLE):
        return []
    table = catalog.load_table(RATINGS_TABLE)
    if table.current_snapshot() is None:
        return []
    scan = table.scan(row_filter=EqualTo("suite", suite)) if suite else table.scan()
    return sorted(scan.to_arrow().to_pylist(), key=lambda r: (r["rated_at"], r["rating_id"]))


def games(ratings: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(checkpoint A, checkpoint B, A's score: 1 won, 0.5 tie, 0 lost) of each rating."""
    score = {"a": 1.0, "tie": 0.5, "b": 0.0}
    return [(r["checkpoint_a"], r["checkpoint_b"], score[r["winner"]]) for r in ratings]
