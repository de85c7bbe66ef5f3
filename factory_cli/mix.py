"""``factory mix pin SPEC --output MANIFEST``: resolve a mixture spec to snapshot ids and files; ``factory mix search``."""

from __future__ import annotations

import argparse

from factory_cli.arguments import add_num_cpus_argument
from factory_cli.text import format_columns
from mixtures.manifest import Manifest


def add_arguments(parser: argparse.ArgumentParser, _name: str = "mix") -> None:
    sub = parser.add_subparsers(dest="mix_command", required=True, metavar="SUBCOMMAND")
    pin = sub.add_parser(
        "pin",
        help="resolve every ref of a spec to a snapshot id and list its data files",
        description="Resolve a mixture spec (TOML or YAML) to a pinned manifest: snapshot ids, data files, "
        "record counts, row filters, held-out split and a fingerprint. The loader accepts only manifests.",
        epilog="The spec's keys: docs/loader.md#the-mixture-spec-key-by-key",
    )
    pin.add_argument("spec", metavar="SPEC", help="mixture spec, .toml or .yaml")
    pin.add_argument("--output", "-o", required=True, metavar="MANIFEST", help="where to write the manifest (JSON)")
    # Also accepted after the subcommand; SUPPRESS keeps a value given before it.
    pin.add_argument("--catalog", metavar="NAME", default=argparse.SUPPRESS, help="pyiceberg catalog to use")
    pin.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only print results and errors"
    )
    search = sub.add_parser(
        "search",
        help="decide a mixture by proxy runs (RegMix style) and pin it",
        description="Sample K mixtures from a Dirichlet centred on the components' token shares, train a small "
        "proxy on each as a Ray Tune trial, fit linear, quadratic and LightGBM regressions from the weights to the "
        "target loss (chosen by cross-validated Spearman), average the best of many candidates, and write the "
        "winning spec and a manifest whose lineage records the search.",
        epilog="The spec's keys: docs/experiments.md#the-mixture-search-spec",
    )
    search.add_argument("spec", metavar="SPEC", help="search spec (TOML)")
    search.add_argument("--output", "-o", required=True, metavar="MANIFEST", help="the winning manifest (JSON)")
    search.add_argument("--verify", action="store_true", help="train the chosen mixture fresh and compare it")
    search.add_argument("--resume", action="store_true", help="continue an interrupted search")
    search.add_argument("--address", metavar="ADDR", help="a Ray cluster to run on (default: Ray on this machine)")
    add_num_cpus_argument(search)
    search.add_argument("--catalog", metavar="NAME", default=argparse.SUPPRESS, help="pyiceberg catalog to use")
    search.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only print results and errors"
    )


def run(args: argparse.Namespace) -> int:
    if args.mix_command == "search":
        return search(args)
    from lakehouse.catalog import load_catalog
    from lakehouse.local_files import check_output_file
    from mixtures.pin import pin
    from mixtures.spec import load_spec

    check_output_file(args.output)
    spec = load_spec(args.spec)
    manifest = pin(load_catalog(args.catalog), spec)
    manifest.save(args.output)
    print(format_manifest(manifest))
    print(f"wrote {args.output}")
    return 0


def format_manifest(manifest: Manifest) -> str:
    rows = [("COMPONENT", "SNAPSHOT", "WEIGHT", "FILES", "RECORDS", "HELD-OUT", "FILTER")]
    for c in manifest.components:
        rows.append(
            (
                c.name,
                c.label,
                f"{c.weight:.4f}",
                str(len(c.files)),
                str(c.record_count),
                f"{c.heldout_fraction:g}",
                c.filter or "-",
            )
        )
    header = f"mixture {manifest.name} (seed {manifest.seed}, {manifest.fingerprint})"
    return header + "\n" + format_columns(rows)


def search(args: argparse.Namespace) -> int:
    from experiments.mixture_search import (
        format_search,
        format_verification,
        load_search_spec,
        plan_search,
        run_search,
        verify_optimum,
        write_winner,
    )
    from experiments.report import format_ranking
    from experiments.sweep import ray_session
    from lakehouse.catalog import load_catalog
    from lakehouse.local_files import check_output_file

    check_output_file(args.output)
    spec = load_search_spec(args.spec)
    plan = plan_search(spec, args.catalog)  # the config, the base manifest and the spec checked before Ray starts
    options = {"address": args.address, "num_cpus": args.num_cpus, "catalog_name": args.catalog}
    with ray_session(args.address, args.num_cpus):  # one Ray for the search and the check
        result = run_search(spec, resume=args.resume, plan=plan, **options)
        print(format_ranking(result.rows))
        print(format_search(result))
        manifest, spec_path = write_winner(load_catalog(args.catalog), result, spec, _base_manifest(spec), args.output)
        print(format_manifest(manifest))
        print(f"wrote {spec_path} and {args.output}")
        if args.verify:
            row = verify_optimum(spec, result, args.output, resume=args.resume, **options)
            print(format_verification(result, row))
            if row is not None:
                print(f"trained on it: {row['run_dir']} (factory lineage {row['run_dir']})")
    return 0 if not result.outcome.unfinished else 130


def _base_manifest(spec) -> str:
    from trainer.config import load_config

    return load_config(spec.config, list(spec.set)).data.manifest
