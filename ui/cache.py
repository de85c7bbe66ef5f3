"""What the UI keeps between requests: each value keyed on all it was made from, each cache bounded.

Three kinds of key, by what a value depends on:

- a pinned snapshot's contents: the table's uuid and the snapshot id (``pinned``). Iceberg never
  changes a snapshot, so these never go stale;
- a table's current state: the location of its metadata file. Each commit writes a new one, so the
  first request after a commit reads the new state (``CachedCatalog`` looks the location up in the
  catalog's database on every load: one indexed row, where parsing the file is the cost);
- a file: its path, size and modification time (``file_key``).

Every cache is an LRU of a fixed number of entries (or bytes), so the server's memory stays flat
however many pages are asked for, and a value being computed is computed once: other requests for
it wait for that result instead of computing it again (twenty people opening the same new
snapshot's quarantine page read it once).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy import bindparam, select

_F = TypeVar("_F", bound=Callable[..., Any])


def memo(
    entries: int, key: Callable[..., Any] = hashkey, weigh: Callable[[Any], int] | None = None
) -> Callable[[_F], _F]:
    """Keep up to ``entries`` results of the function, keyed by ``key`` of its arguments (which must
    stand for everything the result depends on). With ``weigh``, ``entries`` bounds the results'
    total weight instead (a result heavier than that is not kept). Callers must not change a
    result: it is shared."""
    # cachetools' LRU with a condition does the bounding and the "computed once, the others wait";
    # exceptions are not kept, so a failed read is tried again on the next request.
    lock = threading.RLock()
    return cached(LRUCache(entries, getsizeof=weigh), key=key, lock=lock, condition=threading.Condition(lock))


def pinned(table: Table, snapshot_id: int, *args: Any, **kwargs: Any) -> tuple:
    """The key of a value read from one snapshot of ``table`` (and the call's other arguments)."""
    return hashkey(str(table.metadata.table_uuid), snapshot_id, *args, **kwargs)


def file_key(path: Path) -> tuple[str, int, int] | None:
    """(path, size, modification time) of a file, None if there is none: what a value read from it
    is keyed on, so that rewriting or appending to the file is seen on the next request."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return str(path), stat.st_size, stat.st_mtime_ns


class CachedCatalog:
    """A catalog whose tables are loaded once per metadata file.

    ``load_table`` asks the catalog's database where the table's current metadata file is (one
    indexed row) and parses that file only the first time it is seen. Catalogs that are not SQL
    catalogs (REST, Glue, Hive) have no such cheap question: their tables are loaded afresh on
    each call. Everything else is the wrapped catalog's own.
    """

    def __init__(self, catalog: Catalog, tables: int = 64) -> None:
        self._catalog = catalog
        self._where = _SqlLocations(catalog) if isinstance(catalog, SqlCatalog) else None
        # Keyed on the location too: a commit is a new key. (One landing between the lookup and the
        # load keeps a newer state under the older key, never an older one.)
        self._load = memo(tables)(lambda identifier, _location: catalog.load_table(identifier))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)

    def load_table(self, identifier: str | tuple[str, ...]) -> Table:
        identifier = Catalog.identifier_to_tuple(identifier)
        location = self._where(identifier) if self._where else None
        if location is None:  # no such table (the catalog says so in its words), or not a SQL catalog
            return self._catalog.load_table(identifier)
        return self._load(identifier, location)

    def table_exists(self, identifier: str | tuple[str, ...]) -> bool:
        try:
            self.load_table(identifier)
        except NoSuchTableError:
            return False
        return True

    def current_locations(self) -> dict[tuple[str, ...], str] | None:
        """Every table and its metadata file's location, in one query; None if not a SQL catalog."""
        return self._where.everything() if self._where else None


class _SqlLocations:
    """The metadata locations a pyiceberg SQL catalog (SQLite, PostgreSQL) holds, read through its
    own pooled engine."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._engine = catalog.engine
        row = IcebergTables
        self._all = select(row.table_namespace, row.table_name, row.metadata_location).where(
            row.catalog_name == catalog.name
        )
        self._one = self._all.where(row.table_namespace == bindparam("namespace"), row.table_name == bindparam("name"))

    def __call__(self, identifier: tuple[str, ...]) -> str | None:
        namespace, name = Catalog.namespace_to_string(identifier[:-1]), identifier[-1]
        with self._engine.connect() as connection:
            found = connection.execute(self._one, {"namespace": namespace, "name": name}).first()
        return found.metadata_location if found else None

    def everything(self) -> dict[tuple[str, ...], str]:
        with self._engine.connect() as connection:
            rows = connection.execute(self._all).all()
        return {
            (*Catalog.identifier_to_tuple(r.table_namespace), r.table_name): r.metadata_location
            for r in rows
            if r.metadata_location
        }
