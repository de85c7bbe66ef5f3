"""Dagster orchestration of the factory: the chain as software-defined assets, and the sensors
that run it by itself (docs/architecture.md, "Orchestration").

    dagster dev -m orchestration.definitions

Every asset runs `factory` commands; Dagster only decides when.
"""
