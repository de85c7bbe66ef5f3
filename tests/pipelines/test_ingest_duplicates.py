"""A `duplicate-id` refusal keeps what it duplicates and the document's text
(docs/jobs.md, "Ingest"): real Spark (local[2]) and a real SQLite Iceberg catalog."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.schemas import QUARANTINE_RECORD_BYTES
from pipelines.ingest import ingest
from tests.pipelines.test_ingest_job import options, rows


def test_a_record_whose_id_is_in_the_table_keeps_the_snapshot_and_its_bytes(spark, catalog, tmp_path):
    (tmp_path / "u1").mkdir()
    (tmp_path / "u2").mkdir()
    (tmp_path / "u1/a.jsonl").write_bytes(b'{"id":"doc-1","text":"version one"}\n')
    corrected = b'{"id":"doc-1","text":"version TWO, corrected"}'
    (tmp_path / "u2/a.jsonl").write_bytes(corrected + b"\n")

    first = ingest(spark, catalog, options([tmp_path / "u1"], "jsonl", output="upd.docs", id_field="id"))
    second = ingest(spark, catalog, options([tmp_path / "u2"], "jsonl", output="upd.docs", id_field="id"))

    assert second.stats["quarantined.duplicate-id"] == 1
    (row,) = rows(catalog, "upd.quarantine")
    assert row["reason"] == "duplicate-id"
    assert row["detail"] == f"id already in upd.docs@{first.documents.snapshot_id}"
    assert row["record"] == b"version TWO, corrected"  # the new version's text is kept, not lost
    assert [d["text"] for d in rows(catalog, "upd.docs")] == ["version one"]


def test_a_file_read_again_without_flags_keeps_its_new_content(spark, catalog, tmp_path):
    for day, text in (("day1", "first"), ("day2", "other content")):
        (tmp_path / day / "data").mkdir(parents=True)
        (tmp_path / day / "data/a.jsonl").write_text(f'{{"text": "{text}"}}\n')

    first = ingest(spark, catalog, options([tmp_path / "day1/data"], "jsonl"))
    ingest(spark, catalog, options([tmp_path / "day2/data"], "jsonl"))

    (row,) = rows(catalog, "raw.quarantine")
    assert (row["reason"], row["path"]) == ("duplicate-id", "data/a.jsonl:1")
    assert row["detail"] == f"id already in raw.docs@{first.documents.snapshot_id}"
    assert row["record"] == b"other content"


def test_a_repeat_within_one_run_keeps_its_text_capped(spark, catalog, tmp_path):
    long_text = "y" * (QUARANTINE_RECORD_BYTES + 10)
    lines = [
        b'{"id": 1, "text": "the first"}',
        b'{"id": 1, "text": "the second", "extra": true}',
        b'{"id": 2, "text": "short"}',
        b'{"id": 2, "text": "' + long_text.encode() + b'"}',
    ]
    (tmp_path / "a.jsonl").write_bytes(b"\n".join(lines) + b"\n")

    ingest(spark, catalog, options([tmp_path / "a.jsonl"], "jsonl", id_field="id", max_doc_bytes=1 << 20))

    refused = {r["path"]: r for r in rows(catalog, "raw.quarantine")}
    assert {p: (r["reason"], r["detail"]) for p, r in refused.items()} == {
        "a.jsonl:2": ("duplicate-id", "same id as a.jsonl:1"),
        "a.jsonl:4": ("duplicate-id", "same id as a.jsonl:3"),
    }
    assert refused["a.jsonl:2"]["record"] == b"the second"
    assert refused["a.jsonl:4"]["record"] == long_text.encode()[:QUARANTINE_RECORD_BYTES]


def test_parquet_rows_and_source_files_keep_their_text_too(spark, catalog, tmp_path):
    pq.write_table(pa.table({"id": ["p", "p"], "text": ["one", "two"]}), tmp_path / "t.parquet")
    ingest(spark, catalog, options([tmp_path / "t.parquet"], "parquet", id_field="id"))
    (row,) = rows(catalog, "raw.quarantine")
    assert (row["detail"], row["record"]) == ("same id as t.parquet#0", b"two")

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "main.py").write_bytes(b"print('one')\n")
    first = ingest(spark, catalog, options([repo], "files", output="code.docs", source="code"))
    (repo / "main.py").write_bytes(b"print('two')\n")
    ingest(spark, catalog, options([repo], "files", output="code.docs", source="code"))
    (row,) = rows(catalog, "code.quarantine")
    assert row["detail"] == f"id already in code.docs@{first.documents.snapshot_id}"
    assert row["record"] == b"print('two')\n"
