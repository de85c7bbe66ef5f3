"""Mixture specs, and pinning them to manifests of snapshot ids and data files."""
