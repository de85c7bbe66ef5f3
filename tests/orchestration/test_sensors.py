"""The checkpoint sensor on a real run folder, its checkpoints saved by the trainer's own code: one
eval run per checkpoint an eval's cadence covers, never for a partial one, never twice."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import torch
from dagster._core.definitions.sensor_definition import SensorExecutionData

from orchestration.definition_load import load_definition
from orchestration.graph import build_definitions
from orchestration.layout import run_folder, write_current
from tests.orchestration.definitions import two_sources
from trainer import checkpoint
from trainer.config import ModelConfig
from trainer.model import Transformer
from trainer.parallel import World

pytestmark = pytest.mark.engine  # real Dagster

WORLD = World(rank=0, size=1, local_rank=0, device=torch.device("cpu"), mesh=None)
FINAL = 30
EVALS = """
[evals.final]
suites = ["heldout"]
runs = ["small"]
cadence = "final"

[evals.tens]
suites = ["heldout"]
cadence = "checkpoint"
every = 20
"""


def save(run_dir: Path, step: int) -> Path:
    model = Transformer(ModelConfig(preset="tiny", vocab_size=50, max_seq_len=16))
    model.init_weights(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    lineage = {"config": {"train": {"steps": FINAL}}}
    return checkpoint.save(run_dir, step, model, optimizer, scheduler, {}, lineage, WORLD, keep=5)


def partial(run_dir: Path, step: int) -> Path:
    """A save that died before its COMPLETE marker: every file of a real save but that one."""
    path = save(run_dir, step)
    (path / checkpoint.COMPLETE).unlink()
    return path


@pytest.fixture
def sensor(tmp_path, factory_home, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster-home"))
    (tmp_path / "dagster-home").mkdir()
    definition = load_definition(two_sources(tmp_path / "factory", extra=EVALS))
    run_dir = tmp_path / "run"
    write_current(run_folder(definition, "small"), {"run_dir": str(run_dir)})
    defs = build_definitions(definition)
    found = next(s for s in defs.sensors if s.name == "checkpoint_sensor")
    with dg.DagsterInstance.ephemeral() as instance:

        def tick(cursor: str | None) -> SensorExecutionData:
            # As the daemon evaluates it: Dagster checks each request against the sensor's jobs.
            return found.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))

        yield run_dir, tick


def requested(result: SensorExecutionData) -> list[tuple[str, str]]:
    """(eval, step) of each request."""
    return [(r.tags["factory/eval"], Path(r.tags["factory/checkpoint"]).name) for r in result.run_requests]


def test_one_eval_run_per_covered_checkpoint_never_for_a_partial_one_never_twice(sensor):
    run_dir, tick = sensor
    result = tick(None)  # no checkpoints folder yet
    assert not result.run_requests and result.skip_message

    partial(run_dir, 10)
    assert not tick(None).run_requests, "a partial checkpoint must not be evaluated"

    path = save(run_dir, 10)  # the save is redone and completes: only `loss` (every checkpoint) covers step 10
    result = tick(None)
    assert requested(result) == [("loss", "step-10")]
    (request,) = result.run_requests
    assert request.run_key == f"loss:{path}"
    assert request.job_name == "evaluate_loss"
    assert request.run_config["ops"]["evals__loss"]["config"]["checkpoint"] == str(path)
    cursor = result.cursor
    assert json.loads(cursor) == {str(run_dir): 10}
    assert not tick(cursor).run_requests, "the same step must not be evaluated twice"

    partial(run_dir, 20)
    assert not tick(cursor).run_requests
    save(run_dir, 20)
    save(run_dir, FINAL)
    result = tick(cursor)
    assert sorted(requested(result)) == [
        ("final", f"step-{FINAL}"),  # cadence final: the run's last step only
        ("loss", "step-20"),
        ("loss", f"step-{FINAL}"),
        ("tens", "step-20"),  # every 20: not 10, not 30
    ]
    assert not tick(result.cursor).run_requests
