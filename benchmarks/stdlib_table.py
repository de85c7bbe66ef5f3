"""The Python standard library's source as a document table, written straight through pyiceberg in
files of 8 MB (the UI and trainer benchmarks' corpus; the loader benchmark makes its tables with the
factory's own commands instead, benchmarks/loader/run.py)."""

from __future__ import annotations

import hashlib
import sysconfig
from pathlib import Path

FILE_BYTES = 8e6


def stdlib_texts() -> list[tuple[str, str]]:
    """Every ``.py`` file of the standard library as (path, text), in path order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            continue
        try:
            found.append((str(path.relative_to(root)), path.read_text(encoding="utf-8")))
        except (UnicodeDecodeError, OSError):
            continue
    return found


def write_table(
    catalog, name: str, texts: list[tuple[str, str]], megabytes: int, row_group_rows: int | None = None
) -> int:
    """A document table of ``megabytes`` of source (the library repeated under new ids if needed), in
    files of 8 MB; in row groups of ``row_group_rows`` documents if given (else one a file)."""
    import pyarrow as pa

    from lakehouse.catalog import ensure_table
    from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

    table = ensure_table(catalog, ("bench", name), DOCUMENT_SCHEMA)
    if row_group_rows:
        with table.transaction() as transaction:
            transaction.set_properties({"write.parquet.row-group-limit": str(row_group_rows)})
        table = catalog.load_table(("bench", name))
    rows, size, copy = [], 0, 0
    while size < megabytes * 1e6:
        for path, text in texts:
            n = len(text.encode("utf-8"))
            doc_id = hashlib.sha256(f"{copy}:{path}".encode()).hexdigest()[:32]
            rows.append(
                {"doc_id": doc_id, "source": "code", "text": text, "path": path, "lang": "python", "n_bytes": n}
            )
            size += n
            if size >= megabytes * 1e6:
                break
        copy += 1
    schema = arrow_schema(DOCUMENT_SCHEMA)
    files = max(1, round(size / FILE_BYTES))
    per_file = -(-len(rows) // files)
    for start in range(0, len(rows), per_file):
        table.append(pa.Table.from_pylist(rows[start : start + per_file], schema=schema))
    return size
