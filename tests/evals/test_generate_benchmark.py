"""benchmarks/generate at a small size: it makes its tokenizer, checks both sides agree and prints every figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow  # trains a tokenizer on 4 MB of the standard library
@pytest.mark.engine  # Spark, through the factory commands that make that tokenizer's table
def test_generate_benchmark_prints_its_figures(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "generate" / "run.py"), "--presets", "tiny"]
    command += ["--new-tokens", "4", "40", "--repeats", "2", "--vocab", "300", "--max-seq-len", "1024"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert sorted(result["median_ratio"]) == ["tiny/4", "tiny/40"]
    runs = result["runs"]
    assert [(r["repeat"], r["new_tokens"]) for r in runs] == [(1, 4), (1, 40), (2, 4), (2, 40)]
    assert all(r["ours_tokens_s"] > 0 and r["reference_tokens_s"] > 0 for r in runs)
    assert all(r["ratio"] == pytest.approx(r["ours_tokens_s"] / r["reference_tokens_s"]) for r in runs)
