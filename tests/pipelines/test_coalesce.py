"""Few files from small inputs: staged files combined to the table's target size, with the same
rows in the same order (real Spark, real SQLite Iceberg catalog)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakehouse.columns import TARGET_COLUMN
from pipelines import coalesce
from pipelines.coalesce import coalesce_outputs
from pipelines.filter import FilterOptions, filter_documents
from pipelines.staging import Target, staged_outputs, write_partition
from tests.pipelines.test_filter_job import BAD, CONFIG, GOOD, make_input

SCHEMA = pa.schema([("doc_id", pa.string()), ("text", pa.string())])


def _stage(targets: dict[str, Target], parts: dict[int, list[tuple[str, str]]]):
    """What tasks would report after writing ``parts`` (part number → (target, text) rows)."""
    reports = []
    for part, rows in parts.items():
        batch = pa.RecordBatch.from_pydict(
            {"doc_id": [f"{part}-{i}" for i in range(len(rows))], "text": [t for _, t in rows],
             TARGET_COLUMN: [name for name, _ in rows]}
        )  # fmt: skip
        for report in write_partition(iter([batch]), targets, part=part):
            reports.extend(report.to_pylist())
    return staged_outputs([_Row(**r) for r in reports], targets)


class _Row:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def _rows(paths: list[str]) -> list[dict]:
    return [row for p in paths for row in pq.read_table(p.removeprefix("file://")).to_pylist()]


@pytest.mark.parametrize("where", ["driver", "spark tasks"])
def test_consecutive_small_files_are_combined_in_order_and_removed(spark, tmp_path, monkeypatch, where):
    if where == "spark tasks":
        monkeypatch.setattr(coalesce, "DRIVER_MERGE_BYTES", 0)
    targets = {
        name: Target(f"file://{tmp_path}/{name}", SCHEMA, {}, file_bytes=20_000) for name in ("docs", "quarantine")
    }
    parts = {p: [("docs", f"text {p}")] * 3 + [("quarantine", "bad")] for p in range(6)}
    parts[3] = [("docs", os.urandom(40_000).hex())]  # bigger than the target, even compressed
    staged = _stage(targets, parts)
    before = {name: list(out.files) for name, out in staged.items()}
    rows_before = {name: _rows([f.path for f in files]) for name, files in before.items()}
    assert [len(f) for f in before.values()] == [6, 5]

    combined = coalesce_outputs(spark, staged, targets)

    docs = combined["docs"]
    # Parts 0-2 and 4-5 are small; part 3 is over the target and stays as it was.
    assert len(docs.files) == 3 and docs.files[1] == before["docs"][3]
    assert _rows([f.path for f in docs.files]) == rows_before["docs"]
    assert _rows([f.path for f in combined["quarantine"].files]) == rows_before["quarantine"]
    assert [f.records for f in docs.files] == [9, 1, 6]
    assert sorted(docs.sizes) == sorted(f.path for f in docs.files)
    assert len(combined["quarantine"].files) == 1 and combined["quarantine"].records == 5
    assert combined["quarantine"].counts == staged["quarantine"].counts
    left = sorted(str(p) for p in tmp_path.rglob("*.parquet"))
    assert left == sorted(f.path.removeprefix("file://") for out in combined.values() for f in out.files)


@pytest.mark.slow
def test_a_filter_of_many_small_files_writes_one_file_per_table_with_the_same_rows(spark, catalog, tmp_path):
    config = tmp_path / "web.toml"
    config.write_text(CONFIG)
    docs = sorted((GOOD | BAD).items())
    for i in range(12):  # one input file per append: twelve units of work, one file each before
        make_input(catalog, {f"{k}-{i}": v for k, v in docs[i % len(docs) : i % len(docs) + 2]})
    inputs = sorted(t.file.file_path for t in catalog.load_table(("raw", "web")).scan().plan_files())
    filter_documents(spark, catalog, FilterOptions("raw.web", "few.web", str(config)))

    files = sorted(t.file.file_path for t in catalog.load_table(("few", "web")).scan().plan_files())
    assert len(files) == 1 and len(list(catalog.load_table(("few", "quarantine")).scan().plan_files())) == 1
    # The rows, in order, that the per-unit files held: the input's, file by file, less the dropped.
    kept = [row for row in _rows(inputs) if not any(row["doc_id"].startswith(f"{b}-") for b in BAD)]
    assert _rows(files) == kept and kept
    # The combined small files are gone: the staging folder holds only what was committed.
    location = catalog.load_table(("few", "web")).location().removeprefix("file://")
    assert sorted(str(p) for p in Path(location, "data").rglob("*.parquet")) == [
        f.removeprefix("file://") for f in files
    ]
