"""The RL config: defaults, overrides, and settings refused before any rank starts."""

from __future__ import annotations

import json

import pytest

from lakehouse.errors import ConfigError
from rl.train_config import load_rl_config
from tests.conftest import run_factory

START = {"start": {"checkpoint": "runs/x/checkpoints/step-1"}}


def test_defaults_and_overrides():
    cfg = load_rl_config(None, ["rollout.group_size=4", "grpo.shuffle_rewards=true", "optim.lr=0.01"], raw=START)
    assert cfg.rollout.group_size == 4 and cfg.grpo.shuffle_rewards and cfg.optim.lr == 0.01
    # The trainer's sections with the RL defaults: no weight decay (the KL holds the policy), no warm-up.
    assert cfg.optim.weight_decay == 0.0 and cfg.optim.warmup_steps == 0 and cfg.checkpoint.every == 50
    assert load_rl_config(None, raw={**START, "optim": {"weight_decay": 0.1}}).optim.weight_decay == 0.1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, r"\[start\] section"),
        ({**START, "grpo": {"kl_bta": 0.1}}, r"\[grpo\]: unknown key\(s\) kl_bta; allowed: clip_eps"),
        ({**START, "sampling": {}}, r"unknown config section \[sampling\]"),
        ({**START, "rollout": {"group_size": 1}}, "group_size must be >= 2"),
        ({**START, "rollout": {"temperature": 0}}, "temperature must be > 0"),
        ({**START, "rollout": {"temperature": float("inf")}}, "rollout.temperature must be a finite number, got inf"),
        ({**START, "tasks": {"source": "rl.tasks"}}, "tasks.source must be one of arithmetic, table"),
        ({**START, "tasks": {"source": "table", "table": ""}}, "tasks.table must name a table"),
    ],
)
def test_bad_settings_are_refused_with_what_to_do(raw, message):
    with pytest.raises(ConfigError, match=message):
        load_rl_config(None, raw=raw)


def test_a_split_that_would_leave_ranks_unequal_is_refused():
    cfg = load_rl_config(
        None, ["rollout.tasks_per_step=6", "rollout.group_size=4", "train.micro_batch_size=5"], raw=START
    )
    with pytest.raises(ConfigError, match="tasks_per_step 6 must divide by the number of ranks 4"):
        cfg.check_world(4)
    with pytest.raises(ConfigError, match="each rank's 12 completions must divide by micro_batch_size 5"):
        cfg.check_world(2)


def test_the_command_says_what_is_wrong_and_exits_2(tmp_path):
    config = tmp_path / "rl.toml"
    config.write_text('[start]\ncheckpoint = "x"\n[rollout]\ngroup_size = 1\n')
    proc = run_factory("rl", "train", "--config", str(config), "--nproc", "2")
    assert proc.returncode == 2 and "group_size must be >= 2" in proc.stderr and "Traceback" not in proc.stderr
    missing = run_factory("rl", "train", "--config", str(tmp_path / "absent.toml"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    config.write_text(f'[start]\ncheckpoint = "{tmp_path / "none"}"\n')
    no_start = run_factory("rl", "train", "--config", str(config), "--nproc", "2")
    assert no_start.returncode == 2 and no_start.stderr.startswith(f"error: {tmp_path / 'none'} is not a checkpoint")


def test_a_resume_under_other_settings_is_refused_before_any_rank_starts(tmp_path):
    """A run resumed with train.steps changed went on under another rollouts run id, so its last
    checkpoint's lineage named only the steps after the resume."""
    run_dir = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(f'[start]\ncheckpoint = "{tmp_path / "start"}"\n[run]\ndir = "{run_dir}"\n[train]\nsteps = 6\n')
    step = run_dir / "checkpoints" / "step-6"
    step.mkdir(parents=True)
    (step / "COMPLETE").write_text("")
    started = load_rl_config(config)
    (run_dir / "config.resolved.json").write_text(json.dumps(started.to_dict(), default=list))
    proc = run_factory("rl", "train", "--config", str(config), "--set", "train.steps=8", "--resume")
    assert proc.returncode == 2 and f"{run_dir} was started with other settings (train.steps)" in proc.stderr
    same = run_factory("rl", "train", "--config", str(config), "--resume")  # gets as far as the start checkpoint
    assert same.returncode == 2 and f"{tmp_path / 'start'} is not a checkpoint" in same.stderr, same.stderr


def test_a_run_asked_to_evaluate_with_no_held_out_task_is_warned():
    """A task table of 1-3 tasks held none out, and eval.every then evaluated nothing, silently."""
    from rl.learner import no_heldout_warning

    cfg = load_rl_config(None, ["eval.every=1"], raw=START)
    assert "no held-out task among the 3 tasks" in no_heldout_warning(cfg, 3, 0)
    assert no_heldout_warning(cfg, 3, 1) is None
    assert no_heldout_warning(load_rl_config(None, ["eval.every=0"], raw=START), 3, 0) is None
