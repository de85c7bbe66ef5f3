"""The RL config: defaults, overrides, and settings refused before any rank starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakehouse.errors import ConfigError
from rl.train_config import load_rl_config
from tests.conftest import factory_here, run_factory

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


def _rl_checkpoint(run_dir: Path, step: int, config: dict | None) -> Path:
    """A complete RL checkpoint folder (lineage only) whose lineage records ``config`` under rl.config."""
    folder = run_dir / "checkpoints" / f"step-{step}"
    folder.mkdir(parents=True)
    rl = {"start": {"checkpoint": "runs/x/checkpoints/step-1", "step": 1}, "tasks": {"source": "arithmetic"}}
    lineage = {
        "manifest": {"path": "m.json", "fingerprint": "f1"},
        "tokenizer": {"path": "t.json", "sha256": "s1"},
        "loader_position": {"next_global_batch": 1, "sequences": 8, "tokens": 256},
        "step": step,
        "rl": {**rl, **({"config": json.loads(json.dumps(config, default=list))} if config else {})},
    }
    (folder / "lineage.json").write_text(json.dumps(lineage))
    (folder / "COMPLETE").write_text("")
    return folder / "lineage.json"


def test_a_resume_under_other_settings_is_refused_before_any_rank_starts(tmp_path):
    """A run resumed with train.steps changed went on under another rollouts run id, so its last
    checkpoint's lineage named only the steps after the resume."""
    run_dir = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(f'[start]\ncheckpoint = "{tmp_path / "start"}"\n[run]\ndir = "{run_dir}"\n[train]\nsteps = 6\n')
    started = load_rl_config(config)
    _rl_checkpoint(run_dir, 6, started.to_dict())
    proc = run_factory("rl", "train", "--config", str(config), "--set", "train.steps=8", "--resume")
    assert proc.returncode == 2 and f"{run_dir} was started with other settings (train.steps)" in proc.stderr
    same = run_factory("rl", "train", "--config", str(config), "--resume")  # gets as far as the start checkpoint
    assert same.returncode == 2 and f"{tmp_path / 'start'} is not a checkpoint" in same.stderr, same.stderr


def test_a_fresh_start_into_a_folder_holding_checkpoints_is_refused(tmp_path, capsys):
    """Without --resume, the run started at step 0 in the earlier run's folder: its checkpoints
    went among the earlier ones (step-2 beside an older step-6, the newest still the older run's)."""
    run_dir = tmp_path / "run"
    config = tmp_path / "rl.toml"
    config.write_text(f'[start]\ncheckpoint = "{tmp_path / "start"}"\n[run]\ndir = "{run_dir}"\n')
    _rl_checkpoint(run_dir, 6, load_rl_config(config).to_dict())
    fresh = factory_here(capsys, "rl", "train", "--config", str(config))
    assert fresh.returncode == 2, fresh.stderr
    assert f"{run_dir} holds checkpoints of an earlier run: pass --resume to continue it" in fresh.stderr


def test_a_resume_is_bound_to_the_config_its_checkpoint_recorded_not_to_config_resolved(tmp_path):
    """config.resolved.json is rewritten by every start, and a checkpoint without one (or whose
    lineage records no rl.config) resumed unchecked: the newest checkpoint's rl.config binds it."""
    from rl.lineage import check_run_dir

    run_dir = tmp_path / "run"
    cfg = load_rl_config(None, [f"run.dir='{run_dir}'", "train.steps=6"], raw=START)
    _rl_checkpoint(run_dir, 6, cfg.to_dict())
    longer = load_rl_config(None, [f"run.dir='{run_dir}'", "train.steps=8"], raw=START)
    (run_dir / "config.resolved.json").write_text(json.dumps(longer.to_dict(), default=list))  # a later start's
    with pytest.raises(ConfigError, match=r"started with other settings \(train.steps\)"):
        check_run_dir(longer, resume=True)
    check_run_dir(cfg, resume=True)
    check_run_dir(
        load_rl_config(None, [f"run.dir='{tmp_path / 'new'}'"], raw=START), resume=True
    )  # no checkpoint: step 0
    no_config = tmp_path / "no-config"
    _rl_checkpoint(no_config, 6, None)
    with pytest.raises(
        ConfigError, match=r"its newest checkpoint records no rl\.config to compare this one with"
    ) as no:
        check_run_dir(load_rl_config(None, [f"run.dir='{no_config}'"], raw=START), resume=True)
    assert "Restore that lineage.json from a copy of the checkpoint, or train into a new run.dir" in str(no.value)


def test_a_run_asked_to_evaluate_with_no_held_out_task_is_warned():
    """A task table of 1-3 tasks held none out, and eval.every then evaluated nothing, silently."""
    from rl.learner import no_heldout_warning

    cfg = load_rl_config(None, ["eval.every=1"], raw=START)
    assert "no held-out task among the 3 tasks" in no_heldout_warning(cfg, 3, 0)
    assert no_heldout_warning(cfg, 3, 1) is None
    assert no_heldout_warning(load_rl_config(None, ["eval.every=0"], raw=START), 3, 0) is None
