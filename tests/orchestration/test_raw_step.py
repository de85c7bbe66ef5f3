"""A source's raw step under `factory run`, on real Spark, Iceberg and Dagster: a file added to the
source's folder is ingested alone, not the whole folder again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factory_cli.run import materialise
from orchestration.definition_load import load_definition
from tests.orchestration.definitions import two_sources

pytestmark = pytest.mark.engine  # real Spark, Dagster and a real Iceberg catalog


def records(path: Path, ids: range) -> None:
    path.write_text("".join(json.dumps({"id": f"r{i}", "text": f"record number {i}"}) + "\n" for i in ids))


def test_a_file_added_to_a_source_is_ingested_alone_and_quarantines_no_old_record(spark, catalog, tmp_path):
    path = two_sources(tmp_path / "factory")
    records(path.parent / "web" / "part-0.jsonl", range(0, 3))
    records(path.parent / "web" / "part-1.jsonl", range(3, 5))
    definition = load_definition(path)
    materialise(definition, ["web/raw"], quiet=True)

    records(path.parent / "web" / "part-2.jsonl", range(5, 7))
    materialise(definition, ["web/raw"], quiet=True)

    quarantine = catalog.load_table(("raw", "quarantine")).scan().to_arrow().to_pylist()
    assert [r["reason"] for r in quarantine if r["reason"] == "duplicate-id"] == []
    documents = catalog.load_table(("raw", "web")).scan().to_arrow().column("text").to_pylist()
    assert sorted(documents) == sorted(f"record number {i}" for i in range(7))
    last = catalog.load_table(("raw", "web")).current_snapshot().summary
    assert (last["factory.stats.files"], last["factory.stats.files-skipped"]) == ("1", "2")
