"""Other weights over the same data: a manifest pinned again from another manifest's snapshots."""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.catalog import Catalog

from lakehouse.errors import ConfigError
from mixtures.manifest import Manifest
from mixtures.pin import pin
from mixtures.spec import ComponentSpec, MixtureSpec


def reweighted_spec(base: Manifest, weights: Mapping[str, float], name: str | None = None) -> MixtureSpec:
    """A spec naming ``base``'s snapshots by id, with ``weights`` (relative) for the components they
    name and the base weights for the others; filters, held-out fractions and the seed unchanged."""
    names = [c.name for c in base.components]
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise ConfigError(f"mixture weights name unknown component(s) {', '.join(unknown)}; the manifest has {names}")
    components = tuple(
        ComponentSpec(
            name=c.name,
            table=c.table,
            weight=float(weights.get(c.name, c.weight)),
            ref=str(c.snapshot_id),
            filter=c.filter,
            heldout_fraction=c.heldout_fraction,
        )
        for c in base.components
    )
    return MixtureSpec(components=components, seed=base.seed, name=name or base.name)


def pin_reweighted(catalog: Catalog, base: Manifest, weights: Mapping[str, float], name: str | None = None) -> Manifest:
    """``base``'s snapshots pinned again (the same files, checked live in the catalog) with other weights."""
    return pin(catalog, reweighted_spec(base, weights, name))
