"""The trainer with MLflow tracking off and on, against the trainer before tracking existed.

    PYTHONPATH=. python benchmarks/trainer/tracking.py --baseline /work/main --rounds 5

Three variants of one tiny run (`factory train --nproc 1`, the demo config, --steps steps on
--mb MB of the standard library, made with the factory's commands as benchmarks/trainer/run.py
makes its data, no evals, a checkpoint at the end), run in interleaved rounds so
a busy machine slows each alike: ``baseline`` (the checkout at --baseline, its own code and
PYTHONPATH), ``off`` (this tree, ``mlflow.enabled=false``) and ``on`` (this tree, the default
SQLite store in a fresh $FACTORY_HOME each run, so each pays the store's creation). For each: the
seconds from the command's start to the first step's record (start-up: imports, loader, model), the
command's wall time, and the median tokens/s of the second half of the steps (the steady state,
after MLflow's import and the store's creation, which the tracker's thread does while the first
steps run); the medians over the rounds of each round's ratio to the baseline's run, and each
variant's median figures.
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

HERE = Path(__file__).resolve().parents[2]


def run_once(tree: Path, config: Path, data: list[str], steps: int, extra: list[str]) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bench-tracking-"))
    sets = [f"run.dir='{work / 'run'}'", f"train.steps={steps}", "eval.every=0", "checkpoint.every=0", *data, *extra]
    command = [sys.executable, "-m", "factory_cli.main", "train", "--config", str(config), "--nproc", "1"]
    for override in sets:
        command += ["--set", override]
    env = {**os.environ, "PYTHONPATH": str(tree), "FACTORY_HOME": str(work / "home"), "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    began = time.time()
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.time() - began
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: training failed: {proc.stderr[-2000:]}")
    records = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    steps_done = [r for r in records if r["kind"] == "train"]
    return {
        "first_step_s": steps_done[0]["time"] - began,
        "wall_s": wall,
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps_done[len(steps_done) // 2 :]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout of the trainer before tracking")
    parser.add_argument("--config", type=Path, default=HERE / "configs" / "demo-train.toml")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--mb", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=2000)
    args = parser.parse_args()

    from benchmarks.trainer.run import prepare_data

    manifest, tokenizer = prepare_data(Path(tempfile.mkdtemp(prefix="bench-tracking-data-")), args.mb, args.vocab)
    data = [f"data.manifest='{manifest}'", f"data.tokenizer='{tokenizer}'"]
    variants = {
        "baseline": (args.baseline.resolve(), []),
        "off": (HERE, ["mlflow.enabled=false"]),
        "on": (HERE, []),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
        for name in order:
            tree, extra = variants[name]
            results[name].append(run_once(tree, args.config, data, args.steps, extra))
            print(f"round {round_ + 1} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
    keys = ("first_step_s", "wall_s", "tokens_per_s")
    print(f"{'variant':<9} " + " ".join(f"{key:>14} {'ratio':>6}" for key in keys))
    for name, runs in results.items():
        cells = []
        for key in keys:
            ratio = statistics.median(r[key] / b[key] for r, b in zip(runs, results["baseline"], strict=True))
            cells.append(f"{statistics.median(r[key] for r in runs):>14.2f} {ratio:>6.2f}")
        print(f"{name:<9} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
