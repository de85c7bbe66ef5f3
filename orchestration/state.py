"""What the orchestration reads of the lakehouse to decide what is left to do: heads, tags, and
which runs and inputs a table's snapshots record. Read fresh each time; nothing is cached."""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from lakehouse.catalog import load_catalog
from lakehouse.commit import find_run_snapshot, recorded_inputs, run_ids, summary_properties
from lakehouse.refs import parse_identifier

PRODUCTION = "production"  # the tag on a source's final table that training reads


def catalog() -> Catalog:
    """The catalog the `factory` commands use ($FACTORY_CATALOG, else the embedded one)."""
    return load_catalog(None)


def table_or_none(cat: Catalog, table: str) -> Table | None:
    identifier = parse_identifier(table)
    return cat.load_table(identifier) if cat.table_exists(identifier) else None


def head(cat: Catalog, table: str) -> int | None:
    """Main's head snapshot id; None if the table does not exist or has no snapshot."""
    loaded = table_or_none(cat, table)
    ref = None if loaded is None else loaded.metadata.refs.get("main")
    return None if ref is None else ref.snapshot_id


def tagged(cat: Catalog, table: str, tag: str = PRODUCTION) -> int | None:
    """The snapshot id ``tag`` names; None if there is no such tag (or table)."""
    loaded = table_or_none(cat, table)
    ref = None if loaded is None else loaded.metadata.refs.get(tag)
    return None if ref is None else ref.snapshot_id


def committed(cat: Catalog, table: str, run_id: str) -> bool:
    """True when run ``run_id`` has a snapshot in ``table``'s main."""
    loaded = table_or_none(cat, table)
    return loaded is not None and find_run_snapshot(loaded, run_id) is not None


def committed_runs(cat: Catalog, table: str) -> set[str]:
    """The run id of every snapshot in ``table``'s main: one walk for many ``committed`` checks."""
    loaded = table_or_none(cat, table)
    return set() if loaded is None else run_ids(loaded)


def refined_inputs(cat: Catalog, table: str) -> set[tuple[str, int]]:
    """``(table, snapshot id)`` of every input (not ``--against``) a snapshot of ``table``'s main
    was made from: which upstream snapshots this step has already taken in."""
    loaded = table_or_none(cat, table)
    if loaded is None or loaded.current_snapshot() is None:
        return set()
    found = set()
    for snapshot in ancestors_of(loaded.current_snapshot(), loaded.metadata):
        where = f"{table}@{snapshot.snapshot_id}'s factory.inputs"  # another tool's summary: refused naming it
        for item in recorded_inputs(summary_properties(snapshot).get("factory.inputs"), where):
            if item.get("role") != "against" and "snapshot_id" in item:
                found.add((item["table"], int(item["snapshot_id"])))
    return found
