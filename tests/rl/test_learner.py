"""The learner end to end: real torchrun with gloo, FSDP2, a pre-trained checkpoint, rewards from the sandbox."""

from __future__ import annotations

import json

import pytest
import torch

from evals.checkpoint_model import load_checkpoint
from lakehouse.catalog import EMBEDDED_CATALOG_NAME, embedded_catalog_properties, load_table
from rl.families import arithmetic_tasks, is_heldout, sandbox_reward
from rl.rollouts_table import run_rollouts
from tests.conftest import run_factory
from tests.rl.conftest import STEPS, records, rl_train, rollouts
from trainer import checkpoint


def _weights(path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path, torch.device("cpu")).model.state_dict()


def _catalog(setup):
    from pyiceberg.catalog import load_catalog

    return load_catalog(EMBEDDED_CATALOG_NAME, **embedded_catalog_properties(setup.home))


def _rollouts_table(setup):
    return load_table(_catalog(setup), ("rl", "rollouts"))


def _run_rows(setup, run_dir) -> list[dict]:
    lineage = json.loads((checkpoint.latest_checkpoint(run_dir)[1] / "lineage.json").read_text())
    return run_rollouts(_catalog(setup), lineage["rl"]["rollouts"]["run_id"])


def _comparable(rows: list[dict]) -> list[dict]:
    """A run's rows without what names the run, the code that ran it (a commit between a run and its
    resume changes it) or what was measured (the sandbox's wall time)."""
    dropped = ("rollout_id", "run_id", "run_dir", "duration_s", "code_version")
    return [{k: v for k, v in row.items() if k not in dropped} for row in rows]


@pytest.mark.slow
@pytest.mark.engine
def test_a_run_logs_evaluates_and_checkpoints_with_lineage(rl_setup, two_rank_rl):
    train = records(two_rank_rl, "train")
    assert sorted(train) == list(range(1, STEPS + 1))
    for record in train.values():
        assert 0 <= record["reward"] <= 1 and record["kl"] >= 0 and 0 <= record["clip_frac"] <= 1
        assert 0 < record["completion_tokens"] <= 2 and 0 <= record["flat_groups"] <= 1
    # Some group's samples scored differently, and the policy moved: the run had something to learn from.
    assert any(r["flat_groups"] < 1 and r["grad_norm"] > 0 for r in train.values())
    evals = records(two_rank_rl, "eval")
    assert sorted(evals) == [0, 2, 4]  # before the first step, every 2, and the last
    assert all(e["tasks"] == 6 and len(e["rewards"]) == 6 for e in evals.values())

    # The rewards logged are those the sandbox gives the logged completions.
    tasks = {t.id: t for t in arithmetic_tasks()}
    step = rollouts(two_rank_rl)[1]
    assert len(step["tasks"]) == 4 and all(len(c) == 4 for c in step["completions"])
    flat = [(tasks[t], c) for t, row in zip(step["tasks"], step["completions"], strict=True) for c in row]
    again = sandbox_reward(5, 2)([t for t, _ in flat], [c for _, c in flat])
    assert [s.reward for s in again] == pytest.approx([r for row in step["rewards"] for r in row])

    assert [s for s, _ in checkpoint.complete_checkpoints(two_rank_rl)] == [2, 4]
    final = two_rank_rl / "checkpoints" / "step-4"
    lineage = json.loads((final / "lineage.json").read_text())
    start = json.loads((rl_setup.start / "lineage.json").read_text())
    assert lineage["step"] == 4 and lineage["rl"]["start"]["checkpoint"] == str(rl_setup.start)
    assert lineage["rl"]["start"]["identity"] == load_checkpoint(rl_setup.start, torch.device("cpu")).identity
    assert lineage["manifest"] == start["manifest"] and lineage["components"] == start["components"]  # its data
    assert lineage["rl"]["tasks"]["source"] == "arithmetic" and lineage["rl"]["tasks"]["heldout"] > 0
    assert lineage["rl"]["config"]["rollout"]["group_size"] == 4

    # rl.rollouts: every rollout of every step and every held-out completion once, as the run logged them.
    table = _rollouts_table(rl_setup)
    recorded = lineage["rl"]["rollouts"]
    assert recorded["table"] == "rl.rollouts" and recorded["snapshot_id"] == table.current_snapshot().snapshot_id
    rows = run_rollouts(_catalog(rl_setup), recorded["run_id"])
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert len(train_rows) == STEPS * 4 * 4
    logged = rollouts(two_rank_rl)
    for row in train_rows:
        line = logged[row["step"]]
        position = line["tasks"].index(row["task_id"])
        assert row["completion"] == line["completions"][position][row["sample_index"]]
        assert row["reward"] == row["passed"] / row["total"]
        assert row["reward"] == pytest.approx(line["rewards"][position][row["sample_index"]])  # float32 there
        assert row["seed"] is not None and row["run_dir"] == str(two_rank_rl)
    heldout = [r for r in rows if r["kind"] == "heldout"]
    assert sorted({r["step"] for r in heldout}) == [0, 2, 4] and len(heldout) == 3 * 6
    assert all(r["seed"] is None and r["sample_index"] == 0 for r in heldout)
    heldout_ids = [t.id for t in arithmetic_tasks() if is_heldout(t.id, 0.1)][:6]
    for at, found in evals.items():
        by_task = {r["task_id"]: r["reward"] for r in heldout if r["step"] == at}
        assert [by_task[t] for t in heldout_ids] == found["rewards"]
    assert {r["outcome"] for r in rows} <= {"passed", "partial", "failed", "syntax-error", "timeout", "error"}
    # Committed with the checkpoints, not once a step: one snapshot at step 2 and one at step 4.
    assert [s.summary["factory.run-id"] for s in table.snapshots()] == [
        f"{recorded['run_id']}.steps-0-2",
        f"{recorded['run_id']}.steps-2-4",
    ]

    # An RL checkpoint is a checkpoint like any other: evals load it, factory lineage shows it.
    trained, initial = _weights(final), _weights(rl_setup.start)
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    shown = run_factory("lineage", str(two_rank_rl))
    assert shown.returncode == 0, shown.stderr
    assert f"from checkpoint {rl_setup.start}" in shown.stdout and "tasks arithmetic" in shown.stdout
    assert f"rollouts rl.rollouts@{recorded['snapshot_id']} (run {recorded['run_id']}" in shown.stdout


@pytest.mark.slow
@pytest.mark.engine
def test_a_killed_run_resumes_to_the_same_rollouts_and_weights(rl_setup, two_rank_rl, tmp_path):
    run_dir = tmp_path / "killed"
    killed = rl_train(rl_setup, run_dir, 2, env={"FACTORY_FAIL_AT": "after-step-3"})
    assert killed.returncode != 0
    assert [s for s, _ in checkpoint.complete_checkpoints(run_dir)] == [2]

    resumed = rl_train(rl_setup, run_dir, 2, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert rollouts(run_dir) == rollouts(two_rank_rl)  # step 3 sampled again from the step-2 checkpoint: the same
    assert records(run_dir, "train") == records(two_rank_rl, "train")  # bit for bit: the same floats
    assert records(run_dir, "eval") == records(two_rank_rl, "eval")
    resumed_weights, reference = _weights(run_dir), _weights(two_rank_rl)
    assert all(torch.equal(resumed_weights[k], reference[k]) for k in reference)

    # rl.rollouts: the steps after the step-2 checkpoint were made again and committed once, with the
    # same rows as the run never stopped; a run killed after that commit, before its checkpoint, and
    # resumed again commits nothing twice.
    again_dir = tmp_path / "killed-after-commit"
    assert rl_train(rl_setup, again_dir, 2, env={"FACTORY_FAIL_AT": "after-rollouts-commit-4"}).returncode != 0
    assert [s for s, _ in checkpoint.complete_checkpoints(again_dir)] == [2]
    assert rl_train(rl_setup, again_dir, 2, "--resume").returncode == 0
    expected = _comparable(_run_rows(rl_setup, two_rank_rl))
    for resumed_dir in (run_dir, again_dir):
        rows = _run_rows(rl_setup, resumed_dir)
        keys = [(r["kind"], r["step"], r["task_id"], r["sample_index"]) for r in rows]
        assert len(keys) == len(set(keys)) == len(expected)
        assert _comparable(rows) == expected


@pytest.mark.slow
@pytest.mark.engine
def test_rollouts_do_not_depend_on_the_number_of_ranks(rl_setup, two_rank_rl, tmp_path):
    run_dir = tmp_path / "one-rank"
    # --resume into a new folder starts at step 0, saying so only without -q.
    proc = rl_train(rl_setup, run_dir, 1, "--set", "train.steps=1", "--set", "eval.every=0", "-q", "--resume")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[train step" not in proc.stderr and "[start step" not in proc.stderr  # -q after the subcommand
    assert "no complete checkpoint" not in proc.stderr, proc.stderr[-4000:]
    assert rollouts(run_dir)[1] == rollouts(two_rank_rl)[1]  # seeded by task, not by rank
    one, two = records(run_dir, "train")[1], records(two_rank_rl, "train")[1]
    assert one["loss"] == pytest.approx(two["loss"], rel=1e-4, abs=1e-6)
    assert one["reward"] == two["reward"]
