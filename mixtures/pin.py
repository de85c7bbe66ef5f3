"""Pinning: a mixture spec resolved against the catalog into a manifest.

Every ref becomes a snapshot id; the snapshot's data files (pruned by the row filter where the
file statistics allow) are listed with their record and row-group counts, read from each
file's Parquet footer. The loader plans from this alone and never asks the catalog again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema

from lakehouse.catalog import plan_snapshot, resolve, snapshot_schema
from lakehouse.errors import InputError, MixtureSpecError
from lakehouse.parquet import open_parquet
from lakehouse.redact import redact
from lakehouse.schemas import require_columns
from lakehouse.version import code_version
from mixtures import heldout
from mixtures.manifest import ComponentManifest, DataFile, Manifest, no_records
from mixtures.spec import ComponentSpec, MixtureSpec

log = logging.getLogger("factory.mix")

# What the loader reads from every document table.
LOADER_COLUMNS = ("doc_id", "text")


def pin(catalog: Catalog, spec: MixtureSpec) -> Manifest:
    """Resolve every component of ``spec`` to its snapshot and data files."""
    weights = spec.weights
    components = tuple(_pin_component(catalog, c, weights[c.name]) for c in spec.components)
    for component in components:
        if component.record_count == 0 and component.weight > 0:
            raise InputError(no_records(f"component {component.name!r} ({component.label})"))
    return Manifest(
        name=spec.name,
        seed=spec.seed,
        components=components,
        catalog=catalog_provenance(catalog),
        heldout={"method": heldout.METHOD, "salt": heldout.SALT},
        pinned_at=datetime.now(UTC).isoformat(timespec="seconds"),
        code_version=code_version(),
    )


def _pin_component(catalog: Catalog, spec: ComponentSpec, weight: float) -> ComponentManifest:
    table, pinned = resolve(catalog, spec.reference)
    label = f"component {spec.name!r} ({pinned})"
    schema = snapshot_schema(table, pinned.snapshot_id)
    require_columns(schema, LOADER_COLUMNS, label)
    row_filter = bind_filter(spec.filter, schema, label)
    tasks = plan_snapshot(table, pinned.snapshot_id, pinned.table_name, row_filter)
    files = tuple(sorted((_describe(t.file, label, table.io.properties) for t in tasks), key=lambda f: f.path))
    log.info("%s: %d file(s), %d records, weight %.4f", label, len(files), sum(f.record_count for f in files), weight)
    return ComponentManifest(
        name=spec.name,
        table=pinned.table_name,
        snapshot_id=pinned.snapshot_id,
        ref=spec.ref,
        weight=weight,
        files=files,
        schema=json.loads(schema.model_dump_json()),
        filter=spec.filter,
        heldout_fraction=float(spec.heldout_fraction),
    )


def bind_filter(text: str | None, schema: Schema, label: str) -> BooleanExpression:
    """The row filter, checked against the snapshot's schema: unknown columns and bad literals fail here."""
    if text is None:
        return AlwaysTrue()
    try:
        expression = parse(text)
        bind(schema, expression, case_sensitive=True)
        return expression  # scans bind it themselves
    except Exception as exc:  # pyiceberg raises ValueError for unknown fields, TypeError for literals
        columns = ", ".join(f.name for f in schema.fields)
        raise MixtureSpecError(f"{label}: filter {text!r} does not fit the table ({exc}); columns: {columns}") from exc


def _describe(task_file, label: str, io_properties: Mapping[str, str]) -> DataFile:
    path, record_count = task_file.file_path, task_file.record_count
    metadata = open_parquet(path, label, io_properties).metadata
    if metadata.num_rows != record_count:
        raise MixtureSpecError(
            f"{label}: {path} holds {metadata.num_rows} rows but the snapshot says {record_count}; "
            "the file was changed outside Iceberg"
        )
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    text_bytes = sum(
        chunk.total_uncompressed_size
        for group in groups
        for chunk in (group.column(j) for j in range(group.num_columns))
        if chunk.path_in_schema == "text"
    )
    return DataFile(
        path=path,
        record_count=record_count,
        row_groups=tuple(group.num_rows for group in groups),
        text_bytes=text_bytes,
        file_size=task_file.file_size_in_bytes,
    )


def catalog_provenance(catalog: Catalog) -> dict[str, str]:
    """The catalog's name and URI without any credential, for the manifest's record (the loader
    never needs them: it reads data files by URI, and lineage finds the catalog by its name)."""
    found = {"name": catalog.name}
    uri = catalog.properties.get("uri")
    if uri:
        found["uri"] = redact(uri)
    return found
