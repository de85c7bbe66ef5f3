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
from rl.scored import Scored

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from rl import tasks as table_tasks
    from rl.train_config import RLConfig
    from trainer.parallel import World


class Task(Protocol):
    @property
    def id(self) -> str: ...  # stable across runs: seeds and held-out splits derive from it

    @property
    def prompt(self) -> str: ...  # the text the policy completes


# Rewards in [0, 1], with how the tests went, for completions of tasks: one per (task, completion) pair, in order.
RewardFn = Callable[[Sequence[Task], Sequence[str]], list[Scored]]

# Where a function body ends: the stop sequences of HumanEval (evals/suites/humaneval.py), and a
# decorator of the next function. A method's body runs on into the next method; the file's own
# definition of that method follows the completion and replaces it, so it does no harm.
BODY_STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint", "\n@")


@dataclass(frozen=True)
class TaskSource:
    name: str  # what the lineage records: the family and its settings, or the table snapshot
    train: Sequence[Task]  # the tasks rollouts are drawn from
    heldout: Sequence[Task]  # evaluated greedily every eval.every steps, never trained on
    reward: RewardFn
    stop: Sequence[str]  # a completion ends where the first of these starts
    lineage: dict  # what made the tasks (settings, snapshot ids), recorded in every checkpoint
    # Whether a prompt may lose its beginning to fit the model: true where the reward never reads the prompt.
    truncatable: bool = False


@dataclass(frozen=True)
class RepositoryTask:
    """A row of ``rl.tasks`` as the learner sees it; ``prompt`` may be cut at its start (``truncatable``)."""

    id: str
    prompt: str
    task: table_tasks.Task


def load_task_source(cfg: RLConfig, world: World, catalog: Catalog | None = None) -> TaskSource:
    """The tasks and reward ``[tasks]`` names, the sandbox's workers shared by this machine's ranks."""
    workers = cfg.tasks.workers or max(1, (os.cpu_count() or 1) // world.size)
    if cfg.tasks.source == "table":
        return table_source(cfg, catalog, workers)
    return arithmetic_source(cfg, workers)


def arithmetic_source(cfg: RLConfig, workers: int) -> TaskSource:
    settings = cfg.tasks
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


def table_source(cfg: RLConfig, catalog: Catalog, workers: int) -> TaskSource:
    """The tasks of a snapshot of an ``rl.tasks`` table (``tasks.table``, ``NAME@REF`` pinning one),
    split by its own ``split`` column, rewarded by their repositories' tests (``rl.rollouts.score``)."""
    from lakehouse.catalog import resolve
    from lakehouse.commit import summary_properties
    from rl.rollouts import score
    from rl.tasks import read_tasks

    table, pinned = resolve(catalog, cfg.tasks.table)
    rows = read_tasks(catalog, pinned.table_name, snapshot_id=pinned.snapshot_id)
    tasks = [RepositoryTask(row.task_id, row.prompt, row) for row in rows]
    train = [t for t in tasks if t.task.split == "train"]
    heldout = [t for t in tasks if t.task.split == "heldout"]
    summary = summary_properties(table.snapshot_by_id(pinned.snapshot_id))
    lineage = {
        "source": "table",
        "table": pinned.table_name,
        "snapshot_id": pinned.snapshot_id,
        "ref": pinned.ref,
        "tasks": len(train),
        "heldout": len(heldout),
        # The raw snapshots the tasks were built from (raw.rl_repositories@…), as the build recorded them.
        "inputs": summary.get("factory.inputs"),
        "build_run_id": summary.get("factory.run-id"),
    }
    timeout = cfg.tasks.timeout_s

    def reward(chosen: Sequence[RepositoryTask], completions: Sequence[str]) -> list[Scored]:
        results = score([t.task for t in chosen], completions, workers=workers, test_timeout=timeout)
        return [Scored(r.reward, r.passed, r.total, r.outcome, r.output, r.duration_s) for r in results]

    return TaskSource(str(pinned), train, heldout, reward, BODY_STOP, lineage, truncatable=True)
