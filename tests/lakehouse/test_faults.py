"""Fault points: a process held at two named points in turn."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.conftest import REPO


def test_a_process_is_held_at_each_named_point_in_turn(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    script = "from lakehouse.faults import maybe_fail\nfor p in ('a', 'b', 'c'):\n    maybe_fail(p)\n    print(p, flush=True)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "FACTORY_PAUSE_AT": f"a:{first};c:{second}"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: (first / "paused").exists())
        assert proc.poll() is None and not (second / "paused").exists()
        (first / "resume").touch()
        _wait(lambda: (second / "paused").exists())
        assert proc.poll() is None
        (second / "resume").touch()
        out, _ = proc.communicate(timeout=30)
        assert out.split() == ["a", "b", "c"]
    finally:
        proc.kill()


def _wait(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
