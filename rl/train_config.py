"""The RL training config (``factory rl train --config FILE``): TOML sections into validated dataclasses.

    [run]        dir, seed, catalog
    [start]      checkpoint
    [tasks]      source, table, heldout_fraction, heldout_limit, timeout_s, workers
    [rollout]    group_size, tasks_per_step, max_new_tokens, temperature, top_p
    [grpo]       clip_eps, kl_beta, updates_per_batch, std_eps, shuffle_rewards
    [train]      steps, micro_batch_size, grad_clip, dtype
    [optim]      lr, betas, weight_decay, warmup_steps, min_lr_ratio (the trainer's)
    [eval]       every
    [checkpoint] every, keep (the trainer's)

Each key is documented in docs/rl-training.md#the-config. ``--set section.key=value`` overrides a
field, as for ``factory train``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakehouse.errors import ConfigError
from trainer.config import CheckpointConfig, OptimConfig, load_sections

SOURCES = ("arithmetic", "table")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass
class RunConfig:
    dir: str = "runs/rl"  # run directory: checkpoints/, metrics.jsonl, config.resolved.json
    seed: int = 0  # seeds the task order, the sampling and the reward shuffle of the control run
    catalog: str = ""  # the catalog of tasks.table and rl.rollouts; "" = $FACTORY_CATALOG or the embedded one

    def __post_init__(self) -> None:
        _check(bool(self.dir), "run.dir is required")


@dataclass
class StartConfig:
    checkpoint: str = ""  # the pre-trained checkpoint (a checkpoints/step-N folder or a run folder)

    def __post_init__(self) -> None:
        _check(bool(self.checkpoint), "start.checkpoint is required: the pre-trained checkpoint the policy starts from")


@dataclass
class TasksConfig:
    source: str = "arithmetic"  # a generated family (arithmetic), or table: the tasks of an rl.tasks snapshot
    table: str = "rl.tasks"  # for source table: NAME or NAME@REF (a snapshot id, tag or branch)
    heldout_fraction: float = 0.1  # share of tasks held out (by a hash of the task id) for evaluation
    heldout_limit: int = 0  # evaluate at most this many held-out tasks; 0 = all
    timeout_s: float = 5.0  # wall-clock (and CPU) seconds per program in the sandbox
    workers: int = 0  # programs run at once on each rank; 0 = the CPU count

    def __post_init__(self) -> None:
        _check(self.source in SOURCES, f"tasks.source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        _check(bool(self.table), "tasks.table must name a table, e.g. rl.tasks or rl.tasks@TAG")
        _check(0 < self.heldout_fraction < 1, "tasks.heldout_fraction must be in (0, 1)")
        _check(self.heldout_limit >= 0 and self.workers >= 0, "tasks.heldout_limit and tasks.workers must be >= 0")
        _check(self.timeout_s > 0, "tasks.timeout_s must be > 0")


@dataclass
class RolloutConfig:
    group_size: int = 8  # G: completions sampled per task, compared with each other
    tasks_per_step: int = 8  # tasks per optimizer step across all ranks (each rank samples its share)
    max_new_tokens: int = 16  # longest completion, in tokens
    temperature: float = 1.0  # sampling temperature (> 0)
    top_p: float = 1.0  # nucleus sampling: keep the most likely tokens up to this mass

    def __post_init__(self) -> None:
        _check(self.group_size >= 2, "rollout.group_size must be >= 2: advantages compare a task's samples")
        _check(self.tasks_per_step > 0 and self.max_new_tokens > 0, "rollout.tasks_per_step, max_new_tokens > 0")
        _check(self.temperature > 0, "rollout.temperature must be > 0 (the held-out evaluation is greedy)")
        _check(0 < self.top_p <= 1, "rollout.top_p must be in (0, 1]")


@dataclass
class GrpoConfig:
    clip_eps: float = 0.2  # ε of the clipped ratio
    kl_beta: float = 0.04  # β: weight of the KL penalty against the starting checkpoint; 0 = none
    updates_per_batch: int = 1  # optimizer updates on each step's rollouts (μ); the clip acts from the second
    std_eps: float = 1e-4  # added to a group's reward std before dividing
    shuffle_rewards: bool = False  # the control run: permute rewards within each group before the advantages

    def __post_init__(self) -> None:
        _check(0 < self.clip_eps < 1, "grpo.clip_eps must be in (0, 1)")
        _check(self.kl_beta >= 0 and self.std_eps > 0, "grpo.kl_beta must be >= 0 and grpo.std_eps > 0")
        _check(self.updates_per_batch >= 1, "grpo.updates_per_batch must be >= 1")


@dataclass
class TrainConfig:
    steps: int = 200  # steps in the whole run: each samples a batch of rollouts and updates on it
    micro_batch_size: int = 0  # completions per forward pass per rank; 0 = the rank's whole share
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 = no clipping
    dtype: str = "auto"  # compute dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16

    def __post_init__(self) -> None:
        _check(self.steps > 0 and self.micro_batch_size >= 0, "train.steps must be > 0, micro_batch_size >= 0")
        _check(self.grad_clip >= 0, "train.grad_clip must be >= 0")
        _check(self.dtype in ("auto", "float32", "bfloat16"), "train.dtype must be auto, float32 or bfloat16")


@dataclass
class EvalConfig:
    every: int = 20  # greedy reward on the held-out tasks every N steps (and at steps 0 and last); 0 = never

    def __post_init__(self) -> None:
        _check(self.every >= 0, "eval.every must be >= 0")


@dataclass
class RLConfig:
    start: StartConfig
    run: RunConfig = field(default_factory=RunConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3, weight_decay=0.0, warmup_steps=0))
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=lambda: CheckpointConfig(every=50))

    def check_world(self, world: int) -> None:
        """Reject splits that would leave ranks unequal (and so hang their collectives)."""
        tasks = self.rollout.tasks_per_step
        _check(tasks % world == 0, f"rollout.tasks_per_step {tasks} must divide by the number of ranks {world}")
        rows, micro = tasks // world * self.rollout.group_size, self.train.micro_batch_size
        _check(
            not micro or rows % micro == 0, f"each rank's {rows} completions must divide by micro_batch_size {micro}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTION_TYPES = {
    "start": StartConfig,
    "run": RunConfig,
    "tasks": TasksConfig,
    "rollout": RolloutConfig,
    "grpo": GrpoConfig,
    "train": TrainConfig,
    "optim": OptimConfig,
    "eval": EvalConfig,
    "checkpoint": CheckpointConfig,
}
_DEFAULTS = {"optim": {"lr": 1e-3, "weight_decay": 0.0, "warmup_steps": 0}, "checkpoint": {"every": 50}}


def load_rl_config(path: str | Path | None, overrides: list[str] = (), raw: dict | None = None) -> RLConfig:
    """A validated config from a TOML file (or ``raw`` dict) and ``--set`` overrides."""
    sections = load_sections(path, overrides, raw, SECTION_TYPES, _DEFAULTS)
    _check("start" in sections, "the config needs a [start] section naming the pre-trained checkpoint")
    return RLConfig(**sections)
