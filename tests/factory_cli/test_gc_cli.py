"""`factory gc` beside real jobs: a running ingest keeps its staged files, a dead one's go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse.lease import LEASE_FILE, REFRESH, TIMEOUT
from tests.conftest import REPO, run_factory
from tests.factory_cli.test_cli import ingest_args, write_corpus


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def _wait_for(condition, what: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the job ended before {what}: {proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.engine
def test_gc_spares_a_running_ingest_and_removes_a_dead_runs_staging(factory_home, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    warehouse = factory_home / "warehouse" / "raw"

    # A run killed just before its commit: its leases (documents, quarantine, the ledger of files) are no
    # longer renewed.
    dead = run_factory(*ingest_args(corpus, "raw.web", "--run-id", "dead"), env={"FACTORY_FAIL_AT": "before-commit"})
    assert dead.returncode != 0
    dead_leases = sorted(warehouse.glob(f"*/data/runs/dead/*/{LEASE_FILE}"))
    assert [p.parts[-6] for p in dead_leases] == ["ingested_files", "quarantine", "web"]

    # A run held just before its commit, every file staged, its lease renewed by its process.
    hold = tmp_path / "hold"
    hold.mkdir()
    live = subprocess.Popen(
        [sys.executable, "-m", "factory_cli.main", *ingest_args(corpus, "raw.web", "--run-id", "live")],
        cwd=REPO,
        env={**os.environ, "FACTORY_PAUSE_AT": f"before-commit:{hold}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: (hold / "paused").exists(), "the live run to stage its files", 300, live)
        live_files = sorted(warehouse.glob("*/data/runs/live/*/*"))
        assert {p.name for p in live_files} >= {LEASE_FILE} and len(live_files) == 6  # 3 tables × (data + lease)

        # Long after its last renewal, the live run's lease looks dead: its process renews it.
        live_lease = next(p for p in live_files if p.name == LEASE_FILE and p.parts[-6] == "web")
        _age(live_lease, 2 * TIMEOUT.total_seconds())
        renewed = lambda: time.time() - live_lease.stat().st_mtime < TIMEOUT.total_seconds()  # noqa: E731
        _wait_for(renewed, "the live run to renew its lease", 3 * REFRESH.total_seconds())

        # Right after the crash the dead run's leases are fresh: it may still be alive, so it stays.
        gc = run_factory("gc", "--grace-hours", "0")
        assert gc.returncode == 0, gc.stderr
        assert "raw.web: removed 0 file(s), 2 file(s) of runs still alive kept" in gc.stdout
        assert all(p.exists() for p in dead_leases)

        # Once its leases are older than the timeout, the dead run's staging goes; the live run's stays.
        for path in dead_leases:
            _age(path, TIMEOUT.total_seconds() + 60)
        gc = run_factory("gc", "--grace-hours", "0")
        assert gc.returncode == 0, gc.stderr
        assert not list(warehouse.glob("*/data/runs/dead"))
        assert all(p.exists() for p in live_files)
        assert "raw.web: removed 2 file(s), 1 file(s) of runs still alive kept" in gc.stdout

        (hold / "resume").touch()
        _, stderr = live.communicate(timeout=300)
        assert live.returncode == 0, stderr[-3000:]
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()

    snapshots = json.loads(run_factory("snapshots", "raw.web", "--json").stdout)
    assert [s["factory"]["run-id"] for s in snapshots] == ["live"]
    shown = run_factory("show", "raw.web", "-n", "100", "--json")
    assert sorted(json.loads(line)["text"] for line in shown.stdout.splitlines()) == [
        f"document number {i}" for i in range(5)
    ]
    assert not list(warehouse.glob(f"*/data/runs/live/*/{LEASE_FILE}"))  # released at the commits


@pytest.mark.parametrize("hours", ["nan", "inf", "1e20", "-1"])
def test_grace_hours_that_are_no_number_of_hours_are_refused_with_the_usage(factory_home, capsys, hours):
    from factory_cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["gc", "--grace-hours", hours])
    assert exit_.value.code == 2
    assert f"--grace-hours: must be a number of hours from 0 to 1e+06, got '{hours}'" in capsys.readouterr().err


def test_gc_of_a_pinned_snapshot_is_refused(factory_home, capsys):
    from factory_cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["gc", "raw.t@v1"])
    assert exit_.value.code == 2
    assert "raw.t@v1: give a table, not a pinned snapshot" in capsys.readouterr().err
