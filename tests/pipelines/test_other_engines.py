"""Another Iceberg engine reads the tables the jobs write: Daft, which resolves columns by the
Parquet field ids alone (docs/architecture.md, "Tables")."""

from __future__ import annotations

import pytest

from tests.other_engines import assert_daft_reads_as_pyiceberg
from tests.pipelines.chain import TABLES, run_chain


@pytest.mark.slow
def test_daft_reads_every_table_the_jobs_write_as_pyiceberg_does(spark, catalog, tmp_path):
    run_chain(spark, catalog, tmp_path / "chain")

    for identifier in TABLES:
        assert_daft_reads_as_pyiceberg(catalog.load_table(identifier))
