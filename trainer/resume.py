"""What a start in a run folder may do: a fresh start into a folder of checkpoints is refused, and
``--resume`` continues the SAME run, bound to the settings its newest checkpoint recorded.

A checkpoint restores the optimizer's param groups (lr, betas, weight decay) and the scheduler's
base learning rates, and its tensors have the model's shapes: a resume under other model or
optimizer settings would either fail deep in the ranks or go on with the old values while the new
config and lineage record the new ones. So those settings are compared with the checkpoint's
``lineage.json`` (not ``config.resolved.json``, which each start rewrites) and a change is
refused, before torchrun starts (``factory train``) and again on every rank (a plain
``python -m trainer.train``). The settings that may change are those that do not change what a
step computes (``CHANGEABLE``; docs/training.md, "Resume").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lakehouse.errors import ConfigError
from lakehouse.json_paths import differing_paths
from trainer.checkpoint_paths import checkpoint_to_continue
from trainer.config import Config

# Key paths (or section prefixes ending in ".") a resume may change. Everything else is part of
# the run's definition. data.manifest and data.tokenizer are paths: their content is compared
# instead (the manifest's fingerprint, the tokenizer's sha256), so a moved file still resumes.
CHANGEABLE = (
    "train.steps",  # extends or shortens the run; the cosine schedule follows the new length
    "train.micro_batch_size",  # gradient accumulation: the same global batch and loss normalisation
    "train.compile",
    "data.backend",  # local and ray give the same stream
    "data.manifest",
    "data.tokenizer",
    "run.dir",
    "run.metrics_port",
    "run.metrics_host",
    "eval.",
    "checkpoint.",
    "mlflow.",
)


def changeable(path: str) -> bool:
    """Whether a resume may change the setting at key path ``path``."""
    return any(path.startswith(key) if key.endswith(".") else path == key for key in CHANGEABLE)


def resolve_vocab_size(cfg: Config, tokenizer_vocab: int) -> None:
    """Take the tokenizer's vocabulary size when ``model.vocab_size`` is 0; refuse a smaller one
    (a token id past the embedding table fails inside the ranks as an IndexError)."""
    if not cfg.model.vocab_size:
        cfg.model.vocab_size = tokenizer_vocab
    if cfg.model.vocab_size < tokenizer_vocab:
        raise ConfigError(
            f"model.vocab_size {cfg.model.vocab_size} is smaller than the tokenizer's vocabulary of "
            f"{tokenizer_vocab} tokens ({cfg.data.tokenizer}): set it to at least {tokenizer_vocab}, or 0 for that size"
        )


def check_run_dir(cfg: Config, resume: bool, manifest_fingerprint: str, tokenizer_sha256: str) -> None:
    """Refuse a fresh start into a folder holding checkpoints, and a resume under other settings
    than the newest complete checkpoint's. ``cfg.model.vocab_size`` must be resolved already."""
    # Imported here: trainer.lineage brings pyiceberg, which `factory train --help` and a fresh start need not load.
    from trainer.lineage import read_lineage

    run_dir = Path(cfg.run.dir)
    latest = checkpoint_to_continue(run_dir, resume)
    if latest is None:
        return
    lineage = read_lineage(latest)
    file = latest / "lineage.json"
    changed = changed_data(lineage, manifest_fingerprint, tokenizer_sha256)
    recorded = lineage.get("config")
    if not isinstance(recorded, dict):
        # Every checkpoint the trainer wrote records it: without it nothing binds the resume to the
        # run's model and optimizer, so it is refused as factory eval and export refuse it.
        raise ConfigError(no_config_message(run_dir, file, changed))
    changed = changed_settings(recorded, cfg.to_dict()) + changed
    if changed:
        raise ConfigError(
            f"--resume continues the run in {run_dir} as it started, but these settings differ from its "
            f"checkpoint {latest}: {', '.join(changed)}. Resume with the config it started with (recorded "
            f'under "config" in {file}), or train into a new run.dir'
        )


def changed_data(lineage: dict[str, Any], manifest_fingerprint: str, tokenizer_sha256: str) -> list[str]:
    """The data settings whose content differs from what the checkpoint's ``lineage`` recorded."""
    changed = []
    if lineage["manifest"].get("fingerprint") != manifest_fingerprint:
        changed.append("data.manifest (another fingerprint)")
    if lineage["tokenizer"].get("sha256") != tokenizer_sha256:
        changed.append("data.tokenizer (another sha256)")
    return changed


def no_config_message(run_dir: Path, file: Path, changed: list[str]) -> str:
    """Why a resume from a checkpoint whose lineage ``file`` records no config is refused, and what to do."""
    also = f"; and {', '.join(changed)} differ from it" if changed else ""
    return (
        f'--resume continues the run in {run_dir} as it started, but its newest checkpoint records no "config" '
        f"to compare this one with ({file} lacks it: the file is damaged or was edited){also}. Restore that "
        "lineage.json from a copy of the checkpoint, or train into a new run.dir"
    )


def changed_settings(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The key paths of the run's definition whose values differ (``changeable`` ones left out)."""
    # Through JSON as lineage.json was written: tuples (optim.betas) become lists.
    now = json.loads(json.dumps(now, default=list))
    return [path for path in differing_paths(recorded, now) if not changeable(_key_of(path))]


def _key_of(path: str) -> str:
    # "optim.betas[1]" is the setting optim.betas
    return path.split("[", 1)[0]


def check_start(cfg: Config, resume: bool) -> None:
    """``factory train``'s checks of a start before torchrun starts (the ranks check it again): the
    manifests and tokenizer the run reads, each read once here (a missing or damaged one is refused
    now, not among torchrun's errors), the model's vocabulary against the tokenizer's, and the run
    folder (``check_run_dir``)."""
    from mixtures.manifest import Manifest
    from streaming_loader.tokenize import load_tokenizer_spec

    manifest = Manifest.load(cfg.data.manifest)
    if cfg.eval.manifest and cfg.eval.manifest != cfg.data.manifest:
        Manifest.load(cfg.eval.manifest)
    tokenizer = load_tokenizer_spec(cfg.data.tokenizer)
    resolve_vocab_size(cfg, tokenizer.vocab_size)
    check_run_dir(cfg, resume, manifest.fingerprint, tokenizer.sha256)
