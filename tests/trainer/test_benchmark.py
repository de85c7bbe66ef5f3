"""benchmarks/trainer at tiny size on CPU: it makes its own data, trains, and prints every figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
@pytest.mark.engine  # torchrun, through `factory train`
def test_trainer_benchmark_prints_its_figures(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "trainer" / "run.py"), "--config"]
    command += [str(REPO / "configs" / "demo-train.toml"), "--steps", "3", "--warmup", "1", "--mb", "1"]
    command += ["--vocab", "300", "--peak-tflops", "1.0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert result["device"] == "cpu" and result["ranks"] == 1 and result["steps_measured"] == 2
    assert result["tokens_per_s_per_gpu"] == result["tokens_per_s"] > 0
    assert 0 < result["mfu"] < 1  # against the given 1 TFLOP/s peak
    assert 0 <= result["data_wait_frac"] < 1 and result["peak_mem_gb"] > 0
    assert {"dtype", "compile", "params", "model_tflops", "wall_s"} <= set(result)
