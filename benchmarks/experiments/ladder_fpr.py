"""The ablation ladder's false-positive rate: how often a variant identical to the base comes out
other than ``inconclusive`` when it is trained on other seeds than the base's.

    python benchmarks/experiments/ladder_fpr.py --seeds 24 --num-cpus 2

In a ladder an identical variant is trained on the base's own seeds and is the same run bit for
bit: its differences are zero and it is never adopted nor rejected (tests/experiments/test_ladder.py).
What seed noise alone does to the verdict needs the repeat on other seeds. This trains the base of
the tests' tiny lakehouse (tests/experiments/lakehouse_setup.py) at each size with ``--seeds``
seeds, as one sweep on Ray Tune, splits the seeds into groups of ``--per-ladder``, and makes a
ladder of every two groups: the first group's runs the base, the second's the "repeat" variant,
paired by position. Each ladder's verdict comes from ``experiments.ladder.analyse_ladder``, the
code `factory ablate --ladder` runs. Reported: the ladders that came out other than inconclusive
(all pairs of groups, which share runs, and the disjoint pairs alone, which are independent), and
the sizes beyond seed noise, beside alpha.

The tiny lakehouse's tables are written by the tests' fixture, not by `factory` commands: the
figure is a rate of verdicts over seeds, which no table layout changes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=24, help="runs of the base per size")
    parser.add_argument("--per-ladder", type=int, default=2, help="seeds per ladder (as a ladder spec's `seeds`)")
    parser.add_argument("--widths", default="32,48", help="the sizes: model.dim of each")
    parser.add_argument("--steps", type=int, default=6, help="train.steps of every run")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-ladder-fpr-"))
    os.environ["FACTORY_HOME"] = str(home)
    os.environ.pop("FACTORY_CATALOG", None)
    os.environ["FACTORY_MLFLOW"] = "off"
    from tests.experiments.lakehouse_setup import make_lakehouse

    lake = make_lakehouse(home)
    started = time.time()
    rows = base_runs(lake.config, args)
    wall = time.time() - started
    print(json.dumps({**false_positives(rows, args), "trials": len(rows), "wall_s": round(wall, 1)}, indent=2))


def base_runs(config: Path, args: argparse.Namespace) -> list[dict]:
    """The base at every size and seed, as one sweep; its rows as a ladder's base rows."""
    from ray import tune

    from experiments.ablation import BASE
    from experiments.ladder_spec import ladder_spec_from_dict, plan_ladder
    from experiments.sweep import Schedule, prepare_setup, run_trials

    widths = [int(w) for w in args.widths.split(",")]
    spec = ladder_spec_from_dict(
        {
            "name": "fpr",
            "config": str(config),
            "seeds": args.seeds,
            "alpha": args.alpha,
            "set": [f"train.steps={args.steps}", "mlflow.enabled=false"],
            "variants": {"repeat": {"model.norm_eps": 1e-5}},  # never trained: only the base's rungs are
            "ladder": {"sizes": {f"d{w}": {"model.dim": w} for w in widths}},
        }
    )
    base = [r for r in plan_ladder(spec).rungs if r.variant == BASE]
    trials = [{**t, "alpha": args.alpha} for r in base for t in r.trials(args.seeds)]
    ablation = spec.ablation
    setup = prepare_setup(spec.ladder_id + "-base", "ladder", ablation.config, ablation.set)
    outcome = run_trials(setup, {"params": tune.grid_search(trials)}, Schedule(cpus=1), num_cpus=args.num_cpus)
    return outcome.rows


def false_positives(rows: list[dict], args: argparse.Namespace) -> dict:
    from experiments.ablation import BASE, SEED_KEY
    from experiments.ladder import INCONCLUSIVE, NOISE, analyse_ladder

    n = args.per_ladder
    groups = [list(range(i, i + n)) for i in range(0, args.seeds - n + 1, n)]

    def ladder(first: list[int], second: list[int]):
        made = []
        for row in rows:
            seed = int(row["params"][SEED_KEY])
            for variant, group in ((BASE, first), ("repeat", second)):
                if seed in group:
                    params = {**row["params"], "variant": variant, SEED_KEY: group.index(seed)}
                    made.append({**row, "params": params})
        return analyse_ladder(made)[0]

    all_pairs = [ladder(groups[a], groups[b]) for a, b in itertools.combinations(range(len(groups)), 2)]
    disjoint = [ladder(groups[i], groups[i + 1]) for i in range(0, len(groups) - 1, 2)]
    sizes = [r for v in all_pairs for r in v.sizes]
    return {
        "alpha": args.alpha,
        "seeds_per_size": args.seeds,
        "seeds_per_ladder": n,
        "ladders": len(all_pairs),
        "not_inconclusive": sum(v.verdict != INCONCLUSIVE for v in all_pairs),
        "independent_ladders": len(disjoint),
        "independent_not_inconclusive": sum(v.verdict != INCONCLUSIVE for v in disjoint),
        "size_tests": len(sizes),
        "sizes_beyond_noise": sum(r.outcome != NOISE for r in sizes),
        "verdicts": [f"{v.verdict}: {v.reason}" for v in all_pairs if v.verdict != INCONCLUSIVE],
    }


if __name__ == "__main__":
    main()
