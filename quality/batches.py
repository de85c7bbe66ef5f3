"""The filter chain over Arrow record batches: what each Spark task of the filter job runs.

Kept apart from ``pipelines.filter`` so that a Spark Python worker imports only this, pyarrow
and the filters (a fraction of a second), not pyiceberg and the Spark driver code (seconds).
"""

from __future__ import annotations

import json
import tomllib

import pyarrow as pa

from quality.base import Doc
from quality.chain import FilterChain
from quality.config import parse_config

# Columns a batch needs, in this order, and the columns the verdict adds.
DOCUMENT_FIELDS = ("doc_id", "source", "text", "path", "lang", "n_bytes")
TARGET_FIELD = "_target"
VERDICT_FIELDS = (
    (TARGET_FIELD, pa.string()),  # "documents" or "quarantine"
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
    columns = [batch.column(name).to_pylist() for name in DOCUMENT_FIELDS]
    verdict: dict[str, list] = {name: [] for name, _ in VERDICT_FIELDS}
    for doc_id, source, text, path, lang, n_bytes in zip(*columns, strict=True):
        outcome = chain.apply(Doc(doc_id, text, source, lang, path, n_bytes))
        verdict[TARGET_FIELD].append("documents" if outcome.keep else "quarantine")
        verdict["filter"].append(outcome.filter)
        verdict["reason"].append(outcome.reason)
        verdict["detail"].append(outcome.detail)
        verdict["metrics"].append(json.dumps(outcome.metrics, sort_keys=True) if outcome.metrics else None)
        verdict["record"].append(None if outcome.keep else text.encode("utf-8")[:record_bytes])
    arrays = [pa.array(verdict[name], arrow_type) for name, arrow_type in VERDICT_FIELDS]
    return pa.RecordBatch.from_arrays([*batch.columns, *arrays], names=[*batch.schema.names, *verdict])
