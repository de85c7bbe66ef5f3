"""Mixture specs, pinning them to manifests, and mixture optimisation."""
