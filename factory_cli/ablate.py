"""``factory ablate SPEC``: a base run and one-change variants over N seeds; differences against seed noise."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, _name: str = "ablate") -> None:
    parser.description = (
        "Run the base training config and each named variant (one change each: a config key, or a component "
        "read from another table or snapshot) with N seeds as Ray Tune trials; print each variant's difference "
        "from the base (mean ± std over seeds) and whether it exceeds seed noise (Welch's t-test)."
    )
    parser.epilog = "The spec's keys: docs/experiments.md#the-ablation-spec"
    parser.add_argument("spec", metavar="SPEC", help="ablation spec (TOML)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted ablation")
    parser.add_argument("--address", metavar="ADDR", help="a Ray cluster to run on (default: Ray on this machine)")
    parser.add_argument("--num-cpus", type=int, metavar="N", help="CPUs for a local Ray (default: all)")


def run(args: argparse.Namespace) -> int:
    from experiments.ablation import format_ablation, load_ablation_spec, run_ablation
    from factory_cli.sweep import finish

    spec = load_ablation_spec(args.spec)
    outcome, reports = run_ablation(
        spec, resume=args.resume, address=args.address, num_cpus=args.num_cpus, catalog_name=args.catalog
    )
    status = finish(outcome)
    print(format_ablation(reports, spec.alpha))
    return status
