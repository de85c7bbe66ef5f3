"""Training across two "nodes" (one process each, joined by c10d rendezvous on 127.0.0.1, each
launched by `factory train --nnodes 2`): the same per-step losses as one node with two
processes, through a kill and a resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from factory_cli.main import build_parser
from factory_cli.train import torchrun_command
from tests.conftest import REPO, run_factory
from tests.ports import free_port
from tests.trainer.conftest import STEPS, TrainSetup, losses


def two_nodes(setup: TrainSetup, run_dir: Path, *extra: str, env: dict | None = None) -> list[tuple[int, str]]:
    """`factory train` once per node, as each machine of a cluster runs it: (exit status, stderr) of each."""
    endpoint = f"127.0.0.1:{free_port()}"
    args = ["train", "--config", str(setup.config), "--nproc", "1", "--nnodes", "2", "--rdzv-endpoint", endpoint]
    args += ["--rdzv-id", run_dir.name, "--set", f"run.dir='{run_dir}'", *extra]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "factory_cli.main", *args],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _node in range(2)
    ]
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    return [(proc.returncode, err) for proc, err in zip(procs, errors, strict=True)]


@pytest.mark.engine
@pytest.mark.slow
def test_two_nodes_train_like_one_node_of_two_ranks_and_resume(setup, two_rank_run, tmp_path):
    run_dir = tmp_path / "two-nodes"
    killed = two_nodes(setup, run_dir, env={"FACTORY_FAIL_AT": "after-step-5"})
    assert all(code != 0 for code, _ in killed)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-4"]
    assert sorted(losses(run_dir)) == list(range(1, 6))

    resumed = two_nodes(setup, run_dir, "--resume")
    assert [code for code, _ in resumed] == [0, 0], resumed[0][1][-3000:] + resumed[1][1][-3000:]
    reference = losses(two_rank_run)
    assert sorted(reference) == list(range(1, STEPS + 1))
    assert losses(run_dir) == reference  # bit for bit: the same floats as one node of two ranks


def test_one_node_is_standalone_and_several_join_a_rendezvous():
    parse = build_parser("train").parse_args
    one = torchrun_command(parse(["train", "--config", "c.toml", "--nproc", "2"]))
    assert "--standalone" in one and "--nnodes" not in one
    many = torchrun_command(parse(["train", "--config", "c.toml", "--nnodes", "4", "--rdzv-endpoint", "head:29400"]))
    assert "--standalone" not in many
    assert many[many.index("--nnodes") + 1] == "4" and many[many.index("--rdzv-endpoint") + 1] == "head:29400"
    assert many[many.index("--rdzv-backend") + 1] == "c10d"


def test_several_nodes_need_a_rendezvous_endpoint(tmp_path):
    done = run_factory("train", "--config", str(tmp_path / "none.toml"), "--nnodes", "2")
    assert done.returncode == 2 and "--rdzv-endpoint" in done.stderr
