"""What a training run prints: a progress line a record on stderr (none with ``factory train -q``)
and, on stdout, the line a run that trained ends with."""

from __future__ import annotations

import json
from pathlib import Path

from trainer.metrics import MetricsLog, say_fresh_start


def test_progress_lines_go_to_stderr_unless_quiet_and_the_records_are_kept_either_way(tmp_path, capsys, monkeypatch):
    for quiet, run in ((None, "loud"), ("1", "quiet")):
        if quiet:
            monkeypatch.setenv("FACTORY_QUIET", quiet)  # what factory train -q and factory rl train -q give their ranks
        say_fresh_start(tmp_path / run)  # what a --resume without a checkpoint says, in both trainers
        with MetricsLog(tmp_path / run, True, 6) as metrics:
            metrics.log(1, "train", {"loss": 5.25, "lr": 0.01})
            metrics.log(1, "eval", {"code": {"loss": 5.5}})
        printed = capsys.readouterr()
        assert printed.out == ""
        fresh = f"no complete checkpoint under {tmp_path / run / 'checkpoints'}; starting from step 0"
        shown = [] if quiet else [fresh, "[train step 1/6] loss=5.25, lr=0.01", "[eval step 1/6] code/loss=5.5"]
        assert printed.err.splitlines() == shown
        records = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert [r["kind"] for r in records] == ["train", "eval"]


def test_a_run_that_trained_ends_with_its_losses_and_its_checkpoint_absolute(tmp_path, monkeypatch):
    from trainer.train import finished

    monkeypatch.chdir(tmp_path)
    line = finished(Path("runs/x"), 6, 5.123456, {"code": {"loss": 5.5, "ppl": 244.7}, "text": {"loss": 6.25}})
    step = tmp_path.resolve() / "runs" / "x" / "checkpoints" / "step-6"
    assert line == f"trained to step 6: loss 5.123, held-out loss code 5.5, text 6.25; checkpoint {step}"
    assert finished(Path("runs/x"), 6, 5.0, {}) == f"trained to step 6: loss 5; checkpoint {step}"
