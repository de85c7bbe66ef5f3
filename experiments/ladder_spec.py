"""An ablation ladder's spec and plan: the ablation's base and variants at several model sizes, each
run given the training compute of the base at its size.

The spec is an ablation spec (``experiments.ablation``) with a ``[ladder]`` table::

    [ladder.sizes.narrow]               # each size: training config keys set on the base
    "model.dim" = 64
    [ladder.sizes.wide]
    "model.dim" = 128

Without ``ladder.sizes`` the sizes are the base's width times 1, 1.5 and 2 (``d<width>``).

Equal compute: a run's training FLOPs are the model's ``flops_per_token`` times the tokens it
trains on (steps × global batch × sequence length). A variant whose cost per token differs from
the base's at a size (a window, another feed-forward, a wider model) gets the number of steps that
spends the base's FLOPs there, rounded to a whole step; one that costs the same trains as many
steps as the base.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.ablation import BASE, SEED_KEY, AblationSpec, ablation_spec_from_dict
from experiments.sweep_spec import read_spec, spec_hash, table
from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError
from trainer.config import Config, ModelConfig, load_config, parse_override

LADDER = "the ladder"
STEPS_KEY = "train.steps"
SIZE_MULTIPLIERS = (1.0, 1.5, 2.0)
_LADDER_KEYS = {"sizes"}


@dataclass(frozen=True)
class LadderSpec:
    ablation: AblationSpec
    sizes: Mapping[str, Mapping[str, Any]]  # name -> the config keys that make the size

    def __post_init__(self) -> None:
        if len(self.sizes) < 2:
            raise ConfigError(f"{LADDER}: give two sizes at least in [ladder.sizes] (a ladder compares across sizes)")
        for name, keys in self.sizes.items():
            if not isinstance(keys, Mapping) or not keys:
                raise ConfigError(f"ladder.sizes.{name}: give the training config key(s) that make this size")
            for key in keys:
                if "." not in key or key.startswith(("mixture.", "component.")) or key in (SEED_KEY, STEPS_KEY):
                    raise ConfigError(
                        f"ladder.sizes.{name}: {key!r} is not a training config key the ladder leaves free "
                        f"(section.key; not {SEED_KEY}, set by `seeds`, nor {STEPS_KEY}, set on the base config)"
                    )
        for name, changes in self.ablation.variants.items():
            if STEPS_KEY in changes:
                raise ConfigError(
                    f"variant {name!r}: the ladder sets {STEPS_KEY} to give each run the base's training compute; "
                    "leave it out of the variant (set it for every run in `set`)"
                )

    @property
    def ladder_id(self) -> str:
        """The ablation's name and a hash of the whole ladder: another ladder, another id."""
        return f"{self.ablation.name}-ladder-{spec_hash([self.ablation.__dict__, dict(self.sizes)])[:10]}"


def load_ladder_spec(path: str | Path) -> LadderSpec:
    path = Path(path)
    data = read_spec(path, "ablation")
    try:
        return ladder_spec_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def ladder_spec_from_dict(data: Mapping[str, Any]) -> LadderSpec:
    """A ladder from an ablation spec's keys; its ``[ladder]`` table may be absent (the default sizes)."""
    ablation = ablation_spec_from_dict(data)
    ladder = table(data, "ladder", "the ablation spec")
    refuse_unknown_keys(ladder, _LADDER_KEYS, "[ladder]")
    sizes = table(ladder, "sizes", LADDER) or default_sizes(ablation)
    return LadderSpec(ablation, sizes)


def default_sizes(ablation: AblationSpec) -> dict[str, dict[str, Any]]:
    """The base's width times SIZE_MULTIPLIERS, each rounded up to whole heads of an even size
    (rotary embeddings pair a head's channels). Only the [model] section is read: a factory's run
    config gets its data keys when the ablation runs, after its definition is checked."""
    cfg = _model_config(ablation.config, ablation.set)
    step = 2 * cfg.n_heads
    widths = dict.fromkeys(step * -(-round(cfg.dim * m) // step) for m in SIZE_MULTIPLIERS)
    return {f"d{w}": {"model.dim": w} for w in widths}


def _model_config(path: str, overrides: Sequence[str]) -> ModelConfig:
    try:
        model = dict(tomllib.loads(Path(path).read_text(encoding="utf-8")).get("model", {}))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read the base training config {path}: {exc}") from None
    for text in overrides:
        section, name, value = parse_override(text)
        if section == "model":
            model[name] = value
    try:
        return ModelConfig(**model)
    except TypeError as exc:  # a key ModelConfig does not have
        raise ConfigError(f"{path} [model]: {exc}") from None


@dataclass(frozen=True)
class Rung:
    """One (size, variant) of the ladder: its keys, steps and training FLOPs."""

    size: str
    variant: str
    changes: Mapping[str, Any]  # the size's keys, the variant's, and train.steps
    steps: int
    flops_per_token: float
    train_flops: float

    def trials(self, seeds: int) -> list[dict[str, Any]]:
        info = {"variant": self.variant, "size": self.size, "train_flops": self.train_flops}
        return [{**info, SEED_KEY: seed, **self.changes} for seed in range(seeds)]


@dataclass(frozen=True)
class LadderPlan:
    rungs: list[Rung] = field(default_factory=list)  # by size, smallest first; the base first in each

    def trials(self, seeds: int) -> list[dict[str, Any]]:
        return [trial for rung in self.rungs for trial in rung.trials(seeds)]


def plan_ladder(spec: LadderSpec) -> LadderPlan:
    """Every (size, variant) with the steps that give it the base's training FLOPs at its size."""
    ablation = spec.ablation
    rungs: list[list[Rung]] = []
    for size, size_keys in spec.sizes.items():
        base_cfg = _config(ablation, size_keys, f"ladder.sizes.{size}")
        base_fpt = flops_per_token(base_cfg)
        base_flops = base_fpt * tokens_per_step(base_cfg) * base_cfg.train.steps
        row = [_rung(size, BASE, size_keys, base_cfg.train.steps, base_fpt, base_flops)]
        for name, changes in ablation.variants.items():
            keys = {**size_keys, **changes}
            cfg = _config(ablation, keys, f"variant {name!r} at size {size!r}")
            fpt = flops_per_token(cfg)
            steps = base_cfg.train.steps
            if fpt * tokens_per_step(cfg) != base_fpt * tokens_per_step(base_cfg):
                steps = max(1, round(base_flops / (fpt * tokens_per_step(cfg))))
            row.append(_rung(size, name, keys, steps, fpt, fpt * tokens_per_step(cfg) * steps))
        rungs.append(row)
    rungs.sort(key=lambda row: row[0].train_flops)
    return LadderPlan([rung for row in rungs for rung in row])


def _rung(size: str, variant: str, keys: Mapping[str, Any], steps: int, fpt: float, flops: float) -> Rung:
    return Rung(size, variant, {**keys, STEPS_KEY: steps}, steps, fpt, flops)


def _config(ablation: AblationSpec, keys: Mapping[str, Any], label: str) -> Config:
    from experiments.trial import param_overrides

    try:
        return load_config(ablation.config, [*ablation.set, *param_overrides(keys)])
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def tokens_per_step(cfg: Config) -> int:
    return cfg.data.global_batch_size * cfg.data.seq_len


def flops_per_token(cfg: Config) -> float:
    """The trainer's own count (``Transformer.flops_per_token``), of a model built on the meta
    device: no memory, no initialisation, the same modules the run will train."""
    import torch

    from streaming_loader.tokenize import load_tokenizer_spec
    from trainer.model import Transformer

    model_cfg = cfg.model
    if not model_cfg.vocab_size:  # as the trainer sets it at start-up
        model_cfg.vocab_size = load_tokenizer_spec(cfg.data.tokenizer).vocab_size
    if not model_cfg.max_seq_len:
        model_cfg.max_seq_len = cfg.data.seq_len
    with torch.device("meta"):
        return float(Transformer(model_cfg).flops_per_token(cfg.data.seq_len))
