"""The GRPO learner: ``torchrun --nproc-per-node N -m rl.learner --config FILE`` (``factory rl train``).

Each step (docs/rl-training.md):

1. The step's tasks are the next ``tasks_per_step`` of the training tasks in an order shuffled
   afresh each epoch from ``run.seed``; each rank takes its contiguous share.
2. Each rank samples ``group_size`` completions of each of its tasks with the sampler, an
   unsharded copy of the policy's weights (FSDP's sharded forward is a collective, and ranks
   finish generating at different times). A task's samples are drawn from a generator seeded
   by (run.seed, step, task id): the same rollouts whatever the number of ranks, and again after
   a resume.
3. The task source rewards them (the sandbox runs each completion's tests); the control run
   (``grpo.shuffle_rewards``) permutes each group's rewards first, seeded the same way.
4. ``updates_per_batch`` optimizer updates of the sharded policy on the GRPO loss
   (``rl/grpo.py``) over those completions, the KL taken against the frozen starting checkpoint;
   then the sampler takes the new weights, gathered whole.

Every ``eval.every`` steps (and before the first and after the last) the sampler completes the
held-out tasks greedily and their mean reward is logged; every ``checkpoint.every`` steps (and
at the last) the rollouts since the last checkpoint are committed to ``rl.rollouts``
(``rl/rollouts_table.py``), then the policy, optimizer, schedule and RNG are saved as the trainer
saves them, and ``--resume`` continues from the newest complete checkpoint exactly as the run
would have gone.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from evals.checkpoint_model import LoadedCheckpoint, load_checkpoint
from evals.generate import generate_tokens, prompt_tokens
from lakehouse.catalog import load_catalog
from lakehouse.errors import ConfigError
from lakehouse.faults import maybe_fail
from lakehouse.version import code_version
from rl.grpo import group_advantages, grpo_loss, token_logprobs
from rl.lineage import check_run_dir
from rl.rollouts_table import RolloutRecorder, rollout_row
from rl.scored import Scored
from rl.task_source import Task, TaskSource, load_task_source
from rl.train_config import RLConfig, load_rl_config
from trainer import checkpoint
from trainer.metrics import MetricsLog, say_fresh_start
from trainer.parallel import World, all_reduce_sum, apply_fsdp, compute_dtype
from trainer.rank_main import rank_main
from trainer.schedule import warmup_cosine
from trainer.train import clip_gradients

# Rows per forward when generating: a rank's whole share of a step in one or two batches.
GENERATE_ROWS = 64


@dataclass
class Models:
    policy: nn.Module  # trained; sharded by FSDP2 under torchrun
    sampler: nn.Module  # unsharded copy of the policy's weights, for generation on each rank
    reference: nn.Module | None  # the frozen starting checkpoint (sharded like the policy); None when kl_beta is 0


@dataclass
class Rollouts:
    tasks: list[Task]  # this rank's tasks of the step
    texts: list[list[str]]  # [task][sample] completions
    tokens: torch.Tensor  # [rows, T] prompt + completion tokens, right-padded; rows task-major
    mask: torch.Tensor  # [rows, T - 1] 1 where a completion token is scored
    rewards: torch.Tensor  # [tasks, G] rewards the task source gave
    scored: list[list[Scored]]  # [task][sample] the rewards with how the tests went
    seeds: list[int]  # [task] the seed its group was sampled with


def seed_of(*parts: object) -> int:
    """A 63-bit seed from parts (run seed, step, task id…): stable across processes and runs."""
    digest = hashlib.sha256("\0".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def step_tasks(tasks: list[Task], cfg: RLConfig, step: int) -> list[Task]:
    """The ``tasks_per_step`` tasks of step ``step`` (0-based), all ranks': an epoch-wise shuffled order."""
    per_step, count = cfg.rollout.tasks_per_step, len(tasks)
    chosen = []
    for position in range(step * per_step, (step + 1) * per_step):
        epoch, index = divmod(position, count)
        order = list(range(count))
        random.Random(seed_of(cfg.run.seed, "epoch", epoch)).shuffle(order)
        chosen.append(tasks[order[index]])
    return chosen


def rank_share(items: list, world: World) -> list:
    per_rank = len(items) // world.size
    return items[world.rank * per_rank : (world.rank + 1) * per_rank]


def build_models(start: LoadedCheckpoint, cfg: RLConfig, world: World) -> Models:
    """The policy, its sampler and the reference, all from the starting checkpoint's weights."""
    policy = start.model
    sampler = copy.deepcopy(policy).eval()
    reference = None
    if cfg.grpo.kl_beta > 0:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    policy.train()
    if world.mesh is not None:
        dtype = compute_dtype(cfg.train.dtype, world.device)
        apply_fsdp(policy, world.mesh, dtype)
        if reference is not None:
            apply_fsdp(reference, world.mesh, dtype)
    return Models(policy, sampler, reference)


@torch.no_grad()
def sync_sampler(models: Models) -> None:
    """Copy the policy's weights, gathered whole on every rank (a collective), into the sampler."""
    full = {
        name: value.full_tensor() if hasattr(value, "full_tensor") else value
        for name, value in models.policy.state_dict().items()
    }
    models.sampler.load_state_dict(full)


def rollouts(models: Models, start: LoadedCheckpoint, source: TaskSource, cfg: RLConfig, step: int, world: World):
    """This rank's completions of its share of the step's tasks, their tokens and rewards."""
    mine = rank_share(step_tasks(list(source.train), cfg, step), world)
    group = cfg.rollout.group_size
    seeds = [seed_of(cfg.run.seed, step, task.id) for task in mine]
    sampled = generate_tokens(
        models.sampler,
        start.tokenizer,
        [task.prompt for task in mine],
        samples=group,
        max_new_tokens=cfg.rollout.max_new_tokens,
        device=world.device,
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        seeds=seeds,
        stop=source.stop,
        batch_rows=GENERATE_ROWS,
    )
    texts = [[completion.text for completion in row] for row in sampled]
    flat_tasks = [task for task in mine for _ in range(group)]
    scored = source.reward(flat_tasks, [text for row in texts for text in row])
    encoder = start.tokenizer.load()
    prompts = [prompt_tokens(encoder, task.prompt, start.tokenizer.eod_id) for task in mine]
    rows = [(prompts[i], completion.tokens) for i, row in enumerate(sampled) for completion in row]
    tokens, mask = pack(rows)
    reward_tensor = torch.tensor([s.reward for s in scored], dtype=torch.float32).view(len(mine), group)
    grouped = [scored[i * group : (i + 1) * group] for i in range(len(mine))]
    return Rollouts(mine, texts, tokens, mask, reward_tensor, grouped, seeds)


def pack(rows: list[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt, completion)`` token lists → right-padded ``tokens [B, T]`` and the mask ``[B, T - 1]``
    of the scored positions: position t scores token t + 1, so completion token j of a prompt of
    length P is scored at P - 1 + j."""
    width = max(len(p) + len(c) for p, c in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    for i, (prompt, completion) in enumerate(rows):
        tokens[i, : len(prompt) + len(completion)] = torch.tensor(prompt + completion)
        mask[i, len(prompt) - 1 : len(prompt) - 1 + len(completion)] = 1
    return tokens, mask


def shuffled(rewards: torch.Tensor, tasks: list[Task], cfg: RLConfig, step: int) -> torch.Tensor:
    """Each group's rewards permuted (the control run): the same rewards, unrelated to the completions."""
    out = rewards.clone()
    for i, task in enumerate(tasks):
        generator = torch.Generator().manual_seed(seed_of(cfg.run.seed, step, task.id, "shuffle"))
        out[i] = rewards[i][torch.randperm(rewards.shape[1], generator=generator)]
    return out


def forward_logprobs(model: nn.Module, tokens: torch.Tensor, cfg: RLConfig, world: World) -> torch.Tensor:
    dtype = compute_dtype(cfg.train.dtype, world.device)
    with torch.autocast(world.device.type, dtype=dtype, enabled=dtype != torch.float32):
        logits = model(tokens.to(world.device))
    return token_logprobs(logits, tokens.to(world.device), cfg.rollout.temperature)


@torch.no_grad()
def frozen_logprobs(model: nn.Module, tokens: torch.Tensor, cfg: RLConfig, world: World) -> torch.Tensor:
    """Log-probabilities under ``model`` without gradients, in the same micro-batches as the update."""
    micro = cfg.train.micro_batch_size or tokens.shape[0]
    return torch.cat([forward_logprobs(model, tokens[i : i + micro], cfg, world) for i in range(0, len(tokens), micro)])


def update(models: Models, optimizer, scheduler, batch: Rollouts, advantages, old, ref, cfg: RLConfig, world: World):
    """One optimizer update on the GRPO loss over this rank's completions; global statistics.

    The loss is divided by the number of completions in the whole step, so the gradient does not
    depend on how they were split over ranks and micro-batches (FSDP averages over ranks: the
    world size turns that into a sum)."""
    rows = batch.tokens.shape[0]
    total_rows = rows * world.size
    micro = cfg.train.micro_batch_size or rows
    sums = torch.zeros(4, dtype=torch.float64, device=world.device)  # loss, kl, clipped tokens, tokens
    chunks = list(range(0, rows, micro))
    for i, first in enumerate(chunks):
        if hasattr(models.policy, "set_requires_gradient_sync"):  # FSDP: reduce gradients once, on the last chunk
            models.policy.set_requires_gradient_sync(i == len(chunks) - 1)
        part = slice(first, first + micro)
        logprobs = forward_logprobs(models.policy, batch.tokens[part], cfg, world)
        parts = grpo_loss(
            logprobs,
            logprobs.detach() if old is None else old[part],
            None if ref is None else ref[part],
            advantages[part].to(world.device),
            batch.mask[part].to(world.device),
            cfg.grpo.clip_eps,
            cfg.grpo.kl_beta,
        )
        (parts.loss * world.size / total_rows).backward()
        sums += torch.stack([parts.loss.detach(), parts.kl, parts.clipped, parts.tokens]).double()
    all_reduce_sum(sums, world)
    grad_norm = clip_gradients(models.policy, cfg.train.grad_clip)
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    loss, kl, clipped, tokens = sums.tolist()
    return {
        "loss": loss / total_rows,
        "kl": kl / total_rows,
        "clip_frac": clipped / max(tokens, 1),
        "grad_norm": grad_norm,
        "lr": lr,
    }


@torch.no_grad()
def evaluate(
    models: Models,
    start: LoadedCheckpoint,
    source: TaskSource,
    cfg: RLConfig,
    world: World,
    step: int,
    recorder: RolloutRecorder | None,
) -> dict:
    """Greedy completions of the held-out tasks (ranks take every world-size-th) and their rewards;
    rank 0's ``recorder`` takes every rank's rows."""
    tasks = list(source.heldout)[: cfg.tasks.heldout_limit or None]
    mine = list(range(world.rank, len(tasks), world.size))
    texts = generate_tokens(
        models.sampler,
        start.tokenizer,
        [tasks[i].prompt for i in mine],
        samples=1,
        max_new_tokens=cfg.rollout.max_new_tokens,
        device=world.device,
        stop=source.stop,
        batch_rows=GENERATE_ROWS,
    )
    scored = source.reward([tasks[i] for i in mine], [row[0].text for row in texts])
    rows = [
        rollout_row("heldout", step, tasks[i].id, 0, row[0].text, result, None)
        for i, row, result in zip(mine, texts, scored, strict=True)
    ]
    record_rows(rows, recorder, world)
    rewards = [result.reward for result in scored]
    everyone = torch.zeros(len(tasks), dtype=torch.float64, device=world.device)
    everyone[mine] = torch.tensor(rewards, dtype=torch.float64, device=world.device)
    all_reduce_sum(everyone, world)
    values = everyone.tolist()
    examples = {tasks[i].id: row[0].text for i, row in zip(mine[:4], texts[:4], strict=False)}
    return {
        "reward": sum(values) / len(values),
        "solved": sum(v == 1.0 for v in values) / len(values),
        "tasks": len(values),
        "rewards": values,  # per held-out task, in order: for paired comparisons between runs
        "examples": examples,  # a few of rank 0's completions, to read
    }


def fit_prompts(source: TaskSource, start: LoadedCheckpoint, cfg: RLConfig) -> TaskSource:
    """Each prompt with room for a full completion in the model's context: a source whose rewards
    never read the prompt (``truncatable``) has its longer prompts cut at their start, by tokens, so
    that their end (the signature and docstring) stays; any other such prompt is refused."""
    encoder = start.tokenizer.load()
    limit = start.model.cfg.max_seq_len - cfg.rollout.max_new_tokens
    if limit < 1:
        raise ConfigError(
            f"rollout.max_new_tokens {cfg.rollout.max_new_tokens} leaves no room for a prompt in the model's "
            f"max_seq_len {start.model.cfg.max_seq_len}; lower it"
        )
    fitted = {}
    for task in [*source.train, *source.heldout]:
        length = len(prompt_tokens(encoder, task.prompt, start.tokenizer.eod_id))
        if length <= limit:
            continue
        if not source.truncatable:
            raise ConfigError(
                f"task {task.id}: its prompt and rollout.max_new_tokens {cfg.rollout.max_new_tokens} take "
                f"{length + cfg.rollout.max_new_tokens} tokens, past the model's max_seq_len "
                f"{start.model.cfg.max_seq_len}; lower rollout.max_new_tokens"
            )
        fitted[task.id] = dataclasses.replace(
            task, prompt=keep_end(encoder, task.prompt, start.tokenizer.eod_id, limit)
        )
    if not fitted:
        return source
    train = [fitted.get(task.id, task) for task in source.train]
    heldout = [fitted.get(task.id, task) for task in source.heldout]
    lineage = {**source.lineage, "prompts_truncated": len(fitted), "prompt_tokens": limit}
    return dataclasses.replace(source, train=train, heldout=heldout, lineage=lineage)


def keep_end(encoder, prompt: str, eod_id: int, limit: int) -> str:
    """The longest end of ``prompt`` that starts at one of its token boundaries and encodes to at
    most ``limit`` tokens (encoding the cut text again can merge differently at the cut: checked)."""
    offsets = encoder.encode(prompt, add_special_tokens=False).offsets
    for first in range(len(offsets) - limit, len(offsets)):
        text = prompt[offsets[first][0] :]
        if len(prompt_tokens(encoder, text, eod_id)) <= limit:
            return text
    return prompt[offsets[-1][0] :]


def lineage_record(
    start: LoadedCheckpoint, source: TaskSource, cfg: RLConfig, run_dir: Path, step: int, recorded: dict | None
) -> dict:
    """An RL checkpoint's lineage.json: the starting checkpoint's data (as its own lineage records it,
    so ``factory lineage`` and ``factory eval`` read an RL checkpoint as any other), and under ``rl`` the
    starting checkpoint itself, the tasks (a table's snapshot), the RL config and the ``rl.rollouts``
    snapshot holding the run's rollouts up to this step. Its readers check that section with
    ``rl.lineage.check_rl_lineage`` (a page imports that, not this module and torch)."""
    inherited = {k: v for k, v in start.lineage.items() if k not in ("checkpoint", "step", "code_version", "rl")}
    rl = {
        "start": {
            "checkpoint": str(start.path),
            "step": start.step,
            "identity": start.identity,
            "rl": start.lineage.get("rl"),  # when the start was itself an RL checkpoint
        },
        "tasks": source.lineage,
        "config": cfg.to_dict(),
        "rollouts": recorded,
    }
    path = checkpoint.step_dir(run_dir, step)
    return {**inherited, "checkpoint": str(path), "step": step, "code_version": code_version(), "rl": rl}


def train(cfg: RLConfig, world: World, resume: bool = False) -> None:
    run_dir = Path(cfg.run.dir)
    check_run_dir(cfg, resume)  # again on every rank, as factory rl train checked before torchrun: python -m rl.learner
    start = load_checkpoint(cfg.start.checkpoint, world.device)
    catalog = load_catalog(cfg.run.catalog or None)
    source = fit_prompts(load_task_source(cfg, world, catalog), start, cfg)
    recorder = None
    if world.is_main:
        tasks = source.lineage
        inputs = [{"table": tasks["table"], "snapshot_id": tasks["snapshot_id"]}] if "table" in tasks else []
        recorder = RolloutRecorder(catalog, run_id(cfg, start), str(run_dir.resolve()), inputs)
    recorded = None  # the rl.rollouts commit of the last checkpoint
    models = build_models(start, cfg, world)
    optimizer = torch.optim.AdamW(
        models.policy.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay
    )
    updates = cfg.train.steps * cfg.grpo.updates_per_batch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(cfg.optim, updates))
    step = 0
    latest = checkpoint.latest_checkpoint(run_dir) if resume else None
    if latest is not None:
        step = checkpoint.load(latest[1], models.policy, optimizer, scheduler, world).step
        sync_sampler(models)
    elif resume and world.is_main:
        say_fresh_start(run_dir)
    with contextlib.closing(MetricsLog(run_dir, world.is_main, cfg.train.steps)) as metrics:
        if world.is_main:
            (run_dir / "config.resolved.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=list))
            facts = {"resumed": latest is not None, "world": world.size, "start": str(start.path)}
            metrics.log(step, "start", {**facts, "tasks": len(source.train), "heldout": len(source.heldout)})
        evaluating = cfg.eval.every and len(source.heldout) > 0
        if world.is_main and (warning := no_heldout_warning(cfg, len(source.train), len(source.heldout))):
            print(warning, file=sys.stderr)
        if latest is None and evaluating:
            metrics.log(0, "eval", evaluate(models, start, source, cfg, world, 0, recorder))
        first = step  # the rollouts of the steps after it are not committed yet
        while step < cfg.train.steps:
            stats = train_step(models, optimizer, scheduler, start, source, cfg, step, world, run_dir, recorder)
            step += 1
            metrics.log(step, "train", stats)
            maybe_fail(f"after-step-{step}")
            last = step == cfg.train.steps
            if evaluating and (step % cfg.eval.every == 0 or last):
                metrics.log(step, "eval", evaluate(models, start, source, cfg, world, step, recorder))
            if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or last:
                record = {}
                if world.is_main:
                    # Before the checkpoint: a run that dies between the two makes these steps again from
                    # the last checkpoint, and their commit, already in the table, is then a no-op.
                    recorded = recorder.commit(first, step) or recorded
                    maybe_fail(f"after-rollouts-commit-{step}")
                    record = lineage_record(start, source, cfg, run_dir, step, recorded)
                first = step
                state = {"rl_step": step}
                checkpoint.save(
                    run_dir, step, models.policy, optimizer, scheduler, state, record, world, cfg.checkpoint.keep
                )


def train_step(
    models, optimizer, scheduler, start, source, cfg: RLConfig, step: int, world: World, run_dir: Path, recorder
):
    """Rollouts, rewards and ``updates_per_batch`` updates for step ``step`` (0-based); its statistics."""
    started = time.perf_counter()
    batch = rollouts(models, start, source, cfg, step, world)
    rolled = time.perf_counter()
    used = shuffled(batch.rewards, batch.tasks, cfg, step) if cfg.grpo.shuffle_rewards else batch.rewards
    advantages = group_advantages(used, cfg.grpo.std_eps).flatten()
    ref = None if models.reference is None else frozen_logprobs(models.reference, batch.tokens, cfg, world)
    updates = cfg.grpo.updates_per_batch
    old = frozen_logprobs(models.policy, batch.tokens, cfg, world) if updates > 1 else None
    for _ in range(updates):
        stats = update(models, optimizer, scheduler, batch, advantages, old, ref, cfg, world)
    sync_sampler(models)
    log_rollouts(run_dir, step + 1, batch, world)
    rows = [
        rollout_row("train", step + 1, task.id, j, text, result, seed)
        for task, texts, results, seed in zip(batch.tasks, batch.texts, batch.scored, batch.seeds, strict=True)
        for j, (text, result) in enumerate(zip(texts, results, strict=True))
    ]
    record_rows(rows, recorder, world)
    totals = torch.tensor(
        [
            batch.rewards.sum().item(),
            batch.rewards.numel(),
            (batch.rewards.std(dim=1) == 0).sum().item(),
            batch.mask.sum().item(),
        ],
        dtype=torch.float64,
        device=world.device,
    )
    reward_sum, samples, flat_groups, tokens = all_reduce_sum(totals, world).tolist()
    groups = samples / cfg.rollout.group_size
    return {
        **stats,
        "reward": reward_sum / samples,
        "flat_groups": flat_groups / groups,  # groups whose samples all scored alike: no signal
        "completion_tokens": tokens / samples,
        "rollout_s": rolled - started,
        "update_s": time.perf_counter() - rolled,
    }


def log_rollouts(run_dir: Path, step: int, batch: Rollouts, world: World) -> None:
    """Every rank's tasks, completions and rewards of the step, as one line of ``rollouts.jsonl``."""
    mine = {
        "tasks": [task.id for task in batch.tasks],
        "completions": batch.texts,
        "rewards": batch.rewards.tolist(),
    }
    gathered = [mine]
    if world.size > 1:
        gathered = [None] * world.size
        dist.all_gather_object(gathered, mine)
    if world.is_main:
        record = {"step": step, **{key: [x for part in gathered for x in part[key]] for key in mine}}
        with (run_dir / "rollouts.jsonl").open("a") as out:
            out.write(json.dumps(record) + "\n")


def record_rows(rows: list[dict], recorder: RolloutRecorder | None, world: World) -> None:
    """Every rank's rows of ``rl.rollouts`` to rank 0's recorder (a collective)."""
    gathered = [rows]
    if world.size > 1:
        gathered = [None] * world.size
        dist.all_gather_object(gathered, rows)
    if recorder is not None:
        recorder.add([row for part in gathered for row in part])


def no_heldout_warning(cfg: RLConfig, n_train: int, n_heldout: int) -> str | None:
    """Why a run asked to evaluate will not: its tasks' split held none out (few tasks: the split is
    by a hash of each task id)."""
    if not cfg.eval.every or n_heldout:
        return None
    return (
        f"warning: no held-out task among the {n_train + n_heldout} tasks (tasks.heldout_fraction "
        f"{cfg.tasks.heldout_fraction:g}), so eval.every={cfg.eval.every} evaluates nothing; build more tasks "
        "or raise tasks.heldout_fraction"
    )


def run_id(cfg: RLConfig, start: LoadedCheckpoint) -> str:
    """The RL run's id in ``rl.rollouts``: a hash of its config (its folder made absolute) and its
    start, the same when the run resumes, another for another run."""
    config = cfg.to_dict()
    config["run"] = {**config["run"], "dir": str(Path(cfg.run.dir).resolve())}
    key = json.dumps({"config": config, "start": start.identity}, sort_keys=True, default=list)
    return "rl-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    return rank_main(
        "rl.learner",
        __doc__.split("\n\n")[0],
        load_rl_config,
        lambda cfg, world, resume: train(cfg, world, resume=resume),
        argv,
    )


if __name__ == "__main__":
    sys.exit(main())
