"""The texts of a few documents of pinned snapshots, read on the driver with pyarrow.

Dedup's driver plan verifies a few thousand candidate pairs; their texts are a small part of
the snapshots. A Spark job that scans every text to pick them (a semi-join) pays the JVM's
decoding and its conversion into Python for all of them; pyarrow reads the two columns of
several files at once (its decoding releases the GIL) and keeps the wanted rows, a batch at a
time, so memory stays at a row group per file being read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from lakehouse.parquet import open_parquet, store_properties
from pipelines.spark_session import snapshot_files


@dataclass(frozen=True)
class TextSource:
    """A pinned snapshot whose documents are known by ``prefix + doc_id``."""

    table: Table
    snapshot_id: int
    label: str
    prefix: str


def texts_of(sources: Sequence[TextSource], keys: set[str]) -> dict[str, str]:
    """``prefix + doc_id`` → text for the given keys found in the sources."""
    if not keys:
        return {}
    wanted = pa.array(sorted(keys), type=pa.string())
    files = [
        (source, path) for source in sources for path in snapshot_files(source.table, source.snapshot_id, source.label)
    ]
    found: dict[str, str] = {}
    with ThreadPoolExecutor(max(1, min(len(files), os.cpu_count() or 1))) as pool:
        for part in pool.map(lambda file: _read(*file, wanted), files):
            found.update(part)
    return found


def _read(source: TextSource, path: str, wanted: pa.Array) -> dict[str, str]:
    properties = store_properties(source.table.io.properties)
    found: dict[str, str] = {}
    for batch in open_parquet(path, source.label, properties).iter_batches(columns=["doc_id", "text"]):
        doc_ids = batch.column("doc_id").cast(pa.string())  # files may hold large_string
        keys = pc.binary_join_element_wise(source.prefix, doc_ids, "")
        hit = pc.is_in(keys, value_set=wanted)
        found.update(zip(keys.filter(hit).to_pylist(), batch.column("text").filter(hit).to_pylist(), strict=True))
    return found
