"""Small record tables written a few rows at a time (``experiments.trials``, ``factory.decisions``).

Each call commits its rows as one snapshot through the commit protocol (docs/architecture.md,
"The commit protocol"): one Parquet file staged under the run's own prefix, synced, then
``commit_run``. The run id names the record, so recording it again commits nothing. A job that
commits such rows beside its own outputs (ingest's ledger of files) stages them with ``stage_rows``. Columns that
hold structured values (parameters, evidence) are JSON strings rather than Iceberg maps: a value
may be a number, a string or a whole object, and JSON keeps its type in any reader without a
schema change per record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import StringType

from lakehouse.catalog import ensure_table
from lakehouse.commit import CommitResult, Run, StagedFile
from lakehouse.local_files import sync_file, sync_folders
from lakehouse.row_groups import RowGroupWriter, row_group_bytes
from lakehouse.run_binding import RunOutput, commit_run, find_run_commits
from lakehouse.schemas import arrow_schema


def commit_rows(
    catalog: Catalog, identifier: tuple[str, ...], schema: Schema, run: Run, rows: Sequence[Mapping[str, Any]]
) -> CommitResult | None:
    """Commit ``rows`` as run ``run``'s one snapshot of ``identifier``; None if it was already there."""
    table = ensure_table(catalog, identifier, schema)
    if find_run_commits(catalog, run, [identifier])[identifier] is not None:
        return None
    staged = stage_rows(table, schema, run, rows)
    return commit_run(catalog, run, [RunOutput(identifier, [staged])], {"rows": len(rows)})[0]


def stage_rows(table: Table, schema: Schema, run: Run, rows: Sequence[Mapping[str, Any]]) -> StagedFile:
    """``rows`` as one Parquet file, written by this process under ``run``'s staging prefix for
    ``table`` and durable there, ready for ``commit_run``."""
    path = f"{run.staging_prefix(table)}/{run.job}.parquet"
    arrow = pa.Table.from_pylist([plain_row(schema, row) for row in rows], schema=arrow_schema(schema))
    with table.io.new_output(path).create(overwrite=True) as stream:
        writer = RowGroupWriter(stream, arrow.schema, row_group_bytes(table.properties))
        writer.write_table(arrow)
        writer.close()
    if "://" not in path or path.startswith("file://"):  # the commit protocol: on disk before committed
        local = path.removeprefix("file://")
        sync_file(local)
        sync_folders(local)
    return StagedFile(path, len(rows))


def plain_row(schema: Schema, row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with a value for every column; structured values in string columns as sorted JSON."""
    plain = {}
    for field in schema.fields:
        value = row.get(field.name)
        if isinstance(field.field_type, StringType) and value is not None and not isinstance(value, str):
            value = json.dumps(value, sort_keys=True, default=str)
        plain[field.name] = value
    return plain


def decode_json(rows: list[dict[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """``rows`` with the JSON string ``columns`` decoded (in place); empty values become None."""
    for row in rows:
        for key in columns:
            row[key] = json.loads(row[key]) if row.get(key) else None
    return rows
