"""The home page's list of tables: each table's current snapshot, size, job and tags.

Reading it loads every table's metadata, so it is kept per the catalog's state: every table's
metadata file location, read in one query (ui/cache.py). A commit to any table, or a new table,
changes that state and the list is read again on the next request.
"""

from __future__ import annotations

from typing import Any

from cachetools.keys import hashkey

from lakehouse.catalog import list_tables
from lakehouse.commit import summary_properties
from lakehouse.errors import InvalidIdentifierError
from lakehouse.refs import format_identifier, parse_identifier
from ui.cache import CachedCatalog, memo


def table_rows(catalog: CachedCatalog) -> list[dict[str, Any]]:
    state = catalog.current_locations()
    if state is None:  # not a SQL catalog: no cheap way to know that nothing changed
        return _rows(catalog)
    return _kept_rows(catalog, frozenset(state.items()))


@memo(4, key=lambda _catalog, state: hashkey(state))
def _kept_rows(catalog: CachedCatalog, state: frozenset) -> list[dict[str, Any]]:
    return _rows(catalog)


def _rows(catalog: CachedCatalog) -> list[dict[str, Any]]:
    rows = []
    for identifier in list_tables(catalog):
        table = catalog.load_table(identifier)
        current = table.current_snapshot()
        summary = summary_properties(current) if current else {}
        rows.append(
            {
                "name": format_identifier(identifier),
                "readable": _readable(identifier),
                "snapshot": current.snapshot_id if current else None,
                "records": summary.get("total-records", "0"),
                "files": summary.get("total-data-files", "0"),
                "job": summary.get("factory.job", ""),
                "refs": sorted(r for r in table.metadata.refs if r != "main"),
            }
        )
    return rows


def _readable(identifier: tuple[str, ...]) -> bool:
    """The table pages take the factory's own names (``parse_identifier``); a shared catalog may
    hold others (``web-crawl``), listed here but not linked to pages that would refuse them."""
    try:
        return parse_identifier(format_identifier(identifier)) == identifier
    except InvalidIdentifierError:
        return False
