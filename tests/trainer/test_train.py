"""The trainer end to end: real torchrun with gloo, the streaming loader, Spark-ingested data.

One session-scoped corpus (ingested through the real job, so lineage has runs to show), pinned
into a two-component manifest with a tokenizer trained on it. The runs share it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_factory
from tests.trainer.conftest import STEPS, TrainSetup, alive, losses, small_disk
from tests.trainer.variants import COMBINED, overrides
from trainer import checkpoint


def torchrun(setup: TrainSetup, run_dir: Path, nproc: int, *extra: str, env: dict | None = None):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    command += ["-m", "trainer.train", "--config", str(setup.config), "--set", f"run.dir='{run_dir}'", *extra]
    return subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_two_rank_fsdp_matches_one_plain_process(setup, two_rank_run, tmp_path):
    single = tmp_path / "single"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.train", "--config", str(setup.config), "--set", f"run.dir='{single}'"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    sharded, plain = losses(two_rank_run), losses(single)
    assert sorted(sharded) == sorted(plain) == list(range(1, STEPS + 1))
    for step in plain:
        assert sharded[step] == pytest.approx(plain[step], rel=1e-4), step
    assert plain[STEPS] < plain[1]  # it learns
    # The held-out batches do not depend on the world size either: the same eval losses.
    sharded_evals, plain_evals = _eval_losses(two_rank_run), _eval_losses(single)
    assert sorted(sharded_evals) == sorted(plain_evals) and sharded_evals
    for key, loss in plain_evals.items():
        assert sharded_evals[key] == pytest.approx(loss, rel=1e-5), key


def _eval_losses(run_dir: Path) -> dict[tuple[int, str], float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {
        (r["step"], name): value["loss"]
        for r in records
        if r["kind"] == "eval"
        for name, value in r.items()
        if isinstance(value, dict)
    }


@pytest.mark.slow
def test_evals_checkpoints_and_lineage(setup, two_rank_run):
    records = [json.loads(line) for line in (two_rank_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [e["step"] for e in evals] == [3, 6]
    for e in evals:
        assert set(e) >= {"text", "code"} and e["code"]["ppl"] > 1 and e["code"]["tokens"] > 0
    train = [r for r in records if r["kind"] == "train"]
    assert all({"loss", "lr", "grad_norm", "tokens_per_s", "data_wait_frac"} <= set(r) for r in train)

    kept = sorted(p.name for p in (two_rank_run / "checkpoints").iterdir())
    assert kept == ["step-4", "step-6"]  # every 2, keep 2
    lineage = json.loads((two_rank_run / "checkpoints" / "step-6" / "lineage.json").read_text())
    assert lineage["step"] == 6 and lineage["config"]["train"]["steps"] == STEPS
    manifest = json.loads((setup.home / "manifest.json").read_text())
    assert lineage["manifest"]["fingerprint"] == manifest["fingerprint"]
    assert [(c["table"], c["snapshot_id"]) for c in lineage["components"]] == [
        (c["table"], c["snapshot_id"]) for c in manifest["components"]
    ]
    assert len(lineage["tokenizer"]["sha256"]) == 64
    position = lineage["loader_position"]
    assert position["next_global_batch"] == 6 and position["tokens"] == 6 * 8 * 32
    assert position["rank0_state"]["batch"] == 6
    (ingest_run,) = lineage["components"][1]["runs"]
    assert ingest_run["job"] == "ingest" and ingest_run["run_id"] == "train-code"
    assert ingest_run["inputs"][0]["uri"].endswith("code.jsonl")

    shown = run_factory("lineage", str(two_rank_run))
    assert shown.returncode == 0, shown.stderr
    assert "ingest run train-code" in shown.stdout and "code.jsonl" in shown.stdout
    assert "next global batch 6" in shown.stdout
    as_json = json.loads(run_factory("lineage", str(two_rank_run / "checkpoints" / "step-4"), "--json").stdout)
    assert as_json["step"] == 4


@pytest.mark.slow
def test_quiet_prints_no_progress_only_the_line_a_finished_run_ends_with(two_rank_training):
    """The reference run was `factory train -q --resume` into a new folder: no progress line, no
    note that it starts at step 0; its result on stdout, as every command's, naming its last losses
    and its last checkpoint, absolute."""
    run_dir, proc = two_rank_training
    assert not [line for line in proc.stderr.splitlines() if line.startswith("[")], proc.stderr[-4000:]
    assert "no complete checkpoint" not in proc.stderr, proc.stderr[-4000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    loss = next(r for r in reversed(records) if r["kind"] == "train")["loss"]
    heldout = next(r for r in reversed(records) if r["kind"] == "eval")
    step = (run_dir / "checkpoints" / f"step-{STEPS}").resolve()
    assert proc.stdout.splitlines() == [
        f"trained to step {STEPS}: loss {loss:.4g}, held-out loss text {heldout['text']['loss']:.4g}, "
        f"code {heldout['code']['loss']:.4g}; checkpoint {step}"
    ]


@pytest.mark.slow
def test_killed_run_resumes_bit_for_bit_and_on_another_world_size(setup, two_rank_run, tmp_path):
    run_dir = tmp_path / "killed"
    killed = torchrun(setup, run_dir, 2, env={"FACTORY_FAIL_AT": "after-step-5"})
    assert killed.returncode != 0
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-2", "step-4"]

    # Keep a copy of the step-4 checkpoint for the resume on one rank.
    other = tmp_path / "one-rank"
    subprocess.run(["cp", "-r", str(run_dir), str(other)], check=True)

    resumed = torchrun(setup, run_dir, 2, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    reference = losses(two_rank_run)
    assert losses(run_dir) == reference  # bit for bit: same floats

    on_one = torchrun(setup, other, 1, "--resume")
    assert on_one.returncode == 0, on_one.stderr[-4000:]
    continued = losses(other)
    for step in (5, 6):
        assert continued[step] == pytest.approx(reference[step], rel=1e-4)


@pytest.mark.slow  # two 2-rank launches a combination, about 30-60 s on 2 cores
@pytest.mark.parametrize("component", COMBINED)
def test_each_component_trains_under_fsdp_and_resumes_bit_for_bit(setup, component, tmp_path):
    """Every swappable component, on 2 ranks with FSDP2, in two models that between them set each
    one apart from its default: the run learns, dies after step 5 (its newest checkpoint step 4),
    and resumed from step 4 it computes step 5 again to the same loss and gradient norm, float for
    float, then finishes."""
    sets = [arg for override in overrides(component) for arg in ("--set", override)]
    run_dir = tmp_path / component
    killed = torchrun(setup, run_dir, 2, *sets, env={"FACTORY_FAIL_AT": "after-step-5"})
    assert killed.returncode != 0 and checkpoint.latest_checkpoint(run_dir)[0] == 4, killed.stderr[-4000:]
    before = _train_records(run_dir)
    assert [r["step"] for r in before] == [1, 2, 3, 4, 5]
    resumed = torchrun(setup, run_dir, 2, "--resume", *sets)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    after = _train_records(run_dir)[len(before) :]
    assert [r["step"] for r in after] == [5, 6]
    assert (after[0]["loss"], after[0]["grad_norm"]) == (before[-1]["loss"], before[-1]["grad_norm"])
    assert after[-1]["loss"] < before[0]["loss"]  # it learns
    lineage = json.loads((run_dir / "checkpoints" / f"step-{STEPS}" / "lineage.json").read_text())
    assert COMBINED[component].items() <= lineage["config"]["model"].items()


def _train_records(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "train"]


@pytest.mark.slow
def test_killed_while_saving_a_checkpoint_resumes_from_the_previous_one_bit_for_bit(setup, two_rank_run, tmp_path):
    run_dir = tmp_path / "killed-saving"
    # Rank 0 dies in the step-4 save after every other file is written, just before COMPLETE.
    killed = torchrun(setup, run_dir, 2, env={"FACTORY_FAIL_AT": "checkpoint-step-4-before-complete"})
    assert killed.returncode != 0
    partial = run_dir / "checkpoints" / "step-4"
    assert (partial / "lineage.json").is_file() and not (partial / "COMPLETE").exists()
    assert checkpoint.latest_checkpoint(run_dir)[0] == 2

    resumed = torchrun(setup, run_dir, 2, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    starts = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"start"' in line]
    assert [(s["step"], s["resumed"]) for s in starts] == [(0, False), (2, True)]
    assert losses(run_dir) == losses(two_rank_run)  # steps 3-6 again from step 2: the same floats
    assert [s for s, _ in checkpoint.complete_checkpoints(run_dir)] == [4, 6]


@pytest.mark.slow
def test_a_full_disk_while_checkpointing_is_a_clear_error_and_leaves_the_last_complete_checkpoint(setup, tmp_path):
    # Room for the step-2 checkpoint (about 1.5 MB) and not for the step-4 one.
    with small_disk(tmp_path / "disk", "2m") as disk:
        run_dir = disk / "run"
        proc = run_factory("train", "--config", str(setup.config), "--nproc", "1", "--set", f"run.dir='{run_dir}'")
        assert proc.returncode == 2, proc.stderr[-4000:]
        assert "no space left on the device" in proc.stderr, proc.stderr[-4000:]
        assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
        assert checkpoint.latest_checkpoint(run_dir)[0] == 2


def _ranks_of(launcher: int) -> list[int]:
    """The trainer ranks torchrun ``launcher`` started (its children running trainer.train)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
            if parent == launcher and b"trainer.train" in (stat.parent / "cmdline").read_bytes():
                found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_a_rank_ends_when_its_launcher_is_killed(setup, tmp_path):
    from trainer.launch import command

    run_dir = tmp_path / "run"
    argv = command(str(setup.config), 1, [f"run.dir='{run_dir}'", "train.steps=100000", "checkpoint.every=1000"])
    launcher = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})
    ranks = []
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 300
        while not (metrics.exists() and '"kind": "train"' in metrics.read_text()):
            assert launcher.poll() is None and time.monotonic() < deadline, "the run did not start training"
            time.sleep(0.5)
        ranks = _ranks_of(launcher.pid)
        (rank,) = ranks
        launcher.kill()  # SIGKILL: torchrun cannot stop its ranks itself
        launcher.wait()
        deadline = time.monotonic() + 30
        while alive(rank) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(rank), "the rank went on training after its launcher was killed"
    finally:  # torchrun starts its ranks in their own process group: each is ended by itself
        for pid in [launcher.pid, *ranks]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_damaged_checkpoint_ends_resume_with_a_clear_error_on_every_rank(setup, two_rank_run, tmp_path):
    import shutil

    for name, damage in (
        ("rank-1.json", lambda path: (path / "rank-1.json").unlink()),
        ("COMPLETE", lambda path: (path / "COMPLETE").write_text("")),
    ):
        run_dir = tmp_path / name
        shutil.copytree(two_rank_run / "checkpoints", run_dir / "checkpoints")
        step, newest = checkpoint.latest_checkpoint(run_dir)
        damage(newest)
        done = run_factory(
            "train", "--config", str(setup.config), "--nproc", "2", "--resume", "--set", f"run.dir='{run_dir}'"
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-4000:]
        assert "error (rank 0): " in done.stderr and str(newest / name) in done.stderr, done.stderr[-4000:]
        assert "the checkpoint is damaged" in done.stderr
        assert checkpoint.latest_checkpoint(run_dir) == (step, newest)  # nothing resumed past it, nothing pruned


@pytest.mark.slow
def test_a_metrics_port_in_use_ends_the_run_with_a_clear_error(setup, tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_factory(
            "train", "--config", str(setup.config), "--set", f"run.dir='{tmp_path / 'run'}'",
            "--set", f"run.metrics_port={port}",
        )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-4000:]
    assert f"error (rank 0): the metrics port {port} is in use on 127.0.0.1" in done.stderr, done.stderr[-4000:]
