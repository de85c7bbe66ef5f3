"""Generated corpora for the dedup tests: planted duplicates at known edit levels."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakehouse.catalog import ensure_table
from lakehouse.commit import Run, StagedFile, commit_files
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema
from pipelines.ingest_records import doc_id_for


@dataclass
class Planted:
    """A corpus and what was planted in it."""

    docs: list[dict] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (original, edited copy) doc_ids

    def add(self, key: str, text: str, source: str = "web") -> str:
        doc_id = doc_id_for(source, f"id:{key}")
        self.docs.append(
            {"doc_id": doc_id, "source": source, "text": text, "path": key, "lang": None, "n_bytes": len(text.encode())}
        )
        return doc_id


def words(rng: random.Random, n: int) -> list[str]:
    # Letters only: digits fold to 0 in normalisation and would make words collide.
    return ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(n)]


def edited(rng: random.Random, tokens: list[str], vocabulary: list[str], substitutions: int) -> list[str]:
    copy = list(tokens)
    for position in rng.sample(range(len(copy)), substitutions):
        copy[position] = rng.choice(vocabulary)
    return copy


def planted_corpus(seed: int = 7, originals: int = 120) -> Planted:
    """Originals of 150–400 words, each with edited copies at several edit levels, and unrelated documents.

    An edit level of k substitutions in a document of n words leaves a 5-gram Jaccard of about
    (n - 5k) / (n + 5k): the copies span similarities from about 0.5 to 1.
    """
    rng = random.Random(seed)
    vocabulary = words(rng, 5000)
    corpus = Planted()
    for i in range(originals):
        tokens = [rng.choice(vocabulary) for _ in range(rng.randint(150, 400))]
        original = corpus.add(f"orig-{i}", " ".join(tokens))
        for j in range(rng.randint(1, 3)):
            level = rng.choice([0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06])
            copy = edited(rng, tokens, vocabulary, round(level * len(tokens)))
            corpus.pairs.append((original, corpus.add(f"copy-{i}-{j}", " ".join(copy))))
    for i in range(originals):
        corpus.add(f"other-{i}", " ".join(rng.choice(vocabulary) for _ in range(rng.randint(20, 300))))
    return corpus


def write_table(
    catalog, name: str, docs: list[dict], run_id: str = "fixture", *, files: int = 1, row_group_size: int | None = None
):
    """A document table holding ``docs`` in ``files`` files, committed as one snapshot by the commit protocol."""
    identifier = tuple(name.split("."))
    table = ensure_table(catalog, identifier, DOCUMENT_SCHEMA)
    run = Run(job="fixture", run_id=run_id, params={}, inputs=[])
    staged = []
    ordered = sorted(docs, key=lambda d: d["doc_id"])
    for part in range(files if docs else 0):
        path = f"{run.staging_prefix(table)}/part-{part}.parquet"
        local = Path(path.removeprefix("file://"))
        local.parent.mkdir(parents=True, exist_ok=True)
        rows = ordered[part::files]
        table_rows = pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA))
        pq.write_table(table_rows, local, row_group_size=row_group_size)
        staged.append(StagedFile(path, len(rows)))
    files = staged
    return commit_files(catalog, identifier, files, run, {"documents": len(docs)}).snapshot_id
