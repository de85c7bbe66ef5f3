"""A namespace's quarantine table: what was refused, by stage, filter and reason; kept per pinned
snapshot (ui/cache.py)."""

from __future__ import annotations

import json

import pyarrow as pa
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from lakehouse.catalog import snapshot_schema
from lakehouse.parquet import open_parquet
from ui.cache import memo, pinned
from ui.documents import data_files

SAMPLES_PER_REASON = 3
_COUNTED = pa.schema([("stage", pa.string()), ("filter", pa.string()), ("reason", pa.string())])


@memo(64, key=pinned)
def counts(table: Table, snapshot_id: int) -> list[dict]:
    """Rows per (stage, filter, reason), most first; only those three columns are read, straight
    from the snapshot's data files (the plan is ui/documents.py's, kept per snapshot)."""
    label = ".".join(table.name())
    names = {f.name for f in snapshot_schema(table, snapshot_id).fields}
    pieces = []
    for data_file in data_files(table, snapshot_id, label):
        parquet = open_parquet(data_file.uri, label)
        piece = parquet.read(columns=[c for c in ("stage", "filter", "reason") if c in parquet.schema_arrow.names])
        for column in ("stage", "filter", "reason"):  # a file written before the column was added
            if column not in piece.column_names:
                piece = piece.append_column(column, pa.nulls(piece.num_rows, pa.string()))
        pieces.append(piece.select(["stage", "filter", "reason"]).cast(_COUNTED))
    data = pa.concat_tables(pieces) if pieces else _COUNTED.empty_table()
    if "filter" not in names:
        data = data.set_column(1, "filter", pa.nulls(data.num_rows, pa.string()))
    grouped = data.group_by(["stage", "filter", "reason"], use_threads=False).aggregate([([], "count_all")])
    rows = grouped.rename_columns(["stage", "filter", "reason", "count"]).to_pylist()
    return sorted(rows, key=lambda r: (-r["count"], r["stage"] or "", r["filter"] or "", r["reason"] or ""))


@memo(64, key=pinned)
def samples(table: Table, snapshot_id: int) -> dict[str, list[dict]]:
    """The first few rows of each reason, by reason. The snapshot's files are read a row group at a
    time, the ``reason`` column first, and whole rows only of the row groups that hold a sample;
    reading stops once every reason has its samples."""
    label = ".".join(table.name())
    reasons = {c["reason"] for c in counts(table, snapshot_id)}
    found: dict[str, list[dict]] = {reason: [] for reason in sorted(reasons, key=str)}
    taken = dict.fromkeys(reasons, 0)
    for data_file in data_files(table, snapshot_id, label):
        parquet = open_parquet(data_file.uri, label)
        for group in range(parquet.metadata.num_row_groups):
            wanted = []
            for i, reason in enumerate(parquet.read_row_group(group, columns=["reason"])["reason"].to_pylist()):
                if taken.get(reason, SAMPLES_PER_REASON) < SAMPLES_PER_REASON:
                    taken[reason] += 1
                    wanted.append(i)
            if wanted:
                for row in parquet.read_row_group(group).take(pa.array(wanted, pa.int64())).to_pylist():
                    found[row["reason"]].append(_readable(row))
            if all(n == SAMPLES_PER_REASON for n in taken.values()):
                return found
    return found


@memo(256, key=pinned)
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
