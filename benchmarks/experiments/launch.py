"""Sweep launch time: from `factory sweep SPEC` to the first training step of the first trial.

    python benchmarks/experiments/launch.py --config configs/demo-train.toml      # after `make demo`
    python benchmarks/experiments/launch.py --config .factory/experiments-demo/proxy-train.toml

It writes a two-trial sweep spec over the given training config (2 steps each), runs
`factory sweep` in a fresh process with a fresh lakehouse for its rows and Ray on this
machine, and reads the wall-clock time of each trial's first `train` record from its run's
metrics.jsonl. Reported per repeat: to the first step, to the end of the command, and the load
average beside them (the machine is shared: a figure means little without it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def first_step_time(sweep_dir: Path) -> float | None:
    """The earliest wall-clock time of a `train` record in any trial's metrics."""
    times = []
    for path in sweep_dir.glob("runs/*/metrics.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "train":
                times.append(record["time"])
                break
    return min(times) if times else None


def launch_once(config: Path, num_cpus: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    spec = home / "sweep.toml"
    spec.write_text(
        f'name = "launch"\nconfig = "{config}"\nset = ["train.steps=2", "checkpoint.every=0"]\n'
        '[resources]\ncpus = 1\n[space]\n"run.seed" = [0, 1]\n'
    )
    env = {**os.environ, "FACTORY_HOME": str(home), "PYTHONPATH": str(REPO)}
    load = os.getloadavg()[0]
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "factory_cli.main", "sweep", str(spec), "--num-cpus", str(num_cpus)],
        cwd=os.getcwd(),
        env=env,
        capture_output=True,
        text=True,
    )
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"factory sweep failed ({done.returncode}):\n{done.stderr[-3000:]}")
    sweep_dir = next((home / "sweeps").iterdir())
    first = first_step_time(sweep_dir)
    return {"first_step_s": first - started, "command_s": ended - started, "load_before": load}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="a training config with a pinned manifest")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for n in range(args.repeat):
        result = launch_once(args.config.resolve(), args.num_cpus)
        runs.append(result)
        print(
            f"run {n + 1}: first training step of the first trial {result['first_step_s']:.1f} s after the command; "
            f"command done in {result['command_s']:.1f} s (2 trials); load average {result['load_before']:.1f}",
            flush=True,
        )
    median = statistics.median(r["first_step_s"] for r in runs)
    print(f"median to the first step: {median:.1f} s (goal: under 60 s); load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
