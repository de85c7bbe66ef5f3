"""Proof that the GRPO learner learns from the reward: a run and its shuffled-reward control.

    PYTHONPATH=. .venv/bin/python benchmarks/rl/learns.py --start CHECKPOINT --out DIR [--analyse-only]

Both runs are ``factory rl train --config configs/rl-demo.toml`` from ``CHECKPOINT`` (the demo's
tiny model at step 40: ``factory demo`` makes it), one process each, the same seed and budget; the
control sets ``grpo.shuffle_rewards``, which permutes each group's rewards before the advantages:
the same rewards, unrelated to the completions that earned them. Both evaluate the same 93 held-out
tasks greedily every 20 steps.

The analysis compares, task by task, the held-out rewards of the last evaluation: the run against
the control and against its own step 0. For each pair it prints the mean difference, a 95% bootstrap
interval of it (10,000 resamples of the tasks) and the p-value of a paired sign-flip permutation
test (10,000 flips), all seeded; and it draws the curves to docs/images/rl-learns.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNS = {"reward": [], "control": ["--set", "grpo.shuffle_rewards=true"]}


def train(start: Path, out: Path, name: str, extra: list[str]) -> None:
    command = [sys.executable, "-m", "factory_cli.main", "rl", "train", "--config", str(REPO / "configs/rl-demo.toml")]
    command += [
        "--set",
        f"start.checkpoint={json.dumps(str(start))}",
        "--set",
        f"run.dir={json.dumps(str(out / name))}",
    ]
    subprocess.run([*command, *extra], check=True, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"})


def metrics(run_dir: Path, kind: str) -> dict[int, dict]:
    found = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == kind:
            found[record["step"]] = record
    return found


def paired(a: list[float], b: list[float], seed: int = 0, draws: int = 10_000) -> dict[str, float]:
    """Mean of a - b over tasks, its 95% bootstrap interval, and a sign-flip permutation p-value
    (two-sided: the share of random sign flips whose mean difference is at least as large)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    n, mean = len(diffs), sum(diffs) / len(diffs)
    rng = random.Random(seed)
    boots = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(draws))
    extreme = sum(
        abs(sum(d if rng.random() < 0.5 else -d for d in diffs) / n) >= abs(mean) - 1e-12 for _ in range(draws)
    )
    return {
        "mean_diff": mean,
        "ci95": [boots[int(0.025 * draws)], boots[int(0.975 * draws) - 1]],
        "p": (extreme + 1) / (draws + 1),
        "tasks": n,
    }


def analyse(out: Path, image: Path) -> dict:
    evals = {name: metrics(out / name, "eval") for name in RUNS}
    trains = {name: metrics(out / name, "train") for name in RUNS}
    last = max(evals["reward"])
    final = {name: evals[name][last]["rewards"] for name in RUNS}
    summary = {
        "steps": last,
        "heldout_reward": {name: {s: round(e["reward"], 4) for s, e in sorted(evals[name].items())} for name in RUNS},
        "heldout_solved": {name: evals[name][last]["solved"] for name in RUNS},
        "run_vs_control": paired(final["reward"], final["control"]),
        "run_vs_step_0": paired(final["reward"], evals["reward"][0]["rewards"]),
        "control_vs_step_0": paired(final["control"], evals["control"][0]["rewards"]),
        "examples": evals["reward"][last]["examples"],
    }
    plot(evals, trains, image)
    return summary


def plot(evals: dict, trains: dict, image: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    colours = {"reward": "tab:blue", "control": "tab:grey"}
    labels = {"reward": "GRPO", "control": "GRPO, rewards shuffled (control)"}
    for name in RUNS:
        steps = sorted(trains[name])
        window = 10  # a moving mean: one step's 64 samples are noisy
        smooth = [
            sum(trains[name][s]["reward"] for s in steps[max(0, i - window + 1) : i + 1]) / min(i + 1, window)
            for i in range(len(steps))
        ]
        ax.plot(steps, smooth, color=colours[name], alpha=0.35, linewidth=1, label=f"{labels[name]}: training samples")
        points = sorted(evals[name])
        ax.plot(
            points,
            [evals[name][s]["reward"] for s in points],
            "o-",
            color=colours[name],
            label=f"{labels[name]}: held-out",
        )
    ax.set_xlabel("step (8 tasks × 8 samples)")
    ax.set_ylabel("mean reward (share of tests passed)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("Tiny demo model on the arithmetic family, CPU, seed 0")
    fig.tight_layout()
    image.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(image, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", type=Path, help="the pre-trained checkpoint (the demo's step-40)")
    parser.add_argument("--out", type=Path, required=True, help="folder of the two runs (reward/, control/)")
    parser.add_argument("--analyse-only", action="store_true", help="only analyse runs already in --out")
    parser.add_argument("--image", type=Path, default=REPO / "docs" / "images" / "rl-learns.png")
    args = parser.parse_args()
    if not args.analyse_only:
        if args.start is None:
            parser.error("--start is required unless --analyse-only")
        for name, extra in RUNS.items():
            train(args.start.resolve(), args.out.resolve(), name, extra)
    print(json.dumps(analyse(args.out, args.image), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
