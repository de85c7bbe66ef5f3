"""The ``rl`` section of an RL checkpoint's lineage.json (``rl.learner.lineage_record`` writes it),
checked for what its readers take from it without looking: ``factory lineage`` prints it
(``trainer.lineage.format_lineage``) and the UI's checkpoint page shows it (ui/rl_lineage.py).

``trainer.lineage.lineage_in`` checks the rest of the file; it cannot check this section, which
rl/ defines and trainer/ may not import. Not in rl/learner.py: a page should not import torch.

A start into a run folder is checked against its checkpoints (``check_run_dir``): a fresh start
into one that holds some is refused, and a resume is bound to the config that section records;
``factory rl train`` checks it before torchrun starts and every rank again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.commit import recorded_inputs
from lakehouse.errors import ConfigError, InputError
from lakehouse.json_paths import differing_paths
from trainer.checkpoint_paths import checkpoint_to_continue
from trainer.lineage import missing_keys, read_lineage

if TYPE_CHECKING:
    from rl.train_config import RLConfig

# Keys whose readers need more than text: a start's folder is made a path, a table quoted into a
# link, a snapshot id an integer in one; ``lineage_record`` writes each so.
_KINDS = {
    "checkpoint": (str, "a string"),
    "step": (int, "an integer"),
    "table": (str, "a string"),
    "snapshot_id": (int, "an integer"),
}

# What ``format_lineage`` reads of a non-empty ``rl.config`` (section, key): the rest is shown as it is.
_CONFIG = (("run", "seed"), ("train", "steps"), ("optim", "lr"))
_CONFIG_SECTIONS = ("rollout", "grpo")  # read with .get: objects where they are there


def check_rl_lineage(lineage: dict[str, Any], file: Path) -> None:
    """Raise ``InputError`` naming ``file`` and each key path (``rl.start.step``) where the lineage's
    ``rl`` section lacks what its readers take, or holds another kind of value; a lineage with
    none (a pre-training checkpoint's) passes."""
    rl = lineage.get("rl")
    if not rl:  # the readers pass over an empty section as over none
        return
    missing = _missing_in_rl(rl)
    if missing:
        raise InputError(f"{file} lacks {', '.join(missing)} of an RL checkpoint's lineage: the folder is damaged")
    inputs = rl["tasks"].get("inputs")
    if inputs is not None:  # the text the tasks' snapshot summary holds, copied as it was
        recorded_inputs(inputs, f"{file} at rl.tasks.inputs")


def check_run_dir(cfg: RLConfig, resume: bool) -> None:
    """Refuse a fresh start into a folder holding checkpoints (it would write its own step folders
    among the earlier run's, and append to its metrics), and a resume under another config than its
    newest complete checkpoint recorded (``rl.config`` in its lineage.json; not config.resolved.json,
    which every start rewrites): its rollouts would go to ``rl.rollouts`` under another run id (a hash
    of the config), and its lineage would name only those. A checkpoint that records no config binds
    nothing: refused too."""
    run_dir = Path(cfg.run.dir)
    latest = checkpoint_to_continue(run_dir, resume)
    if latest is None:
        return
    file = latest / "lineage.json"
    lineage = read_lineage(latest)
    check_rl_lineage(lineage, file)
    rl = lineage.get("rl")
    recorded = rl.get("config") if isinstance(rl, dict) else None
    if not recorded:
        raise ConfigError(
            f"--resume continues the RL run in {run_dir} as it started, but its newest checkpoint records no "
            f"rl.config to compare this one with ({file} lacks it: the file is damaged or was edited, or the "
            "checkpoint is not an RL run's). Restore that lineage.json from a copy of the checkpoint, or train "
            f"into a new run.dir with start.checkpoint set to {latest}"
        )
    now = json.loads(json.dumps(cfg.to_dict(), default=list))
    changed = [path for path in differing_paths(recorded, now) if path != "run.dir"]
    if changed:
        raise ConfigError(
            f"{run_dir} was started with other settings ({', '.join(changed)}); resume it with the config it started "
            f"with (recorded under rl.config in {file}), or train into a new run.dir with start.checkpoint set to "
            "its newest checkpoint"
        )


def _missing_in_rl(rl: Any) -> list[str]:
    if not isinstance(rl, dict):
        return ["rl (an object)"]
    missing = missing_keys(rl.get("start"), ("checkpoint", "step"), "rl.start", _KINDS)
    tasks = rl.get("tasks")
    missing += missing_keys(tasks, (), "rl.tasks")
    if isinstance(tasks, dict):
        if tasks.get("table"):  # a table's tasks: linked to their snapshot (a generated family's name none)
            missing += missing_keys(tasks, ("table", "snapshot_id"), "rl.tasks", _KINDS)
        if not isinstance(tasks.get("inputs"), str | None):
            missing.append("rl.tasks.inputs (JSON text, as the tasks' snapshot summary holds it)")
    if rl.get("rollouts"):  # none until the run's first commit to rl.rollouts
        missing += missing_keys(rl["rollouts"], ("table", "snapshot_id", "run_id"), "rl.rollouts", _KINDS)
    if rl.get("config"):
        missing += _missing_in_config(rl["config"])
    return missing


def _missing_in_config(config: Any) -> list[str]:
    if not isinstance(config, dict):
        return ["rl.config (an object)"]
    missing = []
    for section, key in _CONFIG:
        missing += missing_keys(config.get(section), (key,), f"rl.config.{section}")
    for section in _CONFIG_SECTIONS:
        if section in config:
            missing += missing_keys(config[section], (), f"rl.config.{section}")
    return missing
