"""``heldout``: the loss on each mixture component's held-out split of the checkpoint's manifest.

The same computation as the trainer's in-training eval (``trainer.train.evaluate``), run in one
process: the held-out stream is a function of the manifest, tokenizer and batch shape, so the
figures are reproducible (with one logical shard here, the batches are those of a 1-rank run).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from evals.registry import Metric, SuiteOptions
from trainer.parallel import World
from trainer.train import evaluate

if TYPE_CHECKING:
    from evals.checkpoint_model import LoadedCheckpoint

DESCRIPTION = "loss on each mixture component's held-out split"


def params(options: SuiteOptions) -> dict[str, object]:
    return {}  # the run's own eval.batches, as its lineage recorded them: nothing here to choose


def run(checkpoint: LoadedCheckpoint, options: SuiteOptions) -> list[Metric]:
    config = copy.deepcopy(checkpoint.config)
    world = World(rank=0, size=1, local_rank=0, device=checkpoint.device, mesh=None)
    results = evaluate(checkpoint.model, config, world)
    checkpoint.model.eval()  # evaluate() leaves the model in training mode for the train loop
    return [Metric(f"loss/{name}", r["loss"], r["tokens"]) for name, r in results.items()]
