"""The filter chain over Arrow record batches: what each Spark task of the filter job runs.

Kept apart from ``pipelines.filter`` so that a Spark Python worker imports only this, pyarrow
and the filters (a fraction of a second), not pyiceberg and the Spark driver code (seconds).
"""

from __future__ import annotations

import json
import tomllib

import pyarrow as pa

from lakehouse.columns import DOCUMENT_COLUMNS, TARGET_COLUMN
from quality.base import Doc
from quality.chain import FilterChain
from quality.config import parse_config

# The columns the verdict adds to a batch of documents (lakehouse.columns.DOCUMENT_COLUMNS).
VERDICT_FIELDS = (
    (TARGET_COLUMN, pa.string()),  # "documents" or "quarantine"
    ("filter", pa.string()),
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("metrics", pa.string()),  # JSON
    ("record", pa.binary()),  # the first bytes of a quarantined document
)

_CHAINS: dict[str, FilterChain] = {}  # per Python worker: built once, reused by every task


def chain_from_source(text: str, path: str, sha256: str) -> FilterChain:
    """The chain of the config file whose bytes were ``text``, built once per process.

    Tasks rebuild the config from the very text that was hashed rather than unpickling one,
    and a reused Python worker keeps its chain (and the filters' loaded tokenizers).
    """
    if sha256 not in _CHAINS:
        _CHAINS[sha256] = FilterChain(parse_config(tomllib.loads(text), path=path, sha256=sha256))
    return _CHAINS[sha256]


def filter_batch(chain: FilterChain, batch: pa.RecordBatch, record_bytes: int) -> pa.RecordBatch:
    """``batch`` with the chain's verdict on each row appended as the ``VERDICT_FIELDS`` columns."""
    columns = [batch.column(name).to_pylist() for name in DOCUMENT_COLUMNS]
    verdict: dict[str, list] = {name: [] for name, _ in VERDICT_FIELDS}
    for doc_id, source, text, path, lang, n_bytes in zip(*columns, strict=True):
        outcome = chain.apply(Doc(doc_id, text, source, lang, path, n_bytes))
        verdict[TARGET_COLUMN].append("documents" if outcome.keep else "quarantine")
        verdict["filter"].append(outcome.filter)
        verdict["reason"].append(outcome.reason)
        verdict["detail"].append(outcome.detail)
        verdict["metrics"].append(json.dumps(outcome.metrics, sort_keys=True) if outcome.metrics else None)
        verdict["record"].append(None if outcome.keep else text.encode("utf-8")[:record_bytes])
    arrays = [pa.array(verdict[name], arrow_type) for name, arrow_type in VERDICT_FIELDS]
    return pa.RecordBatch.from_arrays([*batch.columns, *arrays], names=[*batch.schema.names, *verdict])


def with_quarantine_columns(marked: pa.RecordBatch, stage: str, run_id: str) -> pa.RecordBatch:
    """A marked batch with the quarantine's ``stage`` and ``run_id`` and ``_count_key``
    (``filter<TAB>reason`` of the values present: what the snapshot summary's drop counts count)."""
    n = marked.num_rows
    # Not pc.binary_join_element_wise(null_handling="skip"): pyarrow 26 returns too few rows
    # when an array starts with nulls.
    pairs = zip(marked.column("filter").to_pylist(), marked.column("reason").to_pylist(), strict=True)
    added = {
        "stage": pa.array([stage] * n, pa.string()),
        "run_id": pa.array([run_id] * n, pa.string()),
        "_count_key": pa.array(["\t".join(v for v in pair if v is not None) for pair in pairs], pa.string()),
    }
    return pa.RecordBatch.from_arrays([*marked.columns, *added.values()], names=[*marked.schema.names, *added])
