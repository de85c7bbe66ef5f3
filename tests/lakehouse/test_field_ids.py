"""Data files carry the table's Iceberg field ids; files written before they did still read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from lakehouse.catalog import ensure_table
from lakehouse.commit import Run, StagedFile, commit_files
from lakehouse.schemas import DOCUMENT_SCHEMA, QUARANTINE_SCHEMA_WITH_METRICS, arrow_schema, file_schema
from tests.lakehouse.test_commit import new_run

TABLE = ("raw", "docs")


def parquet_ids(path: str) -> dict[str, int]:
    """Each top-level column's field id as the Parquet file's own schema holds it (-1: none)."""
    schema = pq.read_schema(path.removeprefix("file://"))
    return {f.name: int((f.metadata or {}).get(b"PARQUET:field_id", -1)) for f in schema}


def stage_with(table, run: Run, ids: list[str], schema: pa.Schema, name: str) -> StagedFile:
    prefix = run.staging_prefix(table).removeprefix("file://")
    Path(prefix).mkdir(parents=True, exist_ok=True)
    rows = [{"doc_id": i, "source": "t", "text": f"text {i}", "path": None, "lang": None, "n_bytes": 6} for i in ids]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), f"{prefix}/{name}.parquet")
    return StagedFile(f"file://{prefix}/{name}.parquet", len(ids))


def test_the_written_schema_takes_its_ids_from_the_table_not_from_the_constant(catalog):
    # A table whose columns another engine numbered otherwise: ids follow the table, by name.
    fields = [DOCUMENT_SCHEMA.find_field(name) for name in ("text", "doc_id", "source")]
    reordered = ensure_table(catalog, TABLE, Schema(*fields))  # the catalog numbers them 1, 2, 3
    table_ids = {f.name: f.field_id for f in reordered.schema().fields}
    written = file_schema(reordered, DOCUMENT_SCHEMA.select("doc_id", "source", "text"))
    assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in written} == table_ids
    assert table_ids != {f.name: f.field_id for f in DOCUMENT_SCHEMA.select("doc_id", "source", "text").fields}

    # The quarantine columns added by evolution get the ids the table gave them.
    quarantine = ensure_table(catalog, ("raw", "quarantine"), QUARANTINE_SCHEMA_WITH_METRICS)
    ids = {
        f.name: int(f.metadata[b"PARQUET:field_id"]) for f in file_schema(quarantine, QUARANTINE_SCHEMA_WITH_METRICS)
    }
    assert ids == {f.name: f.field_id for f in quarantine.schema().fields}


def test_a_table_of_files_without_ids_still_reads_and_takes_new_files_with_ids(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    # The way files were written before: no field ids; add_files set the table's name mapping.
    old_run = new_run("old")
    old = stage_with(table, old_run, ["a", "b"], schema_to_pyarrow(DOCUMENT_SCHEMA, include_field_ids=False), "old")
    commit_files(catalog, TABLE, [old], old_run, {})
    assert set(parquet_ids(old.path).values()) == {-1}
    table = catalog.load_table(TABLE)
    assert table.metadata.name_mapping() is not None

    run = new_run("new")
    new = stage_with(table, run, ["c"], file_schema(table, DOCUMENT_SCHEMA), "new")
    commit_files(catalog, TABLE, [new], run, {})
    assert parquet_ids(new.path) == {f.name: f.field_id for f in DOCUMENT_SCHEMA.fields}

    rows = catalog.load_table(TABLE).scan().to_arrow().sort_by("doc_id").to_pylist()
    assert [(r["doc_id"], r["text"]) for r in rows] == [("a", "text a"), ("b", "text b"), ("c", "text c")]


def test_daft_reads_a_table_of_files_with_ids_as_pyiceberg_does(catalog):
    import daft

    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    run = new_run()
    staged = [stage_with(table, run, ids, arrow_schema(DOCUMENT_SCHEMA), ids[0]) for ids in (["a", "b"], ["c"])]
    commit_files(catalog, TABLE, staged, run, {})

    table = catalog.load_table(TABLE)
    by_daft = daft.read_iceberg(table).to_arrow().sort_by("doc_id").to_pylist()
    assert by_daft == table.scan().to_arrow().sort_by("doc_id").to_pylist()
    assert [r["doc_id"] for r in by_daft] == ["a", "b", "c"]
