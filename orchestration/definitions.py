"""The Dagster definitions of a factory: ``dagster dev -m orchestration.definitions``.

The factory definition is the file ``$FACTORY_DEFINITION`` names, else ``factory.toml`` in the
working folder, else the demo's (``configs/demo-factory.toml``, whose corpus ``factory demo``
builds). A bad file fails the code location with the same ``error`` the commands print.
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestration.definition_load import load_definition
from orchestration.graph import build_definitions

DEMO = Path(__file__).resolve().parent.parent / "configs" / "demo-factory.toml"
ENV = "FACTORY_DEFINITION"


def definition_path() -> Path:
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    local = Path("factory.toml")
    return local if local.is_file() else DEMO


defs = build_definitions(load_definition(definition_path()))
