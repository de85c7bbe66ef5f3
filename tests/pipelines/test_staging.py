"""The staging writer a Spark task runs, called directly: its files are durable before they are reported."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.columns import TARGET_COLUMN
from pipelines.staging import Target, write_partition
from tests.durability import record_syncs


def test_staged_files_and_their_folders_are_synced_before_they_are_reported(tmp_path, monkeypatch):
    schema = pa.schema([("doc_id", pa.string()), ("text", pa.string())])
    prefix = tmp_path / "table" / "data" / "runs" / "run-1" / "attempt-1"
    targets = {"documents": Target(str(prefix), schema, {})}
    batch = pa.RecordBatch.from_pydict(
        {"doc_id": ["a", "b"], "text": ["one", "two"], TARGET_COLUMN: ["documents", "documents"]}
    )
    events = record_syncs(monkeypatch)
    reports = write_partition(iter([batch]), targets, part=0)
    (report,) = next(reports).to_pylist()
    synced_when_reported = list(events)
    assert list(reports) == []

    path = report["path"].removeprefix("file://")
    assert pq.read_table(path).num_rows == 2
    assert ("fsync", os.path.realpath(path)) in synced_when_reported
    # Every folder made for it, up to the table's, is durable too (power loss must not lose its name).
    for folder in (prefix, prefix.parent, prefix.parent.parent, prefix.parent.parent.parent):
        assert ("fsync", os.path.realpath(folder)) in synced_when_reported, folder
