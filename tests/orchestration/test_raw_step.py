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


def test_a_changed_filter_config_refines_the_same_input_again(spark, catalog, tmp_path):
    """A filter config edited after its source was refined was ignored until new files came."""
    from quality.config import load_config

    path = two_sources(tmp_path / "factory")
    config = path.parent / "web-filter.toml"
    config.write_text('filters = ["size"]\n[size]\nmin_bytes = 1\n')
    path.write_text(path.read_text().replace('filter = "docs"', f'filter = "{config}"', 1))
    records(path.parent / "web" / "part-0.jsonl", range(0, 12))
    materialise(load_definition(path), ["web/raw", "web/filtered"], quiet=True)
    assert len(catalog.load_table(("filtered", "web")).scan().to_arrow()) == 12

    config.write_text('filters = ["size"]\n[size]\nmin_bytes = 16\n')  # "record number 10" and 11: 16 bytes
    materialise(load_definition(path), ["web/raw", "web/filtered"], quiet=True)
    filtered = catalog.load_table(("filtered", "web"))
    assert filtered.current_snapshot().summary["factory.filter-config-sha256"] == load_config(str(config)).sha256
    assert len(filtered.scan().to_arrow()) == 2  # the other ten are 15 bytes

    head = filtered.current_snapshot().snapshot_id
    materialise(load_definition(path), ["web/raw", "web/filtered"], quiet=True)  # nothing changed: nothing run
    assert catalog.load_table(("filtered", "web")).current_snapshot().snapshot_id == head
