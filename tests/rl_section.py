"""An RL checkpoint's own part of its lineage.json (``rl``), as rl/learner.py's ``lineage_record``
writes it, for the tests of its readers: ``factory lineage`` and the UI's checkpoint page."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

RL_SECTION = {
    "start": {"checkpoint": "/runs/pre/checkpoints/step-40", "step": 40},
    "tasks": {
        "source": "table",
        "table": "rl.tasks",
        "snapshot_id": 11,
        "tasks": 2,
        "heldout": 1,
        "build_run_id": "rl-build-1",
        "inputs": json.dumps([{"table": "raw.rl_repositories", "snapshot_id": 7, "repository": "toy"}]),
    },
    "rollouts": {"table": "rl.rollouts", "snapshot_id": 22, "run_id": "rl-abc"},
    "config": {
        "run": {"seed": 3},
        "train": {"steps": 4},
        "rollout": {"tasks_per_step": 2, "group_size": 4},
        "grpo": {"kl_beta": 0.04},
        "optim": {"lr": 0.01},
    },
}

# Each: how a crafted file's ``rl`` section differs from ``RL_SECTION`` (or what it is instead),
# and the key path the refusal names.
CRAFTED_RL: dict[str, tuple[Callable[[dict], object] | str, str]] = {
    "rl a string": ("an RL run", "rl (an object)"),
    "start a string": (lambda rl: rl.update(start="x"), "rl.start (an object)"),
    "start without step": (lambda rl: rl["start"].pop("step"), "rl.start.step"),
    "start a list": (lambda rl: rl["start"].update(checkpoint=["/runs/pre"]), "rl.start.checkpoint (a string)"),
    "tasks a string": (lambda rl: rl.update(tasks="x"), "rl.tasks (an object)"),
    "tasks' snapshot a string": (lambda rl: rl["tasks"].update(snapshot_id="11"), "rl.tasks.snapshot_id (an integer)"),
    "tasks' inputs a list": (lambda rl: rl["tasks"].update(inputs=[{"table": "raw.r"}]), "rl.tasks.inputs (JSON text"),
    "rollouts a list": (lambda rl: rl.update(rollouts=["rl.rollouts", 22]), "rl.rollouts (an object)"),
    "rollouts without run": (lambda rl: rl["rollouts"].pop("run_id"), "rl.rollouts.run_id"),
    "config a string": (lambda rl: rl.update(config="x"), "rl.config (an object)"),
    "config without run": (lambda rl: rl["config"].pop("run"), "rl.config.run (an object)"),
    "config without lr": (lambda rl: rl["config"]["optim"].pop("lr"), "rl.config.optim.lr"),
    "config's grpo a number": (lambda rl: rl["config"].update(grpo=0.04), "rl.config.grpo (an object)"),
}


def rl_section(change: Callable[[dict], object] | str | None = None) -> object:
    """A copy of ``RL_SECTION`` that ``change`` altered in place; a string ``change`` instead of it."""
    if isinstance(change, str):
        return change
    rl = copy.deepcopy(RL_SECTION)
    if change is not None:
        change(rl)
    return rl
