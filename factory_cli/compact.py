"""``factory compact``: rewrite a table's small data files as fewer, in one Iceberg ``replace``
snapshot (``lakehouse.compact``; docs/architecture.md, "File sizes")."""

from __future__ import annotations

import argparse

from factory_cli.arguments import add_run_id_argument, table_identifier
from lakehouse.catalog import load_catalog
from lakehouse.commit import MAIN_BRANCH
from lakehouse.compact import compact_table

DESCRIPTION = """\
Combine the small data files of a table's branch head (smaller than 75 % of the table's
target file size: the table property write.target-file-size-bytes, default 128 MiB) into
files of about that size, and commit them as one snapshot with Iceberg's `replace`
operation: the same rows, other files. The snapshot records the run (factory.job=compact)
and, as its input, the snapshot it compacted, so `factory lineage` still reaches the runs
that made the data. Older snapshots, and manifests pinned to them, are unchanged.
A file whose row groups are far past the table's row group size (the property
write.parquet.row-group-size-bytes, default 1 MiB; a file written by an older version or
another engine) is rewritten alone, so a compacted table has the layout the jobs write.

Safe to repeat: a table with nothing to combine is left alone, and a retry with the same
--run-id after the commit does nothing; a run id of another job, or of a compaction of another
--branch, is refused (exit 2). A failure before the commit leaves the table as it was."""


def add_arguments(parser: argparse.ArgumentParser, _name: str = "compact") -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("table", type=table_identifier, metavar="NS.TABLE", help="the table to compact")
    parser.add_argument("--branch", default=MAIN_BRANCH, help="the branch whose head to compact (default: main)")
    add_run_id_argument(parser)


def run(args: argparse.Namespace) -> int:
    result = compact_table(load_catalog(args.catalog), args.table, run_id=args.run_id, branch=args.branch)
    if result.snapshot_id is None:
        print(f"{result.table}: {result.files_before} file(s), nothing to combine")
    elif result.already:
        print(f"{result.table}: already compacted by this run as snapshot {result.snapshot_id}")
    else:
        print(
            f"{result.table}: replaced {result.files_rewritten} file(s) ({result.records_rewritten} records) "
            f"by {result.files_after - result.files_before + result.files_rewritten}; "
            f"{result.files_before} → {result.files_after} file(s), snapshot {result.snapshot_id}"
        )
    return 0
