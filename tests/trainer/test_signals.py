"""How a training run ends when a rank fails or a process is signalled: real torchrun (gloo), real
signals, one line per cause, the conventional exit status, and no process left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_factory
from tests.trainer.conftest import TrainSetup, alive, small_disk

LONG_RUN = ["train.steps=100000", "checkpoint.every=100000", "eval.every=100000"]


def _children(parent: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == parent:
                found.append(int(stat.parent.name))
    return found


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    """The ``pids`` still running after ``seconds``."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [p for p in pids if alive(p)]


def _failure_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("training failed", "training stopped"))]


def _no_noise(stderr: str) -> None:
    for noise in ("Traceback", "Connection closed by peer", "failed (exitcode", "closing signal", "SignalException"):
        assert noise not in stderr, stderr[-4000:]


class _Run:
    """``factory train`` on 2 ranks, started and left training: its pid, torchrun's and the ranks'."""

    def __init__(self, setup: TrainSetup, run_dir: Path, quiet: bool = False) -> None:
        sets = [f"run.dir='{run_dir}'", *LONG_RUN]
        args = ["train", "--config", str(setup.config), "--nproc", "2", *[a for s in sets for a in ("--set", s)]]
        args += ["-q"] if quiet else []
        # In a session of its own, as a terminal's foreground job: Ctrl-C is SIGINT to its group.
        self.factory = subprocess.Popen(
            [sys.executable, "-m", "factory_cli.main", *args],
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.launcher = 0
        self.ranks: list[int] = []
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and '"kind": "train"' in metrics.read_text()):
            assert self.factory.poll() is None and time.monotonic() < deadline, "the run did not start training"
            time.sleep(0.5)
        (self.launcher,) = _children(self.factory.pid)
        self.ranks = _children(self.launcher)
        assert len(self.ranks) == 2

    def end(self, timeout: float = 120) -> tuple[int, str]:
        _, stderr = self.factory.communicate(timeout=timeout)
        return self.factory.returncode, stderr

    def kill_all(self) -> None:
        for pid in [self.factory.pid, self.launcher, *self.ranks]:
            with contextlib.suppress(ProcessLookupError):
                if pid:
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.factory.communicate(timeout=10)


@pytest.fixture
def run(setup, tmp_path):
    started: list[_Run] = []

    def start(quiet: bool = False) -> _Run:
        started.append(_Run(setup, tmp_path / "run", quiet))
        return started[-1]

    yield start
    for each in started:
        each.kill_all()


def _stopped(signal_name: str) -> str:
    return f"training stopped: the launcher got {signal_name}; resume with --resume"


def _sigterm_to_torchrun(training: _Run) -> None:
    os.kill(training.launcher, signal.SIGTERM)


def _sigterm_to_factory_train(training: _Run) -> None:
    training.factory.send_signal(signal.SIGTERM)


def _ctrl_c(training: _Run) -> None:
    os.killpg(training.factory.pid, signal.SIGINT)  # what a terminal sends its foreground job


def _sigkill_to_torchrun(training: _Run) -> None:
    os.kill(training.launcher, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("send", "status", "lines", "linger_s"),
    [
        # factory train was signalled: it waits for torchrun to stop the ranks, none outlives it
        (_sigterm_to_factory_train, 143, [_stopped("SIGTERM")], 0),
        (_ctrl_c, 130, [_stopped("SIGINT")], 0),  # the launcher's line says it all: no "interrupted" after it
        (_sigterm_to_torchrun, 143, [_stopped("SIGTERM")], 10),
        (_sigkill_to_torchrun, 137, ["training stopped: torchrun was killed by SIGKILL; resume with --resume"], 10),
    ],
    ids=["sigterm-to-factory-train", "ctrl-c", "sigterm-to-torchrun", "sigkill-to-torchrun"],
)
def test_a_signal_ends_the_run_in_one_line_with_128_plus_its_number_and_leaves_no_process(
    run, send, status, lines, linger_s
):
    training = run()
    send(training)
    code, stderr = training.end()
    assert code == status, stderr[-4000:]
    assert [line for line in stderr.splitlines() if line.startswith(("training ", "interrupted"))] == lines, stderr
    _no_noise(stderr)
    assert _gone_within([training.launcher, *training.ranks], linger_s) == []


# How long torchrun and its ranks may outlive a killed `factory train`. With PR_SET_PDEATHSIG the
# kernel sends torchrun SIGTERM as its parent dies, and it stops its ranks: well under a second
# here, seconds on a loaded machine. Without it nothing ends them: run with -q, the ranks print no
# progress line, so no write to the dead parent's pipe fails either (that ended them 2-8 s later
# when they printed a line a step), and they would train on for LONG_RUN's 100,000 steps (hours).
# A bound this far from both is not a race with the machine's load.
KILLED_PARENT_LINGER_S = 60


@pytest.mark.slow
def test_sigkill_of_factory_train_ends_torchrun_and_its_ranks(run):
    training = run(quiet=True)
    training.factory.kill()
    training.factory.wait()
    assert _gone_within([training.launcher, *training.ranks], KILLED_PARENT_LINGER_S) == []


@pytest.mark.slow
def test_a_rank_killed_outright_is_the_one_named_and_its_peer_says_nothing(setup, tmp_path):
    # Rank 0 dies (SIGKILL) inside the step-4 save; rank 1's collective then breaks on the lost peer.
    proc = run_factory(
        "train",
        *("--config", str(setup.config), "--nproc", "2", "--set", f"run.dir='{tmp_path / 'run'}'"),
        env={"OMP_NUM_THREADS": "1", "FACTORY_FAIL_AT": "checkpoint-step-4-before-complete"},
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert _failure_lines(proc.stderr) == ["training failed: rank 0 was killed by SIGKILL"], proc.stderr[-4000:]
    _no_noise(proc.stderr)


@pytest.mark.slow
def test_a_full_disk_on_two_ranks_names_the_ranks_that_failed_and_no_other(setup, tmp_path):
    # Room for the first records and not for the step-2 checkpoint.
    with small_disk(tmp_path / "disk", "64k") as disk:
        proc = run_factory(
            "train",
            *("--config", str(setup.config), "--nproc", "2", "--set", f"run.dir='{disk / 'run'}'"),
            env={"OMP_NUM_THREADS": "1"},
            timeout=600,
        )
    assert proc.returncode == 2, proc.stderr[-4000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error (rank ")]
    failed = _failure_lines(proc.stderr)
    assert errors and "no space left on the device" in errors[0], proc.stderr[-4000:]
    assert failed and all(line.endswith(" exited 2") for line in failed), proc.stderr[-4000:]
    assert {line.split()[3] for line in failed} <= {line.split()[2].rstrip("):") for line in errors}
    _no_noise(proc.stderr)
