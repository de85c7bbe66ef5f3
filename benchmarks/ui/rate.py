"""Record blind ratings in a factory home, as raters would, so that the leaderboard the load
benchmark asks for (benchmarks/ui/load.py) fits scores over real games rather than none.

Each rating is a pair drawn as ``GET /ratings`` draws it (``ui.ratings.draw_pair``: a task with
samples at two checkpoints, a sample of each) and a winner, both from a seeded generator, and is
committed as ``POST /ratings`` commits it (``evals.ratings.record_rating``, one snapshot a
rating). The home needs ``evals.samples`` at two or more checkpoints (see load.py's docstring).

    PYTHONPATH=. python benchmarks/ui/rate.py --home DIR [--ratings 60] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a factory home whose evals.samples has pairs")
    parser.add_argument("--ratings", type=int, default=60, help="ratings to record (default: 60)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the pairs and the winners (default: 0)")
    args = parser.parse_args()
    os.environ["FACTORY_HOME"] = str(args.home)
    os.environ.pop("FACTORY_CATALOG", None)
    from evals.ratings import WINNERS, rating_row, record_rating
    from ui import samples
    from ui.ratings import draw_pair
    from ui.sources import Sources

    sources = Sources(None, [args.home])
    table = samples.samples_table(sources)
    summary = samples.summary(table) if table is not None else None
    suites = [s for s in summary.suites if any(len(at) >= 2 for at in summary.by_task[s].values())] if summary else []
    if not suites:
        print(
            f"error: {args.home} has no task with samples at two checkpoints: run `factory eval` on two "
            "checkpoints first (benchmarks/ui/load.py's docstring has the commands)",
            file=sys.stderr,
        )
        return 2
    rng = random.Random(args.seed)
    for n in range(args.ratings):
        pair = draw_pair(summary, suites[n % len(suites)], rng)
        # The pair's id is random in the UI; here it is the seed's, so that running this again adds nothing.
        rating_id = f"bench-{args.seed}-{n}"
        row = rating_row(rating_id, f"rater {n % 3}", pair.suite, pair.task_id, pair.a, pair.b, rng.choice(WINNERS))
        record_rating(sources.catalog, row)
    print(f"{args.ratings} ratings over {', '.join(suites)} in {args.home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
