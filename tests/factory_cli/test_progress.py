"""Progress where work is long, and only where a person watches: Spark's stage bar on a terminal,
log lines (never redrawn bars) in files and CI output."""

from __future__ import annotations

import logging
import os
import pty
import subprocess
import sys
import time

import pytest

from pipelines.spark_session import console_progress
from streaming_loader.metrics import first_batch_progress
from tests.conftest import REPO, run_factory
from tests.corpora import make_table

PROBE = "from pipelines.spark_session import console_progress; print(console_progress())"


def test_spark_draws_its_progress_bar_only_when_stderr_is_a_terminal():
    piped = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    assert piped.stdout.strip() == "false"
    leader, follower = pty.openpty()
    try:
        tty = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=REPO, stdout=subprocess.PIPE, stderr=follower, text=True
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert tty.stdout.strip() == "true"
    assert console_progress() == ("true" if sys.stderr.isatty() else "false")


def test_the_wait_for_a_first_batch_is_reported_while_it_lasts(caplog):
    caplog.set_level(logging.INFO, logger="factory.loader")
    with first_batch_progress(lambda: 7, every_s=0.05):
        time.sleep(0.3)
    lines = [r.getMessage() for r in caplog.records if "waiting for the first batch" in r.getMessage()]
    assert len(lines) >= 2 and "7 unit(s) read" in lines[0]
    caplog.clear()
    time.sleep(0.15)  # and it stops when the batch came
    assert not caplog.records


@pytest.mark.engine
@pytest.mark.slow
def test_a_job_without_a_terminal_prints_no_progress_bars(catalog):
    make_table(catalog, "raw.web", 200, files=2)  # a dozen Spark stages ahead, each a bar on a terminal
    dedup = run_factory("dedup", "--input", "raw.web", "--output", "dedup.web")
    assert dedup.returncode == 0, dedup.stderr
    assert "\r" not in dedup.stderr and "[Stage" not in dedup.stderr
    assert "dedup stage 1/4 (features)" in dedup.stderr and "dedup stage 4/4 (clusters)" in dedup.stderr
