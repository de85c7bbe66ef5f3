"""What `factory run` prints, on real Spark, Iceberg and Dagster."""

from __future__ import annotations

import json

import pytest

from factory_cli.run import materialise
from orchestration.definition_load import load_definition
from tests.orchestration.definitions import two_sources

pytestmark = pytest.mark.engine  # real Spark, Dagster and a real Iceberg catalog


def test_a_run_prints_what_the_factory_decided(spark, catalog, tmp_path, capsys):
    """The gate's verdict and reason were logged at INFO, which `factory run` does not show."""
    path = two_sources(tmp_path / "factory")
    config = path.parent / "web-filter.toml"
    config.write_text('filters = ["size"]\n[size]\nmin_bytes = 1\n')
    path.write_text(path.read_text().replace('filter = "docs"', f'filter = "{config}"', 1))
    lines = (json.dumps({"id": f"r{i}", "text": f"document number {i}"}) for i in range(8))
    (path.parent / "web" / "part-0.jsonl").write_text("\n".join(lines) + "\n")
    materialise(load_definition(path), ["web/production"])
    printed = capsys.readouterr().out
    assert "decided: refinement-gate web: promoted: filtered.web@" in printed, printed[-3000:]
    assert "is the first snapshot: there is nothing to compare it with" in printed

    materialise(load_definition(path), ["web/production"])  # nothing new: nothing decided
    assert "decided:" not in capsys.readouterr().out


def test_a_dagster_home_that_is_not_a_folder_is_refused_before_any_step(tmp_path, monkeypatch):
    from lakehouse.errors import ConfigError

    path = two_sources(tmp_path / "factory")
    (path.parent / "web" / "part-0.jsonl").write_text(json.dumps({"id": "r1", "text": "text"}) + "\n")
    missing = tmp_path / "dagster-home"
    monkeypatch.setenv("DAGSTER_HOME", str(missing))
    with pytest.raises(ConfigError, match=rf"DAGSTER_HOME={missing} is not a folder: create it"):
        materialise(load_definition(path), ["web/raw"])


def test_an_interrupted_run_says_so_and_the_same_command_finishes_it(tmp_path):
    """Ctrl-C mid-step ended in `error: step … failed: dagster._core.errors.DagsterExecutionInterruptedError`."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    path = two_sources(tmp_path / "factory")
    (path.parent / "web" / "part-0.jsonl").write_text(json.dumps({"id": "r1", "text": "some text"}) + "\n")
    env = {**os.environ, "FACTORY_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "factory_cli.main", "run", str(path), "--select", "web/filtered"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    for line in process.stdout:
        if line.startswith("· factory filter"):  # a step at work
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole group
            break
    _, errors = process.communicate(timeout=300)
    assert process.returncode == 130, errors[-3000:]
    assert "interrupted during step web__filtered: run the same command again to finish" in errors
    assert "Traceback" not in errors and "DagsterExecutionInterruptedError" not in errors, errors[-3000:]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
