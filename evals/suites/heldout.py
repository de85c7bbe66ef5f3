"""``heldout``: the loss and the bits per byte on each mixture component's held-out split of the
checkpoint's manifest.

The same computation as the trainer's in-training eval (``trainer.train.evaluate``), run in one
process: the held-out stream is a function of the manifest, tokenizer and batch shape, so the
figures are reproducible (with one logical shard here, the batches are those of a 1-rank run).
Bits per byte are the loss's nats over the UTF-8 bytes of the scored tokens
(``evals/likelihood.py: token_bytes``), in bits: the end-of-document tokens are scored (where a
document ends is part of its text's model), as in the loss, and hold no bytes.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

import torch

from evals.likelihood import token_bytes
from evals.registry import Metric, SuiteOptions, SuiteResult
from trainer.parallel import World
from trainer.train import evaluate

if TYPE_CHECKING:
    from evals.checkpoint_model import LoadedCheckpoint

DESCRIPTION = "loss and bits per byte on each mixture component's held-out split"


def params(options: SuiteOptions) -> dict[str, object]:
    return {}  # the run's own eval.batches, as its lineage recorded them: nothing here to choose


def run(checkpoint: LoadedCheckpoint, options: SuiteOptions) -> SuiteResult:
    config = copy.deepcopy(checkpoint.config)
    world = World(rank=0, size=1, local_rank=0, device=checkpoint.device, mesh=None)
    sizes = torch.from_numpy(token_bytes(checkpoint.tokenizer))
    results = evaluate(checkpoint.model, config, world, token_bytes=sizes)
    checkpoint.model.eval()  # evaluate() leaves the model in training mode for the train loop
    losses = [Metric(f"loss/{name}", r["loss"], r["tokens"]) for name, r in results.items()]
    bpb = [
        Metric(f"bpb/{name}", r["loss"] * r["tokens"] / (math.log(2) * r["bytes"]), r["bytes"])
        for name, r in results.items()
        if r["bytes"]
    ]
    return SuiteResult([*losses, *bpb])
