"""Other weights over the same data: a manifest pinned again from another manifest's snapshots."""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog

from lakehouse.errors import ConfigError
from lakehouse.refs import TableRef
from mixtures.manifest import Manifest
from mixtures.pin import pin
from mixtures.spec import ComponentSpec, MixtureSpec


def reweighted_spec(
    base: Manifest,
    weights: Mapping[str, float],
    name: str | None = None,
    tables: Mapping[str, str] | None = None,
) -> MixtureSpec:
    """A spec naming ``base``'s snapshots by id, with ``weights`` (relative) for the components they
    name and the base weights for the others; filters, held-out fractions and the seed unchanged.
    ``tables`` reads a component from another table or snapshot instead (``ns.table[@ref]``)."""
    tables = dict(tables or {})
    names = [c.name for c in base.components]
    unknown = sorted((set(weights) | set(tables)) - set(names))
    if unknown:
        raise ConfigError(f"unknown component(s) {', '.join(unknown)}; the manifest has {', '.join(names)}")
    components = []
    for c in base.components:
        table, ref = c.table, str(c.snapshot_id)
        if c.name in tables:
            parsed = TableRef.parse(tables[c.name])
            table, ref = parsed.table_name, parsed.ref
        components.append(
            ComponentSpec(
                name=c.name,
                table=table,
                weight=float(weights.get(c.name, c.weight)),
                ref=ref,
                filter=c.filter,
                heldout_fraction=c.heldout_fraction,
            )
        )
    return MixtureSpec(components=tuple(components), seed=base.seed, name=name or base.name)


def pin_reweighted(
    catalog: Catalog,
    base: Manifest,
    weights: Mapping[str, float],
    name: str | None = None,
    tables: Mapping[str, str] | None = None,
) -> Manifest:
    """``base``'s snapshots pinned again (the same files, checked live in the catalog) with other weights."""
    return pin(catalog, reweighted_spec(base, weights, name, tables))
