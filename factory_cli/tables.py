"""Looking around: ``factory tables``, ``snapshots``, ``show`` and ``tag``."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from factory_cli.arguments import table_identifier
from factory_cli.text import format_columns
from lakehouse.catalog import list_tables, load_catalog, load_table, resolve
from lakehouse.commit import summary_properties
from lakehouse.errors import InvalidIdentifierError
from lakehouse.publish import delete_tag, tag_snapshot
from lakehouse.refs import PinnedRef, format_identifier, parse_identifier, validate_tag_name

PREVIEW_CHARS = 60
# The most rows `show -n` takes: pyarrow counts rows in int64 (the scan's limit, the slice).
MAX_ROWS = 2**63 - 1


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "snapshots":
        parser.add_argument("table", type=table_identifier, metavar="NS.TABLE")
        parser.add_argument("--json", action="store_true", help="print JSON for machines")
    elif name == "show":
        parser.add_argument("ref", metavar="NS.TABLE[@REF]")
        parser.add_argument("-n", type=_row_count, default=10, help="how many rows (default: 10)")
        parser.add_argument("--json", action="store_true", help="print rows as JSON lines, text in full")
    elif name == "tag":
        parser.add_argument("ref", metavar="NS.TABLE[@REF]", help="the snapshot to name; with --delete, the table")
        # No argparse type: a name refused for --delete is told why it is not removed, not to choose another.
        parser.add_argument("name", metavar="NAME", help="the tag (not 'main' nor audit-*, the jobs' branches)")
        change = parser.add_mutually_exclusive_group()
        change.add_argument("--force", action="store_true", help="move the tag if it already exists")
        change.add_argument(
            "--delete",
            action="store_true",
            help="remove the tag NAME of the table (not a branch); its snapshot stays until expired, and "
            "manifests pinned through the tag keep their snapshot ids",
        )


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog, read_only=args.command != "tag")
    if args.command == "tables":
        print(format_tables(catalog))
    elif args.command == "snapshots":
        table = load_table(catalog, args.table)
        if args.json:
            print(json.dumps([snapshot_record(table, s) for s in table.snapshots()], indent=2))
        else:
            print(format_snapshots(table, format_identifier(args.table)))
    elif args.command == "show":
        table, pinned = resolve(catalog, args.ref)
        print(format_rows(table, pinned, args.n, as_json=args.json))
    elif args.command == "tag":
        print(_delete_tag(catalog, args) if args.delete else _tag(catalog, args))
    return 0


def _tag(catalog: Catalog, args: argparse.Namespace) -> str:
    validate_tag_name(args.name)  # before the table is read: a name no tag may take is refused first
    table, pinned = resolve(catalog, args.ref)
    tag_snapshot(table, pinned, args.name, force=args.force)
    return f"tagged {pinned} as {pinned.table_name}@{args.name}"


def _delete_tag(catalog: Catalog, args: argparse.Namespace) -> str:
    if "@" in args.ref:
        # A tag belongs to the table, not to a snapshot: `t@v1 v1` would read as "the tag at v1".
        table_part = args.ref.partition("@")[0]
        raise InvalidIdentifierError(
            f"{args.ref}: --delete takes a table, not a pinned snapshot; e.g. `factory tag {table_part} "
            f"{args.name} --delete`"
        )
    identifier = parse_identifier(args.ref)
    was = delete_tag(catalog, identifier, args.name)
    return f"removed tag {args.name} of {format_identifier(identifier)} (was snapshot {was})"


def format_tables(catalog: Catalog) -> str:
    rows = [("TABLE", "SNAPSHOT", "RECORDS", "FILES", "REFS")]
    for identifier in list_tables(catalog):
        table = catalog.load_table(identifier)
        current = table.current_snapshot()
        summary = summary_properties(current) if current else {}
        # A ref at another snapshot than the one shown says which: `production` alone would read as this one.
        refs = ",".join(
            name if current is not None and ref.snapshot_id == current.snapshot_id else f"{name}@{ref.snapshot_id}"
            for name, ref in sorted(table.metadata.refs.items())
            if name != "main"
        )
        rows.append(
            (
                format_identifier(identifier),
                str(current.snapshot_id) if current else "-",
                summary.get("total-records", "0"),
                summary.get("total-data-files", "0"),
                refs or "-",
            )
        )
    if len(rows) == 1:
        return "no tables yet; `factory ingest --help` shows how to make one"
    return format_columns(rows)


def snapshot_record(table: Table, snapshot: Snapshot) -> dict[str, object]:
    """A snapshot with its refs and ``factory.*`` lineage, decoded from its summary."""
    summary = summary_properties(snapshot)
    factory = {k.removeprefix("factory."): v for k, v in summary.items() if k.startswith("factory.")}
    for key in ("inputs", "params"):
        if key in factory:
            factory[key] = json.loads(factory[key])
    stats = {k.removeprefix("stats."): int(v) for k, v in list(factory.items()) if k.startswith("stats.")}
    factory = {k: v for k, v in factory.items() if not k.startswith("stats.")}
    return {
        "snapshot_id": snapshot.snapshot_id,
        "parent_id": snapshot.parent_snapshot_id,
        "committed_at": datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).isoformat(timespec="seconds"),
        "operation": snapshot.summary.operation.value if snapshot.summary else None,
        "refs": sorted(name for name, ref in table.metadata.refs.items() if ref.snapshot_id == snapshot.snapshot_id),
        "added_records": int(summary.get("added-records", 0)),
        "total_records": int(summary.get("total-records", 0)),
        "factory": factory,
        "stats": stats,
    }


def format_snapshots(table: Table, label: str | None = None) -> str:
    """``table``'s snapshots, oldest first; ``label`` names it (default: the identifier it was loaded by)."""
    snapshots = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    if not snapshots:
        return f"{label or format_identifier(table.name())} has no snapshots yet"
    blocks = []
    for snapshot in snapshots:
        rec = snapshot_record(table, snapshot)
        refs = f"  [{', '.join(rec['refs'])}]" if rec["refs"] else ""
        head = f"{rec['snapshot_id']}  {rec['committed_at']}  {rec['operation']}  +{rec['added_records']} records{refs}"
        lines = [head]
        factory = rec["factory"]
        if factory:
            lines.append("    " + _made_by(factory))
            for entry in factory.get("inputs", []):
                lines.append(f"    input {_describe_input(entry)}")
            if rec["stats"]:
                lines.append("    stats " + ", ".join(f"{k}={v}" for k, v in rec["stats"].items()))
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def _made_by(factory: dict) -> str:
    """``job J  run R  code C``, leaving out what the snapshot does not record (the empty root
    snapshot a first audit branch needs has a job and a note, no run)."""
    named = [("job", "job"), ("run", "run-id"), ("code", "code-version")]
    parts = [f"{label} {factory[key]}" for label, key in named if factory.get(key) is not None]
    if factory.get("note"):
        parts.append(f"({factory['note']})")
    return "  ".join(parts)


def _describe_input(entry: dict) -> str:
    if "table" in entry:
        return f"{entry['table']}@{entry['snapshot_id']}" + (f" (ref {entry['ref']})" if "ref" in entry else "")
    return ", ".join(f"{k}={v}" for k, v in entry.items())


def _row_count(text: str) -> int:
    """An argparse type for ``show -n``: a whole number that pyarrow's int64 row counts can hold."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of rows, got {text!r}") from None
    if not 0 <= value <= MAX_ROWS:
        raise argparse.ArgumentTypeError(f"must be a number of rows from 0 to {MAX_ROWS}, got {text}")
    return value


def format_rows(table: Table, pinned: PinnedRef, n: int, *, as_json: bool) -> str:
    """The first ``n`` rows of ``pinned`` (``n`` bounded by ``_row_count``, the argparse type of ``-n``)."""
    rows = table.scan(snapshot_id=pinned.snapshot_id, limit=n).to_arrow().slice(0, n).to_pylist()
    if as_json:
        return "\n".join(json.dumps(row, default=_json_default) for row in rows)
    header = f"{pinned} ({len(rows)} row(s) shown)"
    if not rows:
        return header
    columns = list(rows[0])
    body = [tuple(columns)] + [tuple(_preview(row[c]) for c in columns) for row in rows]
    return header + "\n" + format_columns(body)


def _preview(value: object) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = "" if value is None else str(value)
    text = text.replace("\n", "⏎").replace("\t", " ")
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _json_default(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)
