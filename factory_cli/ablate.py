"""``factory ablate SPEC``: a base run and one-change variants over N seeds; differences against seed noise.
``--ladder``: the same at several model sizes, at equal training compute, with a verdict."""

from __future__ import annotations

import argparse
import sys

from factory_cli.arguments import add_num_cpus_argument


def add_arguments(parser: argparse.ArgumentParser, _name: str = "ablate") -> None:
    parser.description = (
        "Run the base training config and each named variant (one change each: a config key, or a component "
        "read from another table or snapshot) with N seeds as Ray Tune trials; print each variant's difference "
        "from the base (mean ± std over seeds) and whether it exceeds seed noise (Welch's t-test). With --ladder, "
        "run them at each size of the spec's [ladder] (default: the base's width ×1, ×1.5, ×2), every run given "
        "the base's training FLOPs at its size; print per size the paired difference by seed with its interval "
        "and paired t-test, across sizes its sign and trend, and a verdict per variant: adopt, reject or "
        "inconclusive, with the reason."
    )
    parser.epilog = (
        "The spec's keys: docs/experiments.md#the-ablation-spec; the ladder: docs/experiments.md#the-ablation-ladder"
    )
    parser.add_argument("spec", metavar="SPEC", help="ablation spec (TOML)")
    parser.add_argument(
        "--ladder", action="store_true", help="run the ablation at each size of the spec's [ladder] and give verdicts"
    )
    parser.add_argument("--resume", action="store_true", help="continue an interrupted ablation")
    parser.add_argument("--address", metavar="ADDR", help="a Ray cluster to run on (default: Ray on this machine)")
    add_num_cpus_argument(parser)


def run(args: argparse.Namespace) -> int:
    from factory_cli.sweep import finish, of_spec

    if args.ladder:
        from experiments.ladder import format_ladder, run_ladder
        from experiments.ladder_spec import load_ladder_spec

        ladder = load_ladder_spec(args.spec)
        with of_spec(args.spec):
            outcome, verdicts = run_ladder(
                ladder, resume=args.resume, address=args.address, num_cpus=args.num_cpus, catalog_name=args.catalog
            )
        status = finish(outcome)
        print(format_ladder(ladder.ladder_id, verdicts, ladder.ablation.alpha))
        return status
    from experiments.ablation import format_ablation, load_ablation_spec, run_ablation, untested

    spec = load_ablation_spec(args.spec)
    with of_spec(args.spec):
        outcome, reports = run_ablation(
            spec, resume=args.resume, address=args.address, num_cpus=args.num_cpus, catalog_name=args.catalog
        )
    status = finish(outcome)
    print(format_ablation(reports, spec.alpha))
    if status == 0 and (names := untested(reports)):
        print(
            f"error: {', '.join(names)}: not tested against the base, fewer than 2 completed seeds "
            f"beside the base's; `factory sweep report {outcome.sweep_id}` shows each failed trial's error",
            file=sys.stderr,
        )
        return 1
    return status
