"""An RL run as the UI reads it, made by hand: a start checkpoint (runs/tiny step 2, lineage only),
two snapshots of an ``rl.tasks`` table, the rollouts of two RL runs recorded by ``RolloutRecorder``
(one on the table's tasks, one on the arithmetic family) and an RL checkpoint (runs/rl step 2)
whose lineage.json has the ``rl`` section rl/learner.py writes. No learner runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lakehouse.catalog import ensure_table
from lakehouse.schemas import file_schema
from rl.rollouts_table import RolloutRecorder, rollout_row
from rl.scored import Scored
from rl.tasks import TASKS_SCHEMA, tasks_arrow
from tests.decisions import hand_made_checkpoint, pinned_manifest
from tests.ui.inspected import XSS

TASKS = ("t-add", "t-clamp")
PROMPTS = {"t-add": 'def add(a, b):\n    """<b>Add</b> two numbers."""\n', "t-clamp": "def clamp(x, low, high):\n"}
ARITHMETIC_TASK = "arithmetic/times-7/g/n"  # rl/families.py: "# Return n times 7.\ng = lambda n:"
# (reward, passed, total, outcome) by sample index
SCORES = ((1.0, 2, 2, "passed"), (0.5, 1, 2, "partial"), (0.0, 0, 2, "syntax-error"))


@dataclass(frozen=True)
class RLHome:
    start: Path  # the starting checkpoint
    checkpoint: Path  # the RL checkpoint: runs/rl step 2
    run_id: str  # its RL run, on rl.tasks
    arithmetic_run_id: str
    tasks_snapshot: int  # the rl.tasks snapshot the run drew from (a later one changed the prompts)
    raw_snapshot: int  # what the tasks' build read, as its snapshot records
    rollouts_snapshot: int
    rows: list[dict]  # every row of rl.rollouts


def make_rl_home(home: Path, catalog) -> RLHome:
    manifest = home / "mixtures" / "manifest.json"
    _, _, raw_snapshot = pinned_manifest(catalog, manifest)
    start = hand_made_checkpoint(home / "runs" / "tiny", manifest, 2)
    first = _write_tasks(catalog, PROMPTS, raw_snapshot)
    _write_tasks(catalog, {task: "def changed():\n" for task in TASKS}, raw_snapshot)

    run_dir = home / "runs" / "rl"
    recorder = RolloutRecorder(catalog, "rl-run-1", str(run_dir), [{"table": "rl.tasks", "snapshot_id": first}])
    recorder.add(_rows("heldout", 0, TASKS, samples=1, seed=None))
    for step in (1, 2):
        recorder.add(_rows("train", step, TASKS, samples=3, seed=100 + step))
    recorded = recorder.commit(0, 2)
    arithmetic = RolloutRecorder(catalog, "rl-run-arith", str(home / "elsewhere" / "arith"), [])
    arithmetic.add(_rows("train", 1, (ARITHMETIC_TASK,), samples=2, seed=5))
    arithmetic.commit(0, 1)

    checkpoint = run_dir / "checkpoints" / "step-2"
    checkpoint.mkdir(parents=True)
    inherited = json.loads((start / "lineage.json").read_text())
    rl = {
        "start": {"checkpoint": str(start), "step": 2, "identity": "test", "rl": None},
        "tasks": {
            "source": "table",
            "table": "rl.tasks",
            "snapshot_id": first,
            "ref": None,
            "tasks": 2,
            "heldout": 0,
            "inputs": json.dumps([{"table": "filtered.text", "snapshot_id": raw_snapshot}]),
            "build_run_id": "rl-build-test",
        },
        "config": {
            "run": {"seed": 3},
            "train": {"steps": 2},
            "rollout": {"tasks_per_step": 2, "group_size": 3},
            "grpo": {"kl_beta": 0.04},
            "optim": {"lr": 1e-5},
        },
        "rollouts": recorded,
    }
    lineage = {**inherited, "checkpoint": str(checkpoint), "step": 2, "code_version": "test", "rl": rl}
    (checkpoint / "lineage.json").write_text(json.dumps(lineage))
    (checkpoint / "COMPLETE").write_text("")
    rows = catalog.load_table(("rl", "rollouts")).scan().to_arrow().to_pylist()
    return RLHome(start, checkpoint, "rl-run-1", "rl-run-arith", first, raw_snapshot, recorded["snapshot_id"], rows)


def _rows(kind: str, step: int, tasks, samples: int, seed: int | None) -> list[dict]:
    rows = []
    for task in tasks:
        for index in range(samples):
            reward, passed, total, outcome = SCORES[index]
            scored = Scored(reward, passed, total, outcome, f"{XSS} output of {task} {index}", 0.25)
            completion = f"    return {XSS} # {kind} {step} {task} {index}\n"
            rows.append(rollout_row(kind, step, task, index, completion, scored, seed))
    return rows


def _write_tasks(catalog, prompts: dict[str, str], raw_snapshot: int) -> int:
    table = ensure_table(catalog, ("rl", "tasks"), TASKS_SCHEMA)
    rows = [_task_row(task, prompt, raw_snapshot) for task, prompt in prompts.items()]
    table.append(tasks_arrow(rows, file_schema(table, TASKS_SCHEMA)))
    return catalog.load_table(("rl", "tasks")).current_snapshot().snapshot_id


def _task_row(task: str, prompt: str, raw_snapshot: int) -> dict:
    """A row of ``rl.tasks``: what the pages read of it is the id and the prompt; the rest is filler."""
    text = {f.name: "" for f in TASKS_SCHEMA.fields}
    numbers = {"snapshot_id": raw_snapshot, "first_line": 1, "body_start_line": 2, "body_end_line": 2}
    rewards = {"tests_traced": 1, "original_reward": 1.0, "raise_reward": 0.0, "empty_reward": 0.0}
    return {
        **text,
        **numbers,
        **rewards,
        "task_id": task,
        "kind": "function-body",
        "split": "train",
        "prompt": prompt,
        "single_return": True,
        "tests": ["test_x"],
    }
