"""The learner's tasks from an ``rl.tasks`` snapshot: its own split, a pinned snapshot, rewards from
the repository sandbox, long prompts cut at their start; and a 2-step ``factory rl train`` on an
``rl.tasks`` built from the toy repository, recorded in ``rl.rollouts`` and shown by ``factory lineage``."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from evals.checkpoint_model import load_checkpoint
from lakehouse.catalog import ensure_table, load_table
from lakehouse.schemas import file_schema
from rl.build import BuildOptions, build
from rl.learner import fit_prompts
from rl.rollouts_table import run_rollouts
from rl.task_source import BODY_STOP, load_task_source
from rl.tasks import TASKS_SCHEMA, tasks_arrow
from rl.train_config import load_rl_config
from tests.conftest import run_factory
from tests.rl.conftest import rl_train
from tests.rl.toy_repo import remove_toy_repository, toy_task, write_toy_repository
from trainer import checkpoint
from trainer.parallel import World

_WORLD = World(0, 1, 0, torch.device("cpu"), None)


@pytest.fixture(scope="module")
def toy():
    package = write_toy_repository()
    yield package
    remove_toy_repository(package)


def _write_tasks(catalog, tasks) -> int:
    table = ensure_table(catalog, ("rl", "tasks"), TASKS_SCHEMA)
    rows = [{**dataclasses.asdict(t), "tests": list(t.tests)} for t in tasks]
    table.append(tasks_arrow(rows, file_schema(table, TASKS_SCHEMA)))
    return load_table(catalog, ("rl", "tasks")).current_snapshot().snapshot_id


def _config(start: str = "unused", **tasks):
    raw = {"start": {"checkpoint": start}, "tasks": {"source": "table", "workers": 2, **tasks}}
    return load_rl_config(None, raw=raw)


def test_the_tasks_of_a_pinned_snapshot_split_as_the_table_says_rewarded_by_their_tests(catalog, toy):
    add = toy_task(toy, "add", ["test_add", "test_add_strings"])
    clamp = dataclasses.replace(toy_task(toy, "clamp", ["test_clamp_low", "test_clamp_high"]), split="heldout")
    first = _write_tasks(catalog, [add, clamp])
    _write_tasks(catalog, [dataclasses.replace(add, task_id="later")])  # the current snapshot has 3 tasks

    source = load_task_source(_config(table=f"rl.tasks@{first}"), _WORLD, catalog)
    assert [t.id for t in source.train] == [add.task_id] and [t.id for t in source.heldout] == [clamp.task_id]
    assert source.train[0].prompt == add.prompt and source.stop == BODY_STOP and source.truncatable
    assert source.lineage["table"] == "rl.tasks" and source.lineage["snapshot_id"] == first
    current = load_task_source(_config(), _WORLD, catalog)
    assert len(current.train) == 2 and current.lineage["snapshot_id"] != first

    results = source.reward(
        [source.train[0], source.train[0], source.heldout[0]],
        [add.original_body, "    return a +\n", "    return max(x, low)\n"],
    )
    assert [(r.reward, r.passed, r.total, r.outcome) for r in results] == [
        (1.0, 2, 2, "passed"),
        (0.0, 0, 2, "syntax-error"),
        (0.5, 1, 2, "partial"),
    ]
    assert "assert 9 == 5" in results[2].output and results[0].duration_s > 0


def test_a_refused_table_says_what_to_do(catalog):
    from lakehouse.errors import FactoryError

    with pytest.raises(FactoryError, match=r"rl\.tasks"):
        load_task_source(_config(), _WORLD, catalog)


@pytest.mark.slow
def test_long_prompts_keep_their_end(catalog, toy, rl_setup):
    clamp = toy_task(toy, "clamp", ["test_clamp_low"])
    _write_tasks(catalog, [clamp])
    start = load_checkpoint(rl_setup.start, torch.device("cpu"))
    cfg = _config(str(rl_setup.start))
    cfg.rollout.max_new_tokens = 16
    source = fit_prompts(load_task_source(cfg, _WORLD, catalog), start, cfg)
    (task,) = source.train
    encoder = start.tokenizer.load()
    limit = start.model.cfg.max_seq_len - 16
    assert len(encoder.encode(clamp.prompt, add_special_tokens=False).ids) > limit  # it had to be cut
    assert len(encoder.encode(task.prompt, add_special_tokens=False).ids) <= limit
    assert clamp.prompt.endswith(task.prompt) and task.prompt.endswith("def clamp(x, low, high):\n")
    assert source.lineage["prompts_truncated"] == 1


@pytest.mark.slow
def test_a_run_on_repository_tasks_is_recorded_with_its_lineage(spark, catalog, factory_home, toy, rl_setup, tmp_path):
    built = build(spark, catalog, BuildOptions(paths=(str(toy),), test_timeout=10))
    tasks_snapshot = load_table(catalog, ("rl", "tasks")).current_snapshot().snapshot_id
    run_dir = tmp_path / "repository-run"
    proc = rl_train(
        dataclasses.replace(rl_setup, home=factory_home), run_dir, 1,
        "--set", 'tasks.source="table"', "--set", "train.steps=2", "--set", "rollout.tasks_per_step=2",
        "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=16", "--set", "train.micro_batch_size=0",
        "--set", "checkpoint.every=0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]

    lineage = json.loads((checkpoint.latest_checkpoint(run_dir)[1] / "lineage.json").read_text())
    tasks = lineage["rl"]["tasks"]
    assert (tasks["table"], tasks["snapshot_id"], tasks["tasks"]) == ("rl.tasks", tasks_snapshot, 2)
    assert tasks["build_run_id"] == built.run_id and tasks["prompts_truncated"] >= 1
    (raw,) = json.loads(tasks["inputs"])
    assert raw["table"] == "raw.rl_repositories"
    rows = run_rollouts(catalog, lineage["rl"]["rollouts"]["run_id"])
    assert (
        lineage["rl"]["rollouts"]["snapshot_id"]
        == load_table(catalog, ("rl", "rollouts")).current_snapshot().snapshot_id
    )
    # 2 steps of 2 tasks x 2 samples; the toy's two tasks are both in the train split: no held-out rows.
    assert [(r["kind"], r["step"], r["sample_index"]) for r in rows] == [
        ("train", step, sample) for step in (1, 2) for _ in range(2) for sample in range(2)
    ]
    assert len({r["task_id"] for r in rows if r["step"] == 1}) == 2  # the two toy tasks, each a group
    assert all(r["total"] == 2 and 0 <= r["reward"] <= 1 and r["reward"] == r["passed"] / 2 for r in rows)

    shown = run_factory("lineage", str(run_dir), env={"FACTORY_HOME": str(factory_home)})
    assert shown.returncode == 0, shown.stderr
    assert (
        f"tasks rl.tasks@{tasks_snapshot} (built by {built.run_id} from raw.rl_repositories@{raw['snapshot_id']})"
        in shown.stdout
    )
    assert f"rollouts rl.rollouts@{lineage['rl']['rollouts']['snapshot_id']}" in shown.stdout
    assert "config: seed 3, 2 steps of 2 tasks x 2 samples" in shown.stdout
