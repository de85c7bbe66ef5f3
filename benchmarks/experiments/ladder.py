"""Ablation ladder wall time: `factory ablate SPEC --ladder` of 2 variants × 3 sizes × 2 seeds on the
tiny sizes, from the command's start (Ray's start-up included) to its end. Goal: ≤ 15 min on 2 CPUs.

    python benchmarks/experiments/ladder.py                       # the tests' tiny lakehouse
    python benchmarks/experiments/ladder.py --config configs/demo-train.toml --steps 40   # after `make demo`

The spec's sizes are the default ones: the `tiny` preset's width (64) ×1, ×1.5 and ×2. The two
variants are a sliding window of one position (cheaper per token: it trains more steps, to the
base's FLOPs) and a far too large norm epsilon (the same cost). Without ``--config`` a fresh copy
of the tiny lakehouse of tests/experiments/lakehouse_setup.py is made first (not timed). The
command runs in a fresh process with a fresh ``$FACTORY_HOME`` for its rows; the load average
is reported beside each repeat (the machine is shared: a figure means little without it).

The tiny lakehouse's tables are written by the tests' fixture, not by `factory` commands: they are
a few kilobytes a component, read once per trial, and the figure is the ladder's training and
scheduling time, which their layout does not move; with ``--config`` after `make demo`, the
trials read the demo's tables, which `factory` commands wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = """name = "bench-ladder"
config = "{config}"
seeds = 2
set = ["train.steps={steps}", "model.dim=64", "checkpoint.every=0", "mlflow.enabled=false"]
[resources]
cpus = 1
[variants.window-1]
"model.sliding_window" = 1
[variants.huge-eps]
"model.norm_eps" = 1e6
"""


def ladder_once(config: Path, steps: int, num_cpus: int, home: Path) -> dict[str, float]:
    spec = home / "ladder.toml"
    spec.write_text(SPEC.format(config=config, steps=steps))
    env = {**os.environ, "FACTORY_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("FACTORY_CATALOG", None)
    load = os.getloadavg()[0]
    started = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "factory_cli.main", "ablate", str(spec), "--ladder", "--num-cpus", str(num_cpus)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"factory ablate --ladder failed ({done.returncode}):\n{done.stderr[-3000:]}")
    print(done.stdout[done.stdout.find("ladder ") :], file=sys.stderr)
    return {"wall_s": round(wall, 1), "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="the base training config (default: the tests' tiny lakehouse)")
    parser.add_argument("--steps", type=int, default=20, help="train.steps of the base at each size")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()

    results = []
    for _ in range(args.repeat):
        home = Path(tempfile.mkdtemp(prefix="bench-ladder-"))
        config = args.config.resolve() if args.config else _tiny_lakehouse(home)
        results.append(ladder_once(config, args.steps, args.num_cpus, home))
    print(json.dumps({"trials": 3 * 3 * 2, "steps": args.steps, "num_cpus": args.num_cpus, "runs": results}))


def _tiny_lakehouse(home: Path) -> Path:
    os.environ["FACTORY_HOME"] = str(home)
    os.environ.pop("FACTORY_CATALOG", None)
    from tests.experiments.lakehouse_setup import make_lakehouse

    return make_lakehouse(home).config


if __name__ == "__main__":
    main()
