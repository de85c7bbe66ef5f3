"""A namespace's quarantine table: what was refused, by stage, filter and reason."""

from __future__ import annotations

import json

import pyarrow as pa
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

SAMPLES_PER_REASON = 3


def counts(table: Table, snapshot_id: int) -> list[dict]:
    """Rows per (stage, filter, reason), most first; only those three columns are read."""
    names = {f.name for f in table.schema().fields}
    fields = tuple(c for c in ("stage", "filter", "reason") if c in names)
    data = table.scan(snapshot_id=snapshot_id, selected_fields=fields).to_arrow()
    if "filter" not in data.column_names:
        data = data.append_column("filter", pa.nulls(data.num_rows, pa.string()))
    grouped = data.group_by(["stage", "filter", "reason"], use_threads=False).aggregate([([], "count_all")])
    rows = grouped.rename_columns(["stage", "filter", "reason", "count"]).to_pylist()
    return sorted(rows, key=lambda r: (-r["count"], r["stage"] or "", r["filter"] or "", r["reason"] or ""))


def samples(table: Table, snapshot_id: int, reason: str) -> list[dict]:
    scan = table.scan(snapshot_id=snapshot_id, row_filter=EqualTo("reason", reason), limit=SAMPLES_PER_REASON)
    return [_readable(r) for r in scan.to_arrow().to_pylist()[:SAMPLES_PER_REASON]]


def document(table: Table, snapshot_id: int, doc_id: str) -> list[dict]:
    """Every quarantine row of one document (a document can be refused at several stages)."""
    return [
        _readable(r)
        for r in table.scan(snapshot_id=snapshot_id, row_filter=EqualTo("doc_id", doc_id)).to_arrow().to_pylist()
    ]


def _readable(row: dict) -> dict:
    out = dict(row)
    if isinstance(out.get("record"), bytes):
        out["record"] = out["record"].decode("utf-8", errors="replace")
    metrics = out.get("metrics")
    try:
        parsed = json.loads(metrics) if metrics else None
    except ValueError:
        parsed = None
    out["metrics"] = parsed if isinstance(parsed, dict) else ({"value": metrics} if metrics else {})
    return out
