"""The Dagster definitions: ``dagster dev -m orchestration.definitions``."""

from __future__ import annotations

import dagster as dg

from orchestration.assets import CHAIN
from orchestration.sensors import checkpoint_sensor, evaluate_checkpoint, raw_snapshot_sensor, refine_code
from orchestration.settings import FactorySettings

factory_chain = dg.define_asset_job("factory_chain", selection=dg.AssetSelection.all(), description="the whole chain")

defs = dg.Definitions(
    assets=CHAIN,
    jobs=[factory_chain, refine_code, evaluate_checkpoint],
    sensors=[checkpoint_sensor, raw_snapshot_sensor],
    resources={"factory": FactorySettings()},
)
