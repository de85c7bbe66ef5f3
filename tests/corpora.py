"""Small generated document tables, written with pyiceberg (no Spark needed to make them)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pyarrow as pa

from lakehouse.catalog import ensure_table
from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

WORDS = (
    "the data engine streams pinned snapshots into training and every checkpoint knows its lineage "
    "while readers tokenize documents packed into windows of tokens mixed by weight across components"
).split()
CODE = ["def f{i}(x):", "    return x + {i}", "class C{i}:", "    pass", "import os", "for i in range({i}):", "x = {i}"]


def text_document(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "."


def code_document(rng: random.Random, n_lines: int) -> str:
    return "\n".join(rng.choice(CODE).format(i=rng.randrange(100)) for _ in range(n_lines)) + "\n"


def make_table(
    catalog,
    name: str,
    n_docs: int,
    *,
    kind: str = "text",
    files: int = 3,
    seed: int = 0,
    row_group_rows: int | None = None,
    max_len: int = 60,
):
    """A document table of ``n_docs`` generated documents spread over ``files`` appends."""
    identifier = tuple(name.split("."))
    table = ensure_table(catalog, identifier, DOCUMENT_SCHEMA)
    if row_group_rows:
        with table.transaction() as tx:
            tx.set_properties({"write.parquet.row-group-limit": str(row_group_rows)})
        table = catalog.load_table(identifier)
    rng = random.Random(seed)
    langs = ["python", "rust"] if kind == "code" else ["en", "fr"]
    rows = []
    for i in range(n_docs):
        size = rng.randrange(1, max_len)
        text = code_document(rng, size) if kind == "code" else text_document(rng, size)
        doc_id = hashlib.sha256(f"{name}:{seed}:{i}".encode()).hexdigest()[:32]
        rows.append(
            {
                "doc_id": doc_id,
                "source": kind,
                "text": text,
                "path": f"doc{i}",
                "lang": langs[i % 2],
                "n_bytes": len(text),
            }
        )
    schema = arrow_schema(DOCUMENT_SCHEMA)
    per_file = -(-n_docs // files)
    for start in range(0, n_docs, per_file):
        table.append(pa.Table.from_pylist(rows[start : start + per_file], schema=schema))
    return catalog.load_table(identifier)


def write_spec(path: Path, components: list[dict], seed: int = 7, fmt: str = "toml") -> Path:
    if fmt == "yaml":
        path.write_text(json.dumps({"seed": seed, "components": components}))  # JSON is YAML
        return path
    lines = [f"seed = {seed}"]
    for component in components:
        lines.append("[[components]]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in component.items())
    path.write_text("\n".join(lines) + "\n")
    return path
