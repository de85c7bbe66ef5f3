"""The ledger of ingested files: one row per input file an ingest run read (docs/jobs.md, "Ingest").

Every ingest commits its rows with its documents and refusals, through the same ``commit_run``.
``factory ingest --only-new-files`` reads the ledger to skip the files it lists for the output
already, by the ``(relpath, size)`` the documents' ids come from: a file whose size changed is
read again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from lakehouse.commit import Run, StagedFile
from lakehouse.parquet import read_columns
from lakehouse.redact import redact
from lakehouse.rows import stage_rows
from lakehouse.schemas import INGESTED_FILES_SCHEMA
from pipelines.ingest_inputs import InputFile

# The ledger's snapshot whose files a run with --only-new-files skipped (absent: the ledger was
# empty, or the run skipped nothing). A retry reuses it, so it reads exactly the files the run read.
INGESTED_FILES = "factory.ingested-files-snapshot"


def ingested(catalog: Catalog, ledger: tuple[str, ...], snapshot_id: int | None, output: str) -> set[tuple[str, int]]:
    """``(relpath, size)`` of every file the ledger's snapshot lists as ingested into ``output``."""
    if snapshot_id is None:
        return set()
    scan = catalog.load_table(ledger).scan(
        row_filter=EqualTo("output", output), selected_fields=("relpath", "size"), snapshot_id=snapshot_id
    )
    listed = scan.to_arrow()
    return set(zip(listed.column("relpath").to_pylist(), listed.column("size").to_pylist(), strict=True))


def split_new(files: Sequence[InputFile], seen: set[tuple[str, int]]) -> tuple[list[InputFile], list[InputFile]]:
    """``files`` as (to read, to skip): a file is skipped when its relpath and size were seen."""
    new = [f for f in files if (f.relpath, f.size) not in seen]
    return new, [f for f in files if (f.relpath, f.size) in seen]


class ListedMeanwhile(Exception):
    """The ledger's commit met rows that another run committed, since this run read the ledger,
    for files this run read too (``files``: their relpath and size; ``head``: the ledger's head
    that showed them). Not a ``FactoryError``: the ingest leaves those files out and commits again."""

    def __init__(self, files: set[tuple[str, int]], head: int | None) -> None:
        super().__init__(f"{len(files)} file(s) recorded by another run meanwhile")
        self.files, self.head = files, head


def files_listed_meanwhile(files: Sequence[InputFile], output: str) -> Callable[[Table, list[str]], None]:
    """The ledger's ``ReadCheck``: raise ``ListedMeanwhile`` for the ``files`` that the ledger's
    data files committed since the run read it list for ``output``."""
    mine = {(f.relpath, f.size) for f in files}

    def validate(table: Table, added: list[str]) -> None:
        listed: set[tuple[str, int]] = set()
        for uri in added if mine else ():
            rows = read_columns(uri, ["relpath", "size"], table.io.properties, [("output", "==", output)])
            listed.update(zip(rows.column("relpath").to_pylist(), rows.column("size").to_pylist(), strict=True))
        if listed & mine:
            raise ListedMeanwhile(listed & mine, table.current_snapshot().snapshot_id)

    return validate


def stage_ledger(table: Table, run: Run, files: Sequence[InputFile], output: str) -> list[StagedFile]:
    """The ledger's rows for the files ``run`` read into ``output``, staged for its commit; none
    for no file (the run still commits, an empty snapshot, so its run id is recorded)."""
    if not files:
        return []
    return [stage_rows(table, INGESTED_FILES_SCHEMA, run, ledger_rows(run.run_id, files, output))]


def ledger_rows(run_id: str, files: Sequence[InputFile], output: str) -> list[dict[str, object]]:
    """One row per file; its URI redacted as the run's ``factory.inputs`` are (a signed URL's
    signature, an object store's keys in the userinfo)."""
    return [
        {"output": output, "relpath": f.relpath, "size": f.size, "uri": redact(f.uri), "run_id": run_id} for f in files
    ]
