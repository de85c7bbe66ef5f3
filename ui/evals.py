"""Tables other parts of the factory may make: eval results and sweep trials, shown where they exist."""

from __future__ import annotations

from ui.sources import EVALS_TABLE, TRIALS_TABLE, BadRequest, Sources

# These tables hold one row per result or trial: small next to document tables, read whole.
MAX_ROWS = 20000


def eval_rows(sources: Sources) -> list[dict]:
    table = sources.optional_table(EVALS_TABLE)
    if table is None or table.current_snapshot() is None:
        return []
    return table.scan(limit=MAX_ROWS).to_arrow().to_pylist()


def run_evals(sources: Sources, run_key: str, run_name: str, run_path: str) -> list[dict]:
    ids = {run_key, run_name, run_path}
    return [
        r
        for r in eval_rows(sources)
        if r.get("run_id") in ids or str(r.get("checkpoint") or "").startswith(run_path + "/")
    ]


def trials(sources: Sources, sort: str = "") -> tuple[list[str], dict[str, list[dict]]] | None:
    """Columns and rows per sweep (ascending by ``sort``, missing values last), or None when there
    is no trials table."""
    table = sources.optional_table(TRIALS_TABLE)
    if table is None:
        return None
    data = (
        table.scan(limit=MAX_ROWS).to_arrow() if table.current_snapshot() else table.schema().as_arrow().empty_table()
    )
    if sort and sort not in data.column_names:
        raise BadRequest(f"experiments.trials has no column {sort!r} to sort by")
    rows = data.to_pylist()
    if sort:
        rows.sort(key=lambda r: (r[sort] is None, r[sort] if isinstance(r[sort], (int, float)) else str(r[sort])))
    by_sweep: dict[str, list[dict]] = {}
    for row in rows:
        by_sweep.setdefault(str(row.get("sweep_id")), []).append(row)
    return data.column_names, by_sweep
