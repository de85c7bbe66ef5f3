"""A factory run by the real Dagster daemon over a two-source definition, with nobody calling a
`factory` command: the sensors ingest and refine each source, the gates promote the first
snapshots, the mixture is searched, the run trains and the checkpoint sensor evaluates it. Then
new files appear in one source: the sensor refines them, the gate ablates; the daemon is killed,
with every process it started, just before the gate records its decision, and started again:
the run is found dead, retried, and the decision is recorded exactly once; the mixture is
searched again, warm-started, and the next run trains on it and is evaluated. The test only
reads the tables and the factory's files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lakehouse.decisions import read_decisions
from orchestration.definition import load_definition
from orchestration.layout import mixture_folder, read_current, run_folder
from orchestration.state import head, tagged
from tests.conftest import REPO
from tests.orchestration.definitions import DEMO_TRAIN, code_files, two_sources, web_records

pytestmark = [pytest.mark.engine, pytest.mark.slow]

TINY = ["train.steps=4", "eval.every=4", "eval.batches=1", "checkpoint.every=4", "data.global_batch_size=4",
        "data.seq_len=64", "data.num_shards=1", "optim.warmup_steps=1"]  # fmt: skip
DEFINITION = f"""
[mixtures.searched]
components = ["code", "web"]
heldout_documents = 4
search = {{ config = "{DEMO_TRAIN}", trials = 6, set = {json.dumps(TINY)}, candidates = 200, top = 20 }}

[runs.small]
config = "{DEMO_TRAIN}"
mixture = "searched"
set = {json.dumps(TINY)}

[evals.loss]
suites = ["heldout"]
cadence = "checkpoint"

[policies.refinement_gate]
enabled = true
config = "{DEMO_TRAIN}"
set = {json.dumps(TINY)}
seeds = 2

[policies.mixture_redetermination]
enabled = true
"""
INSTANCE = """
run_launcher:
  module: orchestration.launcher
  class: LocalRunLauncher
run_monitoring:
  enabled: true
  poll_interval_seconds: 3
run_retries:
  enabled: true
  max_retries: 2
  retry_on_asset_or_op_failure: false
telemetry:
  enabled: false
"""


class Daemon:
    """`dagster-daemon run -m orchestration.definitions` in a session of its own."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("a") as out:
            out.write(f"\n==== daemon started at {time.strftime('%X')} ====\n")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-m", "orchestration.definitions"],
            cwd=REPO, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL the daemon and every process under it (code server, run workers, their commands,
        torchrun, Ray): a machine that lost power, as far as these processes can tell."""
        for _ in range(3):
            for pid in [*_descendants(self.proc.pid), self.proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        self.proc.wait(timeout=30)

    def tail(self, lines: int = 80) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def wait_for(what: str, check: Callable[[], object], daemon: Daemon, timeout: float) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if daemon.proc.poll() is not None:
            pytest.fail(f"the daemon exited ({daemon.proc.returncode}) while waiting for {what}:\n{daemon.tail()}")
        time.sleep(2)
    pytest.fail(f"no {what} after {timeout:.0f} s; the daemon's log ends:\n{daemon.tail()}")


def test_the_daemon_runs_the_factory_and_a_killed_decision_is_recorded_once(catalog, factory_home, tmp_path):
    folder = tmp_path / "factory"
    code_files(folder / "code", 0, 16)
    web_records(folder / "web", "part-0.jsonl", 0, 30)
    path = two_sources(folder, runs=DEFINITION)
    definition = load_definition(path)
    home = tmp_path / "dagster-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE)
    env = {**os.environ, "DAGSTER_HOME": str(home), "FACTORY_DEFINITION": str(path), "FACTORY_HOME": str(factory_home)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    log = tmp_path / "daemon.log"

    def evaluated_run() -> dict | None:
        """The run's current folder once its last checkpoint's eval rows are in evals.results."""
        from evals.results import checkpoint_results

        record = read_current(run_folder(definition, "small"))
        if record is None:
            return None
        final = Path(record["run_dir"]) / "checkpoints" / "step-4"
        return record if (final / "COMPLETE").exists() and checkpoint_results(catalog, str(final)) else None

    daemon = Daemon(env, log)
    try:
        first = wait_for("first evaluated run", evaluated_run, daemon, timeout=600)
        gates = [d for d in read_decisions(catalog, factory="team") if d["kind"] == "refinement-gate"]
        assert sorted(d["subject"] for d in gates) == ["code", "web"]
        daemon.kill()

        # New files, and a daemon that will be killed just before the gate records its decision.
        paused = tmp_path / "paused-gate"
        paused.mkdir()
        daemon = Daemon({**env, "FACTORY_PAUSE_AT": f"gate-before-record:{paused}"}, log)
        production = tagged(catalog, "decontaminated.code")
        code_files(folder / "code", 16, 3)
        wait_for("the gate's ablation to finish", lambda: (paused / "paused").exists(), daemon, timeout=600)
        assert not [d for d in read_decisions(catalog, factory="team") if d["inputs"].get("production") == production]
        daemon.kill()

        daemon = Daemon(env, log)

        def second_run() -> dict | None:
            record = evaluated_run()
            return record if record and record["run_dir"] != first["run_dir"] else None

        second = wait_for("the run on the re-determined mixture, evaluated", second_run, daemon, timeout=600)
    finally:
        daemon.kill()

    decisions = read_decisions(catalog, factory="team")
    ids = [d["decision_id"] for d in decisions]
    assert len(ids) == len(set(ids))
    (gate,) = [d for d in decisions if d["kind"] == "refinement-gate" and d["inputs"]["production"] == production]
    candidate = gate["inputs"]["candidate"]
    assert gate["verdict"] == "promoted" and gate["evidence"]["sweep_id"].startswith("gate-code")
    assert tagged(catalog, "decontaminated.code") == candidate == head(catalog, "decontaminated.code")
    mixtures = [d for d in decisions if d["kind"] == "mixture"]
    assert [d["verdict"] for d in mixtures] == ["determined", "determined"]
    assert mixtures[1]["inputs"]["prior"] == mixtures[0]["after"]["weights"]  # warm-started
    assert mixtures[1]["inputs"]["components"]["code"] == f"decontaminated.code@{candidate}"
    assert second["fingerprint"] == mixtures[1]["after"]["fingerprint"]
    assert read_current(mixture_folder(definition, "searched"))["decision"] == mixtures[1]["decision_id"]
    factory_json = json.loads((Path(second["run_dir"]) / "factory.json").read_text())
    assert mixtures[1]["decision_id"] in factory_json["decisions"]
    assert "Detected run worker status" in log.read_text()  # found dead by the launcher's health check
