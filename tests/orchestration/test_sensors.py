"""The checkpoint sensor on a real run folder, its checkpoints saved by the trainer's own code."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import torch

from orchestration.sensors import checkpoint_sensor
from orchestration.settings import FactorySettings
from trainer import checkpoint
from trainer.config import ModelConfig
from trainer.model import Transformer
from trainer.parallel import World

pytestmark = pytest.mark.engine  # real Dagster

WORLD = World(rank=0, size=1, local_rank=0, device=torch.device("cpu"), mesh=None)


@pytest.fixture
def dagster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "dagster-home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def save(run_dir: Path, step: int) -> Path:
    model = Transformer(ModelConfig(preset="tiny", vocab_size=50, max_seq_len=16))
    model.init_weights(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return checkpoint.save(run_dir, step, model, optimizer, scheduler, {}, {}, WORLD, keep=5)


def partial(run_dir: Path, step: int) -> Path:
    """A save that died before its COMPLETE marker: every file of a real save but that one."""
    path = save(run_dir, step)
    (path / checkpoint.COMPLETE).unlink()
    return path


def evaluate(run_dir: Path, cursor: str | None, instance) -> dg.SensorResult:
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, resources={"factory": FactorySettings(run_dir=str(run_dir))}
    )
    return checkpoint_sensor(context)


def test_one_eval_run_per_complete_checkpoint_never_for_a_partial_one_never_twice(tmp_path, dagster_home):
    run_dir = tmp_path / "run"
    with dg.DagsterInstance.ephemeral() as instance:
        result = evaluate(run_dir, None, instance)  # no checkpoints folder yet
        assert not result.run_requests and result.skip_reason

        partial(run_dir, 10)
        result = evaluate(run_dir, None, instance)
        assert not result.run_requests, "a partial checkpoint must not be evaluated"

        path = save(run_dir, 10)  # the save is redone and completes
        result = evaluate(run_dir, None, instance)
        assert len(result.run_requests) == 1
        (request,) = result.run_requests
        assert request.run_key == f"{run_dir}:step-10"
        assert request.run_config["ops"]["eval_results"]["config"]["checkpoint"] == str(path)
        assert request.tags["factory/step"] == "10"
        cursor = result.cursor
        assert json.loads(cursor) == {str(run_dir): 10}

        again = evaluate(run_dir, cursor, instance)
        assert not again.run_requests, "the same step must not be evaluated twice"

        partial(run_dir, 20)
        assert not evaluate(run_dir, cursor, instance).run_requests
        save(run_dir, 20)
        save(run_dir, 30)
        result = evaluate(run_dir, cursor, instance)
        assert [r.run_key for r in result.run_requests] == [f"{run_dir}:step-20", f"{run_dir}:step-30"]
        assert not evaluate(run_dir, result.cursor, instance).run_requests
