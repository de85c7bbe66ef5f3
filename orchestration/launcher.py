"""Dagster's default run launcher, able to tell that a run's worker has died.

The default launcher starts each run as a process on this machine but cannot say whether that
process is still alive, so a run whose worker was killed (the daemon and its processes killed,
the machine restarted) stays "started" for ever, and Dagster's run monitoring, which fails such
runs so that run retries re-execute them, never sees it. Each run worker records its process id
in the run's event log ("Started process for run (pid: N)"); this launcher looks it up and asks
the kernel. Written here because Dagster ships the check only for its container launchers.

Used from an instance's ``dagster.yaml`` (docs/factory.md, "Running it under Dagster")::

    run_launcher:
      module: orchestration.launcher
      class: LocalRunLauncher
    run_monitoring:
      enabled: true
    run_retries:
      enabled: true
      max_retries: 2
      retry_on_asset_or_op_failure: false
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterEventType, DagsterRun
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus


class LocalRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` with a worker health check: alive while its recorded pid is."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid = worker_pid(self._instance, run.run_id)
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.UNKNOWN, "the run worker has not recorded its pid yet")
        if is_alive(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.NOT_FOUND, f"the run worker (pid {pid}) is no longer running")


def worker_pid(instance, run_id: str) -> int | None:
    """The pid the run's newest worker recorded; None before it has."""
    records = instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
    for entry in reversed(records):
        event = entry.dagster_event
        metadata = getattr(event.event_specific_data, "metadata", None) or {}
        if "pid" in metadata and "Started process for run" in (event.message or ""):
            return int(metadata["pid"].value)
    return None


def is_alive(pid: int) -> bool:
    """True while a process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    status = Path(f"/proc/{pid}/status")
    if status.is_file():
        state = next((line for line in status.read_text().splitlines() if line.startswith("State:")), "")
        return "zombie" not in state
    return True
