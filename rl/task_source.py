"""What the learner needs of an environment: tasks with a prompt, and a reward for completions.

The learner knows no more than this, so any environment fits behind it: a generated family
(``rl/families.py``) or the repository tasks of the ``rl.tasks`` table, scored in the sandbox.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rl import families

if TYPE_CHECKING:
    from rl.train_config import RLConfig
    from trainer.parallel import World


class Task(Protocol):
    @property
    def id(self) -> str: ...  # stable across runs: seeds and held-out splits derive from it

    @property
    def prompt(self) -> str: ...  # the text the policy completes


# Rewards in [0, 1] for completions of tasks, one per (task, completion) pair given, in order.
RewardFn = Callable[[Sequence[Task], Sequence[str]], list[float]]


@dataclass(frozen=True)
class TaskSource:
    name: str  # what the lineage records: the family and its settings, or the table snapshot
    train: Sequence[Task]  # the tasks rollouts are drawn from
    heldout: Sequence[Task]  # evaluated greedily every eval.every steps, never trained on
    reward: RewardFn
    stop: Sequence[str]  # a completion ends where the first of these starts
    lineage: dict  # what made the tasks (settings, snapshot ids), recorded in every checkpoint


def load_task_source(cfg: RLConfig, world: World) -> TaskSource:
    """The tasks and reward ``[tasks]`` names, the sandbox's workers shared by this machine's ranks."""
    settings = cfg.tasks
    workers = settings.workers or max(1, (os.cpu_count() or 1) // world.size)
    tasks = families.arithmetic_tasks()
    heldout = [t for t in tasks if families.is_heldout(t.id, settings.heldout_fraction)]
    train = [t for t in tasks if not families.is_heldout(t.id, settings.heldout_fraction)]
    lineage = {
        "source": settings.source,
        "tasks": len(train),
        "heldout": len(heldout),
        "heldout_fraction": settings.heldout_fraction,
        "generator": "rl.families.arithmetic_tasks",
    }
    reward = families.sandbox_reward(settings.timeout_s, workers)
    return TaskSource(settings.source, train, heldout, reward, families.STOP, lineage)
