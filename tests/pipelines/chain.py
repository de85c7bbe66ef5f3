"""The chain of jobs on a tiny corpus, for tests that need every kind of table the jobs write:
ingest → ``raw.web`` (+ ``raw.quarantine``), dedup → ``dedup.web`` + ``dedup.web_clusters``,
filter → ``filtered.web`` (+ ``filtered.quarantine``, with the filter's extra columns)."""

from __future__ import annotations

import json
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyspark.sql import SparkSession

from pipelines.dedup import DedupOptions, dedup
from pipelines.filter import FilterOptions, filter_documents
from pipelines.ingest import IngestOptions, ingest
from pipelines.ingest_records import RecordConfig
from tests.documents import prose

FILTER_CONFIG = """
filters = ["size"]
sources = ["web"]
[size]
min_bytes = 40
max_bytes = 20000
"""

TABLES = [
    ("raw", "web"),
    ("raw", "quarantine"),
    ("dedup", "web"),
    ("dedup", "web_clusters"),
    ("filtered", "web"),
    ("filtered", "quarantine"),
]


def records() -> list[dict]:
    """Distinct prose, two exact duplicates, one too short for the filter, one too large for ingest."""
    docs = [{"id": f"d{i}", "text": prose(i, sentences=4)} for i in range(6)]
    docs += [{"id": "dup-0", "text": docs[0]["text"]}, {"id": "dup-1", "text": docs[1]["text"]}]
    docs += [{"id": "short", "text": "Too short."}, {"id": "huge", "text": prose(99, sentences=200)}]
    return docs


def run_chain(spark: SparkSession, catalog: Catalog, folder: Path, prefix: str = "chain") -> None:
    """Ingest, dedup and filter the corpus with run ids ``<prefix>-<job>``."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "web.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records()))
    config = folder / "web.toml"
    config.write_text(FILTER_CONFIG)
    ingest(
        spark,
        catalog,
        IngestOptions(
            inputs=[str(corpus)],
            fmt="jsonl",
            output="raw.web",
            records=RecordConfig(source="web", id_field="id", max_doc_bytes=4000),
            run_id=f"{prefix}-ingest",
        ),
    )
    dedup(spark, catalog, DedupOptions(inputs=["raw.web"], output="dedup.web", run_id=f"{prefix}-dedup"))
    filter_documents(
        spark, catalog, FilterOptions("dedup.web", "filtered.web", str(config), run_id=f"{prefix}-filter", tag="v1")
    )
