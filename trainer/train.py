"""The train loop: ``torchrun --nproc-per-node N -m trainer.train --config FILE``.

Each step consumes exactly one global batch from the streaming loader (this rank's share),
so the data a run sees is a function of the pinned manifest and the step, whatever the number
of ranks. Without torchrun it runs as one plain, unsharded process.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lakehouse.faults import maybe_fail
from lakehouse.version import code_version
from streaming_loader.loader import IGNORE_INDEX, StreamingLoader
from trainer import checkpoint
from trainer.config import Config, load_config
from trainer.data import build_eval_loader, build_loader, eval_rows, lineage_base, merge_loader_states
from trainer.metrics import MetricsLog, export_eval, export_step, say_fresh_start, serve_prometheus
from trainer.model import Transformer
from trainer.parallel import World, all_reduce_sum, apply_compile, apply_fsdp, compute_dtype
from trainer.rank_main import rank_main
from trainer.resume import check_run_dir, resolve_vocab_size
from trainer.schedule import warmup_cosine
from trainer.tracking import TrainingTracker, checkpoint_tags, run_params, run_tags, tracking_uri


def build_model(cfg: Config, world: World) -> nn.Module:
    """Same seeded weights on every rank, then compiled and sharded as configured."""
    model = Transformer(cfg.model)
    model.init_weights(cfg.run.seed)
    model.to(world.device)
    if cfg.train.compile:
        apply_compile(model)
    if world.mesh is not None:
        apply_fsdp(model, world.mesh, compute_dtype(cfg.train.dtype, world.device))
    return model


def token_losses(model: nn.Module, batch: dict[str, torch.Tensor], dtype: torch.dtype, device: torch.device):
    """Sum of per-token cross-entropy over the batch and the number of tokens counted."""
    input_ids = batch["input_ids"].to(device)
    labels = batch["labels"].to(device)
    position_ids = batch.get("position_ids")
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        logits = model(input_ids, None if position_ids is None else position_ids.to(device))
    loss_sum = F.cross_entropy(
        logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return loss_sum, (labels != IGNORE_INDEX).sum()


def train_step(model: nn.Module, batch: dict[str, torch.Tensor], cfg: Config, world: World) -> float:
    """Forward and backward over this rank's share of one global batch; returns the global mean loss.

    The loss is normalised by the token count of the whole global batch, so gradients (and
    losses) do not depend on how the batch was split over ranks and micro-batches.
    """
    dtype = compute_dtype(cfg.train.dtype, world.device)
    rows = batch["input_ids"].shape[0]
    micro = cfg.train.micro_batch_size or rows
    tokens = all_reduce_sum((batch["labels"] != IGNORE_INDEX).sum().to(world.device), world)
    total = torch.zeros((), device=world.device)
    chunks = list(range(0, rows, micro))
    for i, start in enumerate(chunks):
        if hasattr(model, "set_requires_gradient_sync"):  # FSDP: reduce gradients once, on the last chunk
            model.set_requires_gradient_sync(i == len(chunks) - 1)
        part = {k: v[start : start + micro] for k, v in batch.items()}
        loss_sum, _ = token_losses(model, part, dtype, world.device)
        # FSDP averages gradients over ranks; scaling by the world size turns that into a sum.
        (loss_sum * world.size / tokens).backward()
        total += loss_sum.detach()
    return (all_reduce_sum(total, world) / tokens).item()


def clip_gradients(model: nn.Module, max_norm: float) -> float:
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
    if hasattr(norm, "full_tensor"):  # a DTensor under FSDP
        norm = norm.full_tensor()
    return norm.item()


@torch.no_grad()
def evaluate(
    model: nn.Module, cfg: Config, world: World, token_bytes: torch.Tensor | None = None
) -> dict[str, dict[str, float]]:
    """Held-out loss and perplexity per mixture component, over the same fixed batches each time.

    ``token_bytes`` (bytes of each token id's text): also count the ``bytes`` the scored tokens hold."""
    model.eval()
    dtype = compute_dtype(cfg.train.dtype, world.device)
    loader = build_eval_loader(cfg, world)
    names = loader.components
    sums = torch.zeros(len(names), dtype=torch.float64, device=world.device)
    counts = torch.zeros(len(names), dtype=torch.float64, device=world.device)
    nbytes = torch.zeros(len(names), dtype=torch.float64, device=world.device)
    try:
        for _, whole in zip(range(cfg.eval.batches), loader, strict=False):
            batch = eval_rows(whole, world)
            labels = batch["labels"].to(world.device)
            position_ids = batch.get("position_ids")
            with torch.autocast(world.device.type, dtype=dtype, enabled=dtype != torch.float32):
                logits = model(
                    batch["input_ids"].to(world.device), None if position_ids is None else position_ids.to(world.device)
                )
            losses = F.cross_entropy(
                logits.float().transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none"
            )
            rows = batch["components"].to(world.device)
            sums.index_add_(0, rows, losses.sum(dim=1).double())
            counts.index_add_(0, rows, (labels != IGNORE_INDEX).sum(dim=1).double())
            if token_bytes is not None:
                scored = token_bytes.to(world.device)[labels.clamp(min=0)].masked_fill(labels == IGNORE_INDEX, 0)
                nbytes.index_add_(0, rows, scored.sum(dim=1).double())
    finally:
        loader.close()
    all_reduce_sum(sums, world)
    all_reduce_sum(counts, world)
    if token_bytes is not None:
        all_reduce_sum(nbytes, world)
    model.train()
    results = {}
    for i, name in enumerate(names):
        if counts[i] > 0:
            loss = (sums[i] / counts[i]).item()
            results[name] = {"loss": loss, "ppl": math.exp(min(loss, 50.0)), "tokens": int(counts[i].item())}
            if token_bytes is not None:
                results[name]["bytes"] = int(nbytes[i].item())
    return results


def train(cfg: Config, world: World, resume: bool = False) -> list[float]:
    """Run (or continue) training; returns the losses of the steps this call ran."""
    serve_prometheus(cfg.run.metrics_port, cfg.run.metrics_host, world.local_rank)
    # Started first: MLflow's import (seconds) runs in the tracker's thread while the loader starts.
    tracker = TrainingTracker(tracking_uri(cfg.mlflow.tracking_uri), Path(cfg.run.dir)) if tracked(cfg, world) else None
    try:
        loader = checked_loader(cfg, world, resume)
    except BaseException:
        if tracker is not None:
            tracker.close("FAILED")  # no run was made yet: this only ends its thread
        raise
    # Both are closed however the run ends (the `with` is their `finally`): an error or Ctrl-C
    # mid-run must not leave Ray pipelines running, the metrics file open or the MLflow run RUNNING.
    with loader, MetricsLog(Path(cfg.run.dir), world.is_main, cfg.train.steps, tracker) as metrics:
        return _train(cfg, world, resume, loader, metrics)


def checked_loader(cfg: Config, world: World, resume: bool) -> StreamingLoader:
    """This rank's training loader, once the start is checked against the tokenizer and the run
    folder (``trainer.resume``): again on every rank, as ``factory train`` checked before torchrun,
    for a plain ``python -m trainer.train``. A refused start closes the loader (its Ray readers)."""
    loader, vocab_size = build_loader(cfg, world)
    try:
        resolve_vocab_size(cfg, vocab_size)
        check_run_dir(cfg, resume, loader.manifest.fingerprint, loader.tokenizer.sha256)
    except BaseException:
        loader.close()
        raise
    return loader


def tracked(cfg: Config, world: World) -> bool:
    """Whether this process logs the run to MLflow: rank 0, when ``mlflow.enabled``."""
    return world.is_main and cfg.mlflow.enabled


def _train(cfg: Config, world: World, resume: bool, loader: StreamingLoader, metrics: MetricsLog) -> list[float]:
    run_dir = Path(cfg.run.dir)
    model = build_model(cfg, world)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(cfg.optim, cfg.train.steps))

    step = 0
    latest = checkpoint.latest_checkpoint(run_dir) if resume else None
    if latest is not None:
        resumed = checkpoint.load(latest[1], model, optimizer, scheduler, world)
        loader.load_state_dict(merge_loader_states(resumed.loader_states, world))
        step = resumed.step
    elif resume and world.is_main:
        say_fresh_start(run_dir)

    lineage = lineage_base(cfg, loader) if world.is_main else {}
    tracker = metrics.tracker
    if world.is_main:
        (run_dir / "config.resolved.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=list))
        if tracker is not None:
            tracker.start(cfg.mlflow.experiment, run_params(cfg.to_dict()), run_tags(run_dir, lineage, world.size))
        metrics.log(step, "start", {"params": model_params(model), "world": world.size, "resumed": latest is not None})
        if step >= cfg.train.steps:  # a finished run resumed, or train.steps lowered below its checkpoint
            print(nothing_to_train(run_dir, step, cfg.train.steps), file=sys.stderr)

    losses = []
    heldout: dict[str, dict[str, float]] = {}
    batches: Iterator[dict[str, torch.Tensor]] = iter(loader)
    while step < cfg.train.steps:
        started = time.perf_counter()
        batch = next(batches)
        waited = time.perf_counter() - started
        loss = train_step(model, batch, cfg, world)
        grad_norm = clip_gradients(model, cfg.train.grad_clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        losses.append(loss)
        elapsed = time.perf_counter() - started
        tokens = cfg.data.global_batch_size * cfg.data.seq_len
        export_step(step, loss, lr, tokens, elapsed, waited)
        metrics.log(
            step,
            "train",
            {
                "loss": loss,
                "lr": lr,
                "grad_norm": grad_norm,
                "tokens_per_s": tokens / elapsed,
                "data_wait_frac": waited / elapsed,
                "peak_mem_gb": peak_memory_gb(world.device),
            },
        )
        maybe_fail(f"after-step-{step}")
        last = step == cfg.train.steps
        if cfg.eval.every and (step % cfg.eval.every == 0 or last):
            heldout = evaluate(model, cfg, world)
            export_eval(heldout)
            metrics.log(step, "eval", heldout)
        if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or last:
            state = loader.state_dict()
            tracked_run = tracker.reference() if tracker is not None else None
            record = lineage_record(lineage, run_dir, step, state, cfg, tracked_run) if world.is_main else {}
            checkpoint.save(run_dir, step, model, optimizer, scheduler, state, record, world, cfg.checkpoint.keep)
            if tracker is not None:
                tracker.set_tags(checkpoint_tags([path for _, path in checkpoint.complete_checkpoints(run_dir)]))
    if losses and world.is_main:  # the run's result, on stdout as every command's (kept under -q)
        print(finished(run_dir, step, losses[-1], heldout), flush=True)
    return losses


def finished(run_dir: Path, step: int, loss: float, heldout: dict[str, dict[str, float]]) -> str:
    """The line a run that trained ends with: its last step's loss and held-out losses, and the
    checkpoint to give ``factory lineage``, ``eval`` and ``export``."""
    line = f"trained to step {step}: loss {loss:.4g}"
    if heldout:
        line += ", held-out loss " + ", ".join(f"{name} {values['loss']:.4g}" for name, values in heldout.items())
    return f"{line}; checkpoint {checkpoint.step_dir(run_dir, step)}"


def nothing_to_train(run_dir: Path, step: int, steps: int) -> str:
    """What a resume that trains no step says (it ends as a finished run does, exit status 0)."""
    if step == steps:
        return f"nothing to train: {run_dir} already finished its {steps} steps (raise train.steps to train on)"
    return (
        f"nothing to train: {run_dir}'s newest checkpoint is at step {step}, past train.steps {steps}; "
        f"no step ran and no checkpoint was written (raise train.steps above {step} to train on)"
    )


def peak_memory_gb(device: torch.device) -> float:
    """Peak memory so far: the device's allocated memory on a GPU, the process's RSS on a CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def model_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters()) if not hasattr(model, "num_params") else model.num_params()


def lineage_record(
    base: dict, run_dir: Path, step: int, loader_state: dict, cfg: Config, tracked_run: dict | None = None
) -> dict:
    """The checkpoint's lineage.json: what data, from where, up to which position of the stream,
    and the MLflow run it was logged to (``tracked_run``), if any.

    The stream is a pure function of the manifest, tokenizer and loader settings, so the index of
    the next global batch places the run exactly; rank 0's full loader state is kept beside it
    (every rank's is in its rank-N.json).
    """
    batch = loader_state.get("batch", step)
    position = {
        "next_global_batch": batch,
        "sequences": batch * cfg.data.global_batch_size,
        # Computed, yet the count of tokens trained on: the trainer's loader packs with concat (it sets
        # no other packing), whose windows are always full, across documents and epochs alike, so no
        # row holds padding and no label is masked (pinned by tests/streaming_loader/test_loader.py).
        "tokens": batch * cfg.data.global_batch_size * cfg.data.seq_len,
        "rank0_state": loader_state,
    }
    record = {
        **base,
        "checkpoint": str(checkpoint.step_dir(run_dir, step)),
        "step": step,
        "loader_position": position,
        "code_version": code_version(),
    }
    return {**record, "mlflow": tracked_run} if tracked_run else record


def main(argv: list[str] | None = None) -> int:
    return rank_main(
        "trainer.train",
        __doc__.split("\n\n")[0],
        load_config,
        lambda cfg, world, resume: train(cfg, world, resume=resume),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
