"""Write-audit-publish on real catalogs: branches start at main, main only fast-forwards."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException

from lakehouse.catalog import ensure_table
from lakehouse.errors import PublishRefusedError
from lakehouse.publish import head, is_ancestor, publish, publish_snapshot, start_branch
from lakehouse.schemas import DOCUMENT_SCHEMA, QUARANTINE_SCHEMA, QUARANTINE_SCHEMA_WITH_METRICS, arrow_schema

TABLE = ("out", "docs")


def rows(*ids: str) -> pa.Table:
    docs = [{"doc_id": i, "source": "t", "text": i, "path": None, "lang": None, "n_bytes": len(i)} for i in ids]
    return pa.Table.from_pylist(docs, schema=arrow_schema(DOCUMENT_SCHEMA))


def ids(table, ref: str = "main") -> list[str]:
    snapshot = table.snapshot_by_name(ref)
    return sorted(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().column("doc_id").to_pylist())


def test_a_branch_starts_at_main_and_publishing_fast_forwards(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    table.append(rows("a"))
    before = head(catalog.load_table(TABLE))

    start_branch(catalog, TABLE, "audit-1")
    table = catalog.load_table(TABLE)
    assert head(table, "audit-1") == before  # not a parentless snapshot holding only new files
    table.append(rows("b"), branch="audit-1")
    audited = head(catalog.load_table(TABLE), "audit-1")
    assert ids(catalog.load_table(TABLE)) == ["a"]  # main does not see the audit branch

    result = publish(catalog, TABLE, audited)
    table = catalog.load_table(TABLE)
    assert (head(table), result.previous_main, result.already) == (audited, before, False)
    assert ids(table) == ["a", "b"]
    assert publish(catalog, TABLE, audited).already


def test_an_emptied_branch_replaces_content_but_keeps_ancestry(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    table.append(rows("old-1", "old-2"))
    start_branch(catalog, TABLE, "audit-2", empty=True)
    catalog.load_table(TABLE).append(rows("new"), branch="audit-2")
    table = catalog.load_table(TABLE)
    audited = head(table, "audit-2")
    assert ids(table, "audit-2") == ["new"] and is_ancestor(table, head(table), audited)
    emptied = table.snapshot_by_id(table.snapshot_by_id(audited).parent_snapshot_id)
    assert emptied.summary["factory.note"] == "audit branch emptied: the run's output replaces the content"
    publish(catalog, TABLE, audited)
    assert ids(catalog.load_table(TABLE)) == ["new"]


def test_a_table_without_snapshots_gets_an_empty_root_to_branch_from(catalog):
    ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    start_branch(catalog, TABLE, "audit-3")
    table = catalog.load_table(TABLE)
    root = head(table)
    assert root is not None and head(table, "audit-3") == root and ids(table) == []
    table.append(rows("x"), branch="audit-3")
    publish(catalog, TABLE, head(catalog.load_table(TABLE), "audit-3"))
    assert ids(catalog.load_table(TABLE)) == ["x"]


def test_publish_refuses_when_main_moved_elsewhere(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    table.append(rows("a"))
    start_branch(catalog, TABLE, "audit-4")
    catalog.load_table(TABLE).append(rows("audited"), branch="audit-4")
    audited = head(catalog.load_table(TABLE), "audit-4")
    catalog.load_table(TABLE).append(rows("someone-else"))  # a concurrent writer on main
    moved = head(catalog.load_table(TABLE))

    with pytest.raises(PublishRefusedError, match="not an ancestor"):
        publish(catalog, TABLE, audited)
    table = catalog.load_table(TABLE)
    assert head(table) == moved and head(table, "audit-4") == audited  # main untouched, branch kept


def test_the_ref_update_fails_if_main_moves_between_check_and_commit(catalog):
    table = ensure_table(catalog, TABLE, DOCUMENT_SCHEMA)
    table.append(rows("a"))
    start_branch(catalog, TABLE, "audit-5")
    catalog.load_table(TABLE).append(rows("b"), branch="audit-5")
    stale = catalog.load_table(TABLE)  # the publisher has loaded and will check ancestry on this
    audited = head(stale, "audit-5")
    catalog.load_table(TABLE).append(rows("racer"))  # main moves after the load
    moved = head(catalog.load_table(TABLE))

    # On the stale metadata main still looks like an ancestor, so only the commit-time
    # requirement (AssertRefSnapshotId on main) can stop it.
    assert is_ancestor(stale, head(stale), audited)
    with pytest.raises(CommitFailedException):
        publish_snapshot(stale, audited, "out.docs")
    assert head(catalog.load_table(TABLE)) == moved


def test_ensure_table_adds_missing_optional_columns(catalog):
    old = ensure_table(catalog, ("raw", "quarantine"), QUARANTINE_SCHEMA)
    row = {"doc_id": "d", "source": "s", "stage": "ingest", "reason": "empty", "detail": None, "path": None,
           "record": None, "run_id": "r"}  # fmt: skip
    old.append(pa.Table.from_pylist([row], schema=arrow_schema(QUARANTINE_SCHEMA)))
    evolved = ensure_table(catalog, ("raw", "quarantine"), QUARANTINE_SCHEMA_WITH_METRICS)
    assert [f.name for f in evolved.schema().fields][-2:] == ["filter", "metrics"]
    assert evolved.scan().to_arrow().to_pylist()[0]["filter"] is None  # older rows read null
    # …and the older, narrower schema is satisfied by the wider table without another change.
    again = ensure_table(catalog, ("raw", "quarantine"), QUARANTINE_SCHEMA)
    assert again.metadata.current_schema_id == evolved.metadata.current_schema_id
