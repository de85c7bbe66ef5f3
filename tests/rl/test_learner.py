"""The learner end to end: real torchrun with gloo, FSDP2, a pre-trained checkpoint, rewards from the sandbox."""

from __future__ import annotations

import json

import pytest
import torch

from evals.checkpoint_model import load_checkpoint
from rl.families import arithmetic_tasks, sandbox_reward
from tests.conftest import run_factory
from tests.rl.conftest import STEPS, records, rl_train, rollouts
from trainer import checkpoint


def _weights(path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path, torch.device("cpu")).model.state_dict()


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
    assert again == pytest.approx([r for row in step["rewards"] for r in row])

    assert [s for s, _ in checkpoint.complete_checkpoints(two_rank_rl)] == [2, 4]
    final = two_rank_rl / "checkpoints" / "step-4"
    lineage = json.loads((final / "lineage.json").read_text())
    start = json.loads((rl_setup.start / "lineage.json").read_text())
    assert lineage["step"] == 4 and lineage["rl"]["start"]["checkpoint"] == str(rl_setup.start)
    assert lineage["rl"]["start"]["identity"] == load_checkpoint(rl_setup.start, torch.device("cpu")).identity
    assert lineage["manifest"] == start["manifest"] and lineage["components"] == start["components"]  # its data
    assert lineage["rl"]["tasks"]["source"] == "arithmetic" and lineage["rl"]["tasks"]["heldout"] > 0
    assert lineage["rl"]["config"]["rollout"]["group_size"] == 4

    # An RL checkpoint is a checkpoint like any other: evals load it, factory lineage shows it.
    trained, initial = _weights(final), _weights(rl_setup.start)
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    shown = run_factory("lineage", str(two_rank_rl))
    assert shown.returncode == 0, shown.stderr
    assert f"from checkpoint {rl_setup.start}" in shown.stdout and "tasks arithmetic" in shown.stdout


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


@pytest.mark.slow
@pytest.mark.engine
def test_rollouts_do_not_depend_on_the_number_of_ranks(rl_setup, two_rank_rl, tmp_path):
    run_dir = tmp_path / "one-rank"
    proc = rl_train(rl_setup, run_dir, 1, "--set", "train.steps=1", "--set", "eval.every=0")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert rollouts(run_dir)[1] == rollouts(two_rank_rl)[1]  # seeded by task, not by rank
    one, two = records(run_dir, "train")[1], records(two_rank_rl, "train")[1]
    assert one["loss"] == pytest.approx(two["loss"], rel=1e-4, abs=1e-6)
    assert one["reward"] == two["reward"]
