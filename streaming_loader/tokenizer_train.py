"""Training a byte-level BPE tokenizer on pinned snapshots, recording what it was trained on.

The text is read straight from the snapshots' Parquet files in a fixed order (files by path,
rows in file order), at most ``max_bytes`` of it shared evenly among the inputs, so the same
pinned inputs and settings give the same tokenizer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from pyiceberg.catalog import Catalog

from lakehouse.catalog import plan_snapshot, resolve, snapshot_schema
from lakehouse.errors import InputError
from lakehouse.parquet import open_parquet
from lakehouse.refs import PinnedRef
from lakehouse.schemas import require_columns
from lakehouse.version import code_version
from streaming_loader.tokenize import METADATA_KEY

log = logging.getLogger("factory.tokenizer")

EOD_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"


@dataclass(frozen=True)
class TrainedTokenizer:
    text: str
    """The tokenizer.json contents, with the training record inside."""
    documents: int
    bytes: int
    inputs: list[dict[str, object]]


def train_tokenizer(
    catalog: Catalog, refs: Sequence[str], vocab_size: int, max_bytes: int = 64 << 20, min_frequency: int = 2
) -> TrainedTokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 257 + 2:
        raise InputError(
            f"--vocab-size must be at least 259 (256 bytes, 2 special tokens and a merge), got {vocab_size}"
        )
    if max_bytes < 1:
        raise InputError(f"--max-bytes must be at least 1, got {max_bytes}")
    if not refs:
        raise InputError("name at least one table to train on (--input NS.TABLE[@REF])")
    pinned = [_pin(catalog, ref) for ref in refs]
    counts = {"documents": 0, "bytes": 0}
    budget = max(1, max_bytes // len(pinned))

    def texts() -> Iterator[str]:
        for table_files, ref, io_properties in pinned:
            for text in _texts(table_files, ref, budget, io_properties):
                counts["documents"] += 1
                counts["bytes"] += len(text.encode("utf-8"))
                yield text

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOD_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts(), trainer)
    if counts["documents"] == 0:
        raise InputError(f"no documents to train on in {', '.join(refs)}")
    inputs = [ref.as_input() for _, ref, _ in pinned]
    document = json.loads(tokenizer.to_str())
    document["model"][METADATA_KEY] = {
        "trained_by": "factory tokenizer train",
        "inputs": inputs,
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "max_bytes": max_bytes,
        "documents": counts["documents"],
        "bytes": counts["bytes"],
        "eod_token": EOD_TOKEN,
        "pad_token": PAD_TOKEN,
        "code_version": code_version(),
    }
    return TrainedTokenizer(json.dumps(document, ensure_ascii=False), counts["documents"], counts["bytes"], inputs)


def _pin(catalog: Catalog, ref: str) -> tuple[list[str], PinnedRef, Mapping[str, str]]:
    table, pinned = resolve(catalog, ref)
    require_columns(snapshot_schema(table, pinned.snapshot_id), ("text",), str(pinned))
    files = sorted(task.file.file_path for task in plan_snapshot(table, pinned.snapshot_id, pinned.table_name))
    return files, pinned, table.io.properties


def _texts(files: list[str], ref: PinnedRef, budget: int, io_properties: Mapping[str, str]) -> Iterator[str]:
    used = 0
    for path in files:
        for batch in open_parquet(path, str(ref), io_properties).iter_batches(batch_size=1024, columns=["text"]):
            for text in batch.column(0).to_pylist():
                if text is None:
                    continue
                size = len(text.encode("utf-8"))
                if used and used + size > budget:
                    return
                used += size
                yield text
