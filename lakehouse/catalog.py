"""One way to reach the Iceberg catalog: embedded SQLite by default, any pyiceberg catalog by name.

With no configuration the factory keeps its lakehouse under ``$FACTORY_HOME`` (default
``./.factory``): a pyiceberg SQL catalog in ``catalog.db`` and the warehouse beside it. Naming a
catalog (``--catalog NAME`` or ``FACTORY_CATALOG``) loads it from standard pyiceberg
configuration (``.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<NAME>__*``), so the same jobs run
against PostgreSQL, REST, Glue or Hive catalogs and object storage.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.catalog import load_catalog as _pyiceberg_load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError, ProgrammingError

from lakehouse.errors import CatalogConfigError, InputError, TableNotFoundError, UnsupportedSnapshotError
from lakehouse.redact import password_pieces, redact_with
from lakehouse.refs import PinnedRef, TableRef, format_identifier, resolve_snapshot_id

EMBEDDED_CATALOG_NAME = "factory"

# Our commit loop re-checks run-id ancestry before every retry (commit.py); pyiceberg's own
# retry would re-apply the append without that check, so tables we create leave retries to us.
TABLE_PROPERTIES = {"commit.retry.num-retries": "0"}

# pyiceberg creates a SQL catalog's own tables, a namespace's row and a table's row by "look,
# then create": of two processes doing it at once on a fresh catalog, the one that loses meets
# the other's work as a raw database error (sqlite "table iceberg_tables already exists" or
# "database is locked", PostgreSQL's unique violation). Looking again then finds it made.
_CREATION_RACE = (IntegrityError, OperationalError, ProgrammingError)
_CREATION_TRIES = 5

_T = TypeVar("_T")


def factory_home() -> Path:
    """The embedded lakehouse's folder: ``$FACTORY_HOME`` or ``./.factory``."""
    return Path(os.environ.get("FACTORY_HOME", ".factory")).resolve()


def embedded_catalog_properties(home: Path | None = None) -> dict[str, str]:
    """The pyiceberg properties of the embedded SQLite catalog under ``home``."""
    home = home or factory_home()
    return {
        "type": "sql",
        "uri": f"sqlite:///{home / 'catalog.db'}",
        "warehouse": (home / "warehouse").as_uri(),
    }


def load_catalog(name: str | None = None, *, read_only: bool = False) -> Catalog:
    """The catalog named ``name`` (or ``$FACTORY_CATALOG``), else the embedded one. ``read_only``:
    for commands that only look (``factory tables``, ``decisions``), an embedded catalog that does
    not exist yet is an empty one in memory, rather than a lakehouse made in whatever folder they
    were run from."""
    name = name or os.environ.get("FACTORY_CATALOG") or None
    if name is None:
        home = factory_home()
        properties = embedded_catalog_properties(home)
        if read_only and not (home / "catalog.db").is_file():
            properties["uri"] = "sqlite:///:memory:"
        else:
            (home / "warehouse").mkdir(parents=True, exist_ok=True)
        try:
            return _race_safe(lambda: _pyiceberg_load_catalog(EMBEDDED_CATALOG_NAME, **properties))
        except DatabaseError as exc:  # "file is not a database": a damaged or foreign catalog.db
            raise CatalogConfigError(
                f"the embedded catalog {home / 'catalog.db'} cannot be read: {exc.orig}. Restore it from a copy, "
                "or set FACTORY_HOME to another folder (a new one starts an empty lakehouse)"
            ) from None
    configuration = _configuration(name)
    if not configuration and not os.environ.get("PYICEBERG_URI"):  # pyiceberg: "provide using --uri", no flag of ours
        raise CatalogConfigError(
            f"no catalog named {name!r} is configured: configure it in ~/.pyiceberg.yaml (or $PYICEBERG_HOME) or with "
            f"PYICEBERG_CATALOG__{name.upper()}__* variables, or leave --catalog/FACTORY_CATALOG unset to use the "
            "embedded SQLite catalog."
        )
    try:
        return _race_safe(lambda: _pyiceberg_load_catalog(name, **configuration))
    except Exception as exc:  # pyiceberg raises ValueError, ImportError, connection errors…
        # pyiceberg's and SQLAlchemy's messages may repeat the URI, password included: redacted,
        # and not chained (a printed traceback would show the original message).
        uri = str(configuration.get("uri", ""))
        encode = (
            " A password holding '@', ':' or '/' must be percent-encoded in the URI (%40, %3A, %2F)."
            if any("@" in piece for piece in password_pieces(uri))
            else ""
        )
        raise CatalogConfigError(
            f"cannot load catalog {name!r}: {type(exc).__name__}: {redact_with(str(exc), uri)}\n"
            f"Configure it in ~/.pyiceberg.yaml or with PYICEBERG_CATALOG__{name.upper()}__* variables, "
            f"or leave --catalog/FACTORY_CATALOG unset to use the embedded SQLite catalog.{encode}"
        ) from None


def _configuration(name: str) -> dict:
    """The catalog's pyiceberg configuration as it is now: pyiceberg reads its variables and
    ``.pyiceberg.yaml`` once, when first imported, and a process that configured a catalog since
    (a test, a notebook) would not find it."""
    from pyiceberg.utils.config import Config

    return dict(Config().get_catalog_config(name) or {})


def load_table(catalog: Catalog, identifier: tuple[str, ...]) -> Table:
    """The table, or a clear error naming it and how to see what exists."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError as exc:
        raise TableNotFoundError(
            f"table {format_identifier(identifier)} does not exist; `factory tables` lists the tables"
        ) from exc


def ensure_table(catalog: Catalog, identifier: tuple[str, ...], schema: Schema) -> Table:
    """Create the table (and its namespace) if missing; safe when two jobs race to create it.

    An existing table that lacks some of ``schema``'s columns gains them (schema evolution by
    name; rows written before read them as null), so a job can add optional columns to a
    table another job made.
    """
    _race_safe(lambda: catalog.create_namespace_if_not_exists(identifier[:-1]))
    try:
        return _race_safe(lambda: catalog.create_table(identifier, schema, properties=TABLE_PROPERTIES))
    except TableAlreadyExistsError:
        pass
    for _ in range(8):
        table = catalog.load_table(identifier)
        _refuse_required_extras(table, schema, identifier)
        have = {f.name for f in table.schema().fields}
        if all(f.name in have for f in schema.fields):
            return table
        try:
            with table.update_schema() as update:
                update.union_by_name(schema)
        except CommitFailedException:  # another writer changed the table first: look again
            continue
        except ValueError as exc:  # pyiceberg's word for columns that cannot be merged
            raise _other_columns(identifier, exc) from None
    return catalog.load_table(identifier)


def _refuse_required_extras(table: Table, schema: Schema, identifier: tuple[str, ...]) -> None:
    """A job writes ``schema``'s columns; an existing table's other columns read null in its rows,
    which a required column cannot (a filter of raw documents into a table a dedup's output made)."""
    names = {f.name for f in schema.fields}
    extra = [f.name for f in table.schema().fields if f.required and f.name not in names]
    if extra:
        raise InputError(
            f"table {format_identifier(identifier)} exists with required column(s) {', '.join(extra)} that this "
            "output does not have: write to another table"
        )


def check_table_takes(catalog: Catalog, identifier: tuple[str, ...], schema: Schema) -> None:
    """Refuse (``InputError``), creating and changing nothing, an existing table that
    ``ensure_table`` could not give ``schema``'s columns: a job checks all its outputs so before
    it makes any, so a refusal leaves no empty table behind."""
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        return
    _refuse_required_extras(table, schema, identifier)
    try:
        table.update_schema().union_by_name(schema)  # planned only: an update is committed on exit or commit()
    except ValueError as exc:
        raise _other_columns(identifier, exc) from None


def _other_columns(identifier: tuple[str, ...], exc: ValueError) -> InputError:
    return InputError(
        f"table {format_identifier(identifier)} exists with other columns than this output needs ({exc}): "
        "write to another table"
    )


def _race_safe(create: Callable[[], _T]) -> _T:
    """``create()``, tried again after a short wait when it lost a creation race (``_CREATION_RACE``)."""
    for attempt in range(1, _CREATION_TRIES):
        try:
            return create()
        except _CREATION_RACE:
            time.sleep(0.05 * 2**attempt * (1 + random.random()))
    return create()


def resolve(catalog: Catalog, text: str) -> tuple[Table, PinnedRef]:
    """Parse and resolve ``namespace.table[@REF]`` to its table and snapshot id."""
    parsed = TableRef.parse(text)
    table = load_table(catalog, parsed.identifier)
    snapshot_id = resolve_snapshot_id(table, parsed.ref, parsed.table_name)
    return table, PinnedRef(parsed.identifier, snapshot_id, parsed.ref)


def snapshot_schema(table: Table, snapshot_id: int) -> Schema:
    """The schema the snapshot was written with (the table's current one if it names none)."""
    snapshot = table.snapshot_by_id(snapshot_id)
    return table.schemas().get(snapshot.schema_id, table.schema()) if snapshot else table.schema()


def plan_snapshot(
    table: Table, snapshot_id: int, label: str, row_filter: BooleanExpression | None = None
) -> list[FileScanTask]:
    """The scan tasks of a snapshot, refusing one with delete files (their rows would come back)."""
    tasks = list(table.scan(snapshot_id=snapshot_id, row_filter=row_filter or AlwaysTrue()).plan_files())
    for task in tasks:
        if task.delete_files:
            raise UnsupportedSnapshotError(
                f"{label}@{snapshot_id} has delete files (row-level deletes), which this job cannot apply; "
                "rewrite the table without deletes (e.g. a compaction) and pin the new snapshot"
            )
    return tasks


def list_tables(catalog: Catalog) -> list[tuple[str, ...]]:
    """Every table in every namespace (nested namespaces included), sorted."""
    found, pending = [], list(catalog.list_namespaces())
    while pending:
        namespace = pending.pop()
        found.extend(catalog.list_tables(namespace))
        pending.extend(catalog.list_namespaces(namespace))
    return sorted(tuple(t) for t in found)
