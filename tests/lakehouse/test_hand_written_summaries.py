"""A snapshot summary written by another tool (pyiceberg's append with properties of its own) is
refused naming the snapshot and key wherever a factory.inputs or factory.params is read: a
checkpoint's lineage, a refinement's taken-in inputs, a retried run's binding. Each failed with a
JSONDecodeError, a TypeError or an AttributeError before."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from lakehouse.catalog import ensure_table
from lakehouse.commit import Run
from lakehouse.errors import InputError
from lakehouse.run_binding import check_binding
from orchestration.state import refined_inputs
from trainer.lineage import pipeline_runs

SCHEMA = Schema(NestedField(1, "doc_id", StringType(), required=False))

# Each: the summary properties another tool wrote beside the run id, and what the refusal says.
WRITTEN = {
    "inputs not JSON": ({"factory.inputs": "[{"}, "factory.inputs is not a JSON list of inputs"),
    "inputs an object": ({"factory.inputs": '{"table": "raw.a"}'}, "factory.inputs holds a dict"),
    "an input a number": ({"factory.inputs": "[5]"}, "factory.inputs: input [0] is 5, not an object"),
    "params a list": ({"factory.params": "[1]"}, "factory.params holds a list, not a JSON object"),
}


def _hand_made(catalog, summary: dict[str, str]) -> int:
    table = ensure_table(catalog, ("raw", "hand"), SCHEMA)
    properties = {"factory.run-id": "hand-1", "factory.job": "ingest", **summary}
    table.append(pa.Table.from_pylist([{"doc_id": "d1"}], schema=SCHEMA.as_arrow()), snapshot_properties=properties)
    return catalog.load_table(("raw", "hand")).current_snapshot().snapshot_id


@pytest.mark.parametrize("written", WRITTEN)
def test_a_checkpoints_lineage_refuses_a_hand_written_summary_naming_it(catalog, written):
    summary, says = WRITTEN[written]
    snapshot_id = _hand_made(catalog, summary)
    with pytest.raises(InputError, match=re.escape(f"raw.hand@{snapshot_id}'s {says}")):
        pipeline_runs(catalog, "raw.hand", snapshot_id)


@pytest.mark.parametrize("written", [w for w in WRITTEN if "params" not in w])
def test_a_refinements_taken_in_inputs_refuse_a_hand_written_summary_naming_it(catalog, written):
    summary, says = WRITTEN[written]
    snapshot_id = _hand_made(catalog, summary)
    with pytest.raises(InputError, match=re.escape(f"raw.hand@{snapshot_id}'s {says}")):
        refined_inputs(catalog, "raw.hand")


@pytest.mark.parametrize("written", WRITTEN)
def test_a_retried_runs_binding_refuses_a_hand_written_summary_naming_it(catalog, written):
    summary, says = WRITTEN[written]
    snapshot_id = _hand_made(catalog, summary)
    snapshot = catalog.load_table(("raw", "hand")).current_snapshot()
    run = Run(job="ingest", run_id="hand-1", params={}, inputs=[])
    with pytest.raises(InputError, match=re.escape(f"raw.hand snapshot {snapshot_id}'s {says}")):
        check_binding(run, snapshot, ("raw", "hand"))
