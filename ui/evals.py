"""Tables other parts of the factory may make: eval results and samples, sweep trials, shown where they exist.

Results and trials are read whole (or one sweep of them), and the samples' checkpoint column, each
kept per the table's metadata file (ui/cache.py): the first request after a commit reads them again."""

from __future__ import annotations

import json
from collections import Counter

from cachetools.keys import hashkey
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from ui.cache import memo
from ui.sources import EVALS_TABLE, TRIALS_TABLE, BadRequest, NotFound, Sources

# These tables hold one row per result or trial: small next to document tables, read whole.
MAX_ROWS = 20000
SAMPLES_TABLE = ("evals", "samples")


def eval_rows(sources: Sources) -> list[dict]:
    table = sources.optional_table(EVALS_TABLE)
    if table is None or table.current_snapshot() is None:
        return []
    return _all_rows(table)


@memo(4, key=lambda table: hashkey(table.metadata_location))
def _all_rows(table: Table) -> list[dict]:
    return table.scan(limit=MAX_ROWS).to_arrow().to_pylist()


def sample_counts(sources: Sources) -> Counter[str]:
    """Rows of ``evals.samples`` per checkpoint folder: only that column is read, the samples' texts never."""
    table = sources.optional_table(SAMPLES_TABLE)
    if table is None or table.current_snapshot() is None:
        return Counter()
    return _sample_counts(table)


@memo(4, key=lambda table: hashkey(table.metadata_location))
def _sample_counts(table: Table) -> Counter[str]:
    return Counter(table.scan(selected_fields=("checkpoint",)).to_arrow().column("checkpoint").to_pylist())


def run_evals(sources: Sources, run_key: str, run_name: str, run_path: str) -> list[dict]:
    ids = {run_key, run_name, run_path}
    return [
        r
        for r in eval_rows(sources)
        if r.get("run_id") in ids or str(r.get("checkpoint") or "").startswith(run_path + "/")
    ]


def trials(sources: Sources, sort: str = "", sweep: str = "") -> tuple[list[str], dict[str, list[dict]]] | None:
    """Columns and rows per sweep (ascending by ``sort``, missing values last; only sweep ``sweep``
    if given), or None when there is no trials table."""
    table = sources.optional_table(TRIALS_TABLE)
    if table is None:
        if sweep:
            raise NotFound(f"no trials of sweep {sweep!r}: there is no experiments.trials table in this catalog")
        return None
    return _trials(table, sort, sweep)


@memo(32, key=lambda table, sort, sweep: hashkey(table.metadata_location, sort, sweep))
def _trials(table: Table, sort: str, sweep: str) -> tuple[list[str], dict[str, list[dict]]]:
    columns = table.schema().as_arrow().names
    if sweep and "sweep_id" not in columns:
        raise BadRequest("experiments.trials has no sweep_id column to find a sweep by")
    if not table.current_snapshot():
        data = table.schema().as_arrow().empty_table()
    elif sweep:
        data = table.scan(row_filter=EqualTo("sweep_id", sweep), limit=MAX_ROWS).to_arrow()
    else:
        data = table.scan(limit=MAX_ROWS).to_arrow()
    if sweep and data.num_rows == 0:
        raise NotFound(f"no trials of sweep {sweep!r} in experiments.trials")
    if sort and sort not in data.column_names:
        raise BadRequest(f"experiments.trials has no column {sort!r} to sort by")
    rows = data.to_pylist()
    if sort:
        rows.sort(key=lambda r: (r[sort] is None, r[sort] if isinstance(r[sort], (int, float)) else str(r[sort])))
    by_sweep: dict[str, list[dict]] = {}
    for row in rows:
        by_sweep.setdefault(str(row.get("sweep_id")), []).append(row)
    return data.column_names, by_sweep


def ladders(by_sweep: dict[str, list[dict]]) -> dict[str, list | str]:
    """The verdicts of each sweep that is an ablation ladder (``factory ablate --ladder``: every row of
    kind ``ladder``), from its rows as ``experiments.ladder`` reads them; a sentence instead where
    its rows lack what a ladder's hold."""
    from experiments.ladder import KIND, analyse_ladder

    found: dict[str, list | str] = {}
    for sweep_id, rows in by_sweep.items():
        if not rows or any(r.get("kind") != KIND for r in rows):
            continue
        try:
            found[sweep_id] = analyse_ladder([{**r, "params": json.loads(r["params"] or "{}")} for r in rows])
        except (KeyError, TypeError, ValueError) as exc:
            found[sweep_id] = f"its rows are not a ladder's ({type(exc).__name__}: {exc})"
    return found
