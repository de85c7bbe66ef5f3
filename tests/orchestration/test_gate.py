"""The refinement gate on a refined snapshot that holds no documents (its filter dropped them all):
refused, whatever the policy, so no mixture pins it and no run trains on nothing."""

from __future__ import annotations

import dagster as dg
import pyarrow as pa
import pytest

from lakehouse.decisions import read_decisions
from orchestration.definition_load import load_definition
from orchestration.graph import build_assets
from orchestration.keys import production_key
from orchestration.state import tagged
from tests.orchestration.definitions import two_sources

pytestmark = pytest.mark.engine  # real Dagster, a real Iceberg catalog


def _gate(definition) -> dg.ExecuteInProcessResult:
    (asset,) = [a for a in build_assets(definition) if production_key("code") in a.keys]
    return dg.materialize([asset], resources={"commands": None}, raise_on_error=False)


def test_a_snapshot_without_documents_is_refused_and_the_next_one_promoted(tmp_path, catalog):
    definition = load_definition(two_sources(tmp_path / "factory"))
    catalog.create_namespace("decontaminated")
    table = catalog.create_table("decontaminated.code", pa.schema([("doc_id", pa.string())]))
    table.append(pa.table({"doc_id": ["a"]}))
    table.delete()  # every row gone: a snapshot of 0 records
    empty = table.refresh().current_snapshot().snapshot_id

    assert _gate(definition).success
    assert tagged(catalog, "decontaminated.code") is None
    (refused,) = read_decisions(catalog)
    assert refused["verdict"] == "refused" and refused["reason"].endswith(
        "holds no documents: its refinement dropped them all"
    )
    assert f"@{empty}" in refused["reason"]

    table.append(pa.table({"doc_id": ["b"]}))
    kept = table.refresh().current_snapshot().snapshot_id
    assert _gate(definition).success
    assert tagged(catalog, "decontaminated.code") == kept  # the first snapshot with documents: promoted
