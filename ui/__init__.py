"""``factory ui``: a read-only web app over the catalog, run directories and lineage (docs/architecture.md#the-ui)."""
