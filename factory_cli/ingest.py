"""``factory ingest``: its arguments, and the result printed."""

from __future__ import annotations

import argparse

from factory_cli.arguments import add_run_id_argument
from lakehouse.catalog import load_catalog
from lakehouse.refs import parse_identifier
from pipelines.ingest import IngestOptions, IngestResult, ingest
from pipelines.ingest_inputs import FORMATS
from pipelines.ingest_records import RecordConfig
from pipelines.spark_session import get_spark


def add_arguments(parser: argparse.ArgumentParser, _name: str = "ingest") -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="input files or folders (local or URI)")
    parser.add_argument("--source", required=True, help="source name stored with each document, e.g. code, web")
    parser.add_argument("--format", dest="fmt", required=True, choices=FORMATS, help="input format")
    parser.add_argument("--output", required=True, metavar="NS.TABLE", help="document table to append to")
    parser.add_argument(
        "--quarantine", metavar="NS.TABLE", help="where refused records go (default: <namespace>.quarantine)"
    )
    parser.add_argument(
        "--files-table",
        metavar="NS.TABLE",
        help="the ledger of the files each run read (default: <namespace>.ingested_files)",
    )
    parser.add_argument(
        "--only-new-files",
        action="store_true",
        help="skip the files the ledger lists for --output already (same relative path and size)",
    )
    parser.add_argument("--text-field", default="text", help="JSONL/Parquet field with the text (default: text)")
    parser.add_argument("--id-field", help="field with a stable record id (default: the record's file and line)")
    parser.add_argument("--path-field", help="field with the record's path or URL")
    parser.add_argument("--lang-field", help="field with the record's language")
    parser.add_argument(
        "--max-doc-bytes", type=int, default=10 * 1024 * 1024, help="refuse larger documents (default: 10 MiB)"
    )
    parser.add_argument("--include", action="append", default=[], metavar="GLOB", help="only files matching")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip files matching")
    add_run_id_argument(parser)


def options_from_args(args: argparse.Namespace) -> IngestOptions:
    records = RecordConfig(
        source=args.source,
        text_field=args.text_field,
        id_field=args.id_field,
        path_field=args.path_field,
        lang_field=args.lang_field,
        max_doc_bytes=args.max_doc_bytes,
    )
    for name in filter(None, (args.output, args.quarantine, args.files_table)):
        parse_identifier(name)  # a bad table name fails now, not once Spark has started
    return IngestOptions(
        inputs=args.paths,
        fmt=args.fmt,
        output=args.output,
        records=records,
        quarantine=args.quarantine,
        include=args.include,
        exclude=args.exclude,
        run_id=args.run_id,
        files_table=args.files_table,
        only_new_files=args.only_new_files,
    )


def run(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    catalog = load_catalog(args.catalog)
    result = ingest(get_spark("factory-ingest"), catalog, opts)
    print(format_result(result))
    return 0


def format_result(result: IngestResult) -> str:
    s = result.stats
    lines = [f"run {result.run_id}" + (" (already committed: nothing done)" if result.already_committed else "")]
    if s.get("files-skipped") and not s.get("files"):  # one clear line, not a page of zeros: nothing was read
        return "\n".join(
            [*lines, f"  nothing new: {s['files-skipped']} file(s) already ingested into {result.documents.table}"]
        )
    lines += [
        f"  {result.documents.table}@{result.documents.snapshot_id}: {s.get('kept', 0)} documents",
        f"  {result.quarantine.table}@{result.quarantine.snapshot_id}: {s.get('quarantined', 0)} quarantined",
        f"  records in: {s.get('documents-in', 0)} from {s.get('files', 0)} file(s), {s.get('bytes-in', 0) / 1e6:.1f} MB",
    ]
    if s.get("files-skipped"):
        lines.append(f"  skipped: {s['files-skipped']} file(s) already ingested (--only-new-files)")
    reasons = {k.removeprefix("quarantined."): v for k, v in s.items() if k.startswith("quarantined.")}
    if reasons:
        lines.append("  quarantined by reason: " + ", ".join(f"{k}={v}" for k, v in sorted(reasons.items())))
    return "\n".join(lines)
