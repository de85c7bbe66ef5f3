"""``factory sweep SPEC``: a search over training config keys on Ray Tune; ``factory sweep report SWEEP``."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from factory_cli.arguments import add_num_cpus_argument


def add_arguments(parser: argparse.ArgumentParser, _name: str = "sweep") -> None:
    parser.description = (
        "Run every trial of a sweep spec (TOML: a base training config and a search space) as a training run, "
        "scheduled by Ray Tune; each trial's outcome becomes a row of experiments.trials. "
        "`factory sweep report SWEEP` prints the ranked trials and writes plots."
    )
    parser.epilog = "The spec's keys: docs/experiments.md#the-sweep-spec"
    parser.add_argument("spec", metavar="SPEC", help="sweep spec (TOML), or `report`")
    parser.add_argument("sweep", nargs="?", metavar="SWEEP", help="with `report`: the sweep id")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted sweep (finished trials stay)")
    parser.add_argument("--address", metavar="ADDR", help="a Ray cluster to run on (default: Ray on this machine)")
    add_num_cpus_argument(parser)
    parser.add_argument("--sweep-id", metavar="ID", help="the sweep id (default: the spec's name and hash)")
    parser.add_argument(
        "--plots", metavar="DIR", help="report: where the PNGs go (default: the sweep folder's report/)"
    )


def run(args: argparse.Namespace) -> int:
    from lakehouse.errors import ConfigError

    if args.spec == "report":
        if not args.sweep:
            raise ConfigError("give the sweep: factory sweep report SWEEP")
        return report(args.sweep, args.catalog, args.plots)
    if args.sweep:
        raise ConfigError(f"unexpected argument {args.sweep!r}: factory sweep SPEC [--resume] [--address ADDR]")
    from experiments.sweep import run_sweep
    from experiments.sweep_spec import load_sweep_spec

    spec = load_sweep_spec(args.spec)
    with of_spec(args.spec):
        outcome = run_sweep(
            spec,
            resume=args.resume,
            address=args.address,
            num_cpus=args.num_cpus,
            catalog_name=args.catalog,
            sweep_id=args.sweep_id,
        )
    return finish(outcome)


@contextlib.contextmanager
def of_spec(path: str) -> Iterator[None]:
    """A refusal of what the spec asks for (a variant's key, a component), named by the spec's
    file as the refusals of its own keys are."""
    from lakehouse.errors import ConfigError

    try:
        yield
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def finish(outcome) -> int:
    """Print the ranked table of a sweep that ran; exit 130 if it was interrupted."""
    from experiments.report import format_ranking

    print(format_ranking(outcome.rows))
    failed = sum(r["status"] == "failed" for r in outcome.rows)
    print(f"sweep {outcome.sweep_id}: {len(outcome.rows)} trial(s) recorded, {failed} failed; {outcome.sweep_dir}")
    if outcome.unfinished:
        print(
            f"interrupted: {outcome.unfinished} trial(s) unfinished; run the same command with --resume",
            file=sys.stderr,
        )
        return 130
    return 0


def report(sweep_id: str, catalog_name: str | None, plots: str | None) -> int:
    from pathlib import Path

    from experiments.report import format_ranking, write_plots
    from experiments.sweep import sweep_dir_of
    from experiments.trials_table import read_trials, sweep_ids
    from lakehouse.catalog import load_catalog
    from lakehouse.errors import InputError

    catalog = load_catalog(catalog_name)
    rows = read_trials(catalog, sweep_id)
    if not rows:
        known = sweep_ids(catalog)
        if not known:
            raise InputError(f"no trials of sweep {sweep_id!r}: no sweep has recorded a trial in this catalog yet")
        raise InputError(f"no trials of sweep {sweep_id!r} in experiments.trials; it holds {_listed(known)}")
    print(format_ranking(rows))
    for path in write_plots(rows, Path(plots) if plots else sweep_dir_of(sweep_id) / "report"):
        print(f"wrote {path}")
    return 0


def _listed(sweeps: list[str], most: int = 10) -> str:
    more = f" and {len(sweeps) - most} more" if len(sweeps) > most else ""
    return f"the sweeps {', '.join(sweeps[:most])}{more}"
