"""A pre-trained checkpoint to start from (the evals' tiny corpus, 2 steps, one process) and an RL
run on 2 torchrun ranks (gloo, FSDP2) launched through ``factory rl train``: the reference that
the other runs are compared with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, run_factory
from tests.evals.conftest import build_corpus_and_config

STEPS = 4

# The standard library's own tests, which the stdlib tasks run: Debian and Ubuntu ship them apart
# (libpython3.X-testsuite), and .ci/run installs that package where it is missing.
_STDLIB = Path(sysconfig.get_path("stdlib"))
needs_stdlib_tests = pytest.mark.skipif(
    not (_STDLIB / "test" / "test_colorsys.py").is_file(),
    reason=f"{_STDLIB}/test holds no test suite: apt-get install lib{_STDLIB.name}-testsuite",
)


@dataclass(frozen=True)
class RLSetup:
    start: Path  # the pre-trained checkpoint
    config: Path  # the RL config, run.dir set per run with --set
    home: Path  # the FACTORY_HOME whose catalog holds the runs' rl.rollouts


@pytest.fixture(scope="session")
def rl_setup(tmp_path_factory) -> RLSetup:
    home = tmp_path_factory.mktemp("rl-home")
    train_config = build_corpus_and_config(home)
    run_dir = home / "runs" / "start"
    # 64 positions: the family's prompts in this small tokenizer and a completion fit.
    command = [sys.executable, "-m", "trainer.train", "--config", str(train_config)]
    command += ["--set", f"run.dir='{run_dir}'", "--set", "data.seq_len=64"]
    proc = subprocess.run(
        command, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (start,) = sorted((run_dir / "checkpoints").iterdir())
    config = home / "rl.toml"
    config.write_text(
        f"""
[start]
checkpoint = "{start}"

[run]
seed = 3

[tasks]
heldout_limit = 6
workers = 1

[rollout]
group_size = 4
tasks_per_step = 4
max_new_tokens = 2

[grpo]
updates_per_batch = 2
kl_beta = 0.04

[train]
steps = {STEPS}
micro_batch_size = 4

[optim]
lr = 0.01

[eval]
every = 2

[checkpoint]
every = 2
keep = 2
"""
    )
    return RLSetup(start, config, home)


def rl_train(setup: RLSetup, run_dir: Path, nproc: int, *extra: str, env: dict | None = None):
    return run_factory(
        "rl", "train", "--config", str(setup.config), "--nproc", str(nproc), "--set", f"run.dir='{run_dir}'", *extra,
        env={"OMP_NUM_THREADS": "1", "FACTORY_HOME": str(setup.home), **(env or {})}, timeout=900,
    )  # fmt: skip


def records(run_dir: Path, kind: str) -> dict[int, dict]:
    """Step → the metrics record of ``kind``; a step logged twice (before a crash and after the
    resume) keeps its last, without the fields that measure time."""
    found = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == kind:
            found[record["step"]] = {k: v for k, v in record.items() if k not in ("time", "rollout_s", "update_s")}
    return found


def rollouts(run_dir: Path) -> dict[int, dict]:
    """Step → its line of rollouts.jsonl (the last, for a step run again after a resume)."""
    lines = (run_dir / "rollouts.jsonl").read_text().splitlines()
    return {record["step"]: record for record in map(json.loads, lines)}


@pytest.fixture(scope="session")
def two_rank_rl(rl_setup, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("rl-runs") / "two-rank"
    proc = rl_train(rl_setup, run_dir, 2)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run_dir
