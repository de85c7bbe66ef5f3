"""What a start in a run folder may do: a fresh start over checkpoints and a resume under settings
that change the run are refused before torchrun starts; a resume that trains nothing says so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakehouse.errors import ConfigError, InputError
from tests.conftest import REPO, run_factory
from tests.trainer.conftest import STEPS, TrainSetup
from trainer import checkpoint
from trainer.config import load_config
from trainer.resume import changed_settings, check_run_dir, check_start, resolve_vocab_size

RAW = {"data": {"manifest": "m.json", "tokenizer": "t.json", "seq_len": 64}, "model": {"preset": "tiny"}}


def _fake_run(run_dir: Path, *sets: str) -> None:
    """A run folder whose step-4 checkpoint recorded the config ``RAW`` with ``sets`` (lineage only)."""
    cfg = load_config(None, [f"run.dir='{run_dir}'", *sets], raw=RAW)
    resolve_vocab_size(cfg, 300)
    step = run_dir / "checkpoints" / "step-4"
    step.mkdir(parents=True)
    lineage = {
        "manifest": {"path": "m.json", "fingerprint": "f1"},
        "tokenizer": {"path": "t.json", "sha256": "s1"},
        "loader_position": {"next_global_batch": 4, "sequences": 32, "tokens": 2048},
        "step": 4,
        "config": json.loads(json.dumps(cfg.to_dict(), default=list)),
    }
    (step / "lineage.json").write_text(json.dumps(lineage))
    (step / "COMPLETE").write_text(json.dumps({"step": 4, "world_size": 1}))


def _check(run_dir: Path, *sets: str, resume: bool = True, fingerprint: str = "f1", sha: str = "s1") -> None:
    cfg = load_config(None, [f"run.dir='{run_dir}'", *sets], raw=RAW)
    resolve_vocab_size(cfg, 300)
    check_run_dir(cfg, resume, fingerprint, sha)


def test_a_fresh_start_into_a_folder_of_checkpoints_is_refused(tmp_path):
    _fake_run(tmp_path)
    with pytest.raises(ConfigError, match="holds checkpoints of an earlier run: pass --resume to continue it"):
        _check(tmp_path, resume=False)
    _check(tmp_path / "empty", resume=False)  # no checkpoint: a start, with or without --resume
    _check(tmp_path / "empty", resume=True)


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["optim.lr=0.03"], "optim.lr"),
        (["optim.betas=[0.8, 0.95]", "optim.weight_decay=0.0"], "optim.betas[0], optim.weight_decay"),
        (["model.dim=128"], "model.dim, model.hidden_dim"),
        (["model.sliding_window=8", "model.rope_theta=500000.0"], "model.rope_theta, model.sliding_window"),
        (["run.seed=1", "train.grad_clip=0.5"], "run.seed, train.grad_clip"),
        (["data.seq_len=32", "data.num_shards=4"], "data.num_shards, data.seq_len, model.max_seq_len"),
    ],
)
def test_a_resume_under_settings_that_change_the_run_is_refused_naming_them(tmp_path, sets, named):
    _fake_run(tmp_path)
    with pytest.raises(ConfigError, match="these settings differ") as refused:
        _check(tmp_path, *sets)
    assert f"step-4: {named}. Resume with the config it started with" in str(refused.value)
    assert "or train into a new run.dir" in str(refused.value)


def test_a_resume_on_other_data_is_refused_and_settings_that_leave_steps_alone_may_change(tmp_path):
    _fake_run(tmp_path)
    with pytest.raises(ConfigError, match=r"data.manifest \(another fingerprint\), data.tokenizer \(another sha256\)"):
        _check(tmp_path, fingerprint="f2", sha="s2")
    may_change = [
        "train.steps=20",
        "train.micro_batch_size=2",
        "train.compile=true",
        "data.backend='ray'",
        "data.manifest='moved/m.json'",
        "eval.every=5",
        "eval.batches=3",
        "checkpoint.every=1",
        "checkpoint.keep=9",
        "run.metrics_port=9100",
        "mlflow.enabled=false",
    ]
    _check(tmp_path / ".." / tmp_path.name, *may_change)  # run.dir spelled otherwise too
    assert changed_settings({"optim": {"lr": 0.003}}, {"optim": {"lr": 0.003}}) == []


def test_a_resume_from_a_checkpoint_that_records_no_config_is_refused_and_its_data_still_compared(tmp_path):
    """A lineage.json without "config" resumed unchecked: neither the settings nor the manifest's
    fingerprint and the tokenizer's sha256 were compared. It is refused, as factory eval refuses
    it, and factory lineage still prints it (it shows no config)."""
    from trainer.lineage import lineage_in

    _fake_run(tmp_path)
    file = tmp_path / "checkpoints" / "step-4" / "lineage.json"
    lineage = json.loads(file.read_text())
    del lineage["config"]
    file.write_text(json.dumps(lineage))
    with pytest.raises(ConfigError, match='its newest checkpoint records no "config" to compare this one with') as no:
        _check(tmp_path)
    assert f"({file} lacks it: the file is damaged or was edited). Restore that lineage.json from a copy" in str(
        no.value
    )
    assert str(no.value).endswith("or train into a new run.dir")
    with pytest.raises(ConfigError, match="records no") as other_data:
        _check(tmp_path, fingerprint="f2", sha="s2")
    assert "; and data.manifest (another fingerprint), data.tokenizer (another sha256) differ from it" in str(
        other_data.value
    )
    assert lineage_in(file)["step"] == 4  # factory lineage and the UI do without a config
    with pytest.raises(InputError, match="lacks config of a checkpoint's lineage"):
        lineage_in(file, with_config=True)  # factory eval and export build the model from it


def test_a_vocab_size_below_the_tokenizers_is_refused_naming_both():
    cfg = load_config(None, ["model.vocab_size=5"], raw=RAW)
    with pytest.raises(ConfigError, match=r"model.vocab_size 5 is smaller than the tokenizer's vocabulary of 300"):
        resolve_vocab_size(cfg, 300)
    default = load_config(None, [], raw=RAW)
    resolve_vocab_size(default, 300)
    assert default.model.vocab_size == 300


# --- through `factory train`, on the shared reference run (its checkpoints: steps 4 and 6) ----------


def _factory_train(setup: TrainSetup, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_factory(
        "train", "--config", str(setup.config), "--nproc", "2", "--set", f"run.dir='{run_dir}'", *extra, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "holds checkpoints of an earlier run: pass --resume to continue it, or choose another run.dir"),
        (["--resume", "--set", "optim.lr=0.03"], "these settings differ from its checkpoint"),
        (["--resume", "--set", "model.dim=128"], ": model.dim, model.hidden_dim. Resume with"),
        (
            ["--resume", "--set", "model.sliding_window=8", "--set", "model.rope_theta=500000.0"],
            ": model.rope_theta, model.sliding_window. Resume with",
        ),
    ],
)
def test_factory_train_refuses_a_start_that_would_not_continue_the_run_before_torchrun(
    setup, two_rank_run, extra, message
):
    before = (two_rank_run / "config.resolved.json").read_text()
    done = _factory_train(setup, two_rank_run, *extra)
    assert done.returncode == 2 and done.stderr.startswith("error: "), done.stderr[-4000:]
    assert message in done.stderr and "(rank" not in done.stderr  # no rank was started
    assert (two_rank_run / "config.resolved.json").read_text() == before


@pytest.mark.slow
def test_factory_train_refuses_a_vocab_size_below_the_tokenizers_before_torchrun(setup, tmp_path):
    from streaming_loader.tokenize import load_tokenizer_spec

    vocab = load_tokenizer_spec(setup.home / "tokenizer.json").vocab_size
    done = _factory_train(setup, tmp_path / "run", "--set", "model.vocab_size=5")
    assert done.returncode == 2, done.stderr[-4000:]
    assert f"model.vocab_size 5 is smaller than the tokenizer's vocabulary of {vocab}" in done.stderr
    assert "(rank" not in done.stderr


@pytest.mark.slow
def test_the_reference_run_may_resume_with_more_steps_and_other_evals(setup, two_rank_run):
    sets = [f"run.dir='{two_rank_run}'", "train.steps=12", "eval.every=2", "checkpoint.keep=5"]
    check_start(load_config(setup.config, sets), resume=True)  # what factory train checks: passes


@pytest.mark.slow
def test_a_resume_past_train_steps_says_that_nothing_ran(setup, two_rank_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(two_rank_run, run_dir)
    command = [sys.executable, "-m", "trainer.train", "--config", str(setup.config), "--resume"]
    command += ["--set", f"run.dir='{run_dir}'", "--set", f"train.steps={STEPS - 2}"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"nothing to train: {run_dir}'s newest checkpoint is at step {STEPS}, past train.steps {STEPS - 2}" in (
        done.stderr
    )
    assert [s for s, _ in checkpoint.complete_checkpoints(run_dir)] == [4, STEPS]  # none written


@pytest.mark.slow
def test_each_rank_refuses_a_changed_resume_when_started_without_factory_train(setup, two_rank_run, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(two_rank_run, run_dir)
    command = [sys.executable, "-m", "trainer.train", "--config", str(setup.config), "--resume"]
    command += ["--set", f"run.dir='{run_dir}'", "--set", "optim.lr=0.03", "--set", "train.steps=8"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-4000:]
    assert "error (rank 0): --resume continues the run" in done.stderr and ": optim.lr. Resume with" in done.stderr
    assert [s for s, _ in checkpoint.complete_checkpoints(run_dir)] == [4, STEPS]  # nothing trained
