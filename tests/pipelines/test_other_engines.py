"""Another Iceberg engine reads the tables the jobs write: Daft, which resolves columns by the
Parquet field ids alone (docs/architecture.md, "Tables")."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.pipelines.chain import TABLES, run_chain


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=repr)


@pytest.mark.slow
def test_daft_reads_every_table_the_jobs_write_as_pyiceberg_does(spark, catalog, tmp_path):
    import daft

    run_chain(spark, catalog, tmp_path / "chain")

    for identifier in TABLES:
        table = catalog.load_table(identifier)
        expected = _rows(table.scan().to_arrow())
        assert expected, identifier  # the corpus gives every table rows
        table_ids = {f.name: f.field_id for f in table.schema().fields}
        for task in table.scan().plan_files():
            written = pq.read_schema(task.file.file_path.removeprefix("file://"))
            assert {f.name: int(f.metadata[b"PARQUET:field_id"]) for f in written} == table_ids, identifier
        assert _rows(daft.read_iceberg(table).to_arrow()) == expected, identifier
