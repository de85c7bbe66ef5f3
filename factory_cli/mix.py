"""``factory mix pin SPEC --output MANIFEST``: resolve a mixture spec to snapshot ids and files."""

from __future__ import annotations

import argparse

from factory_cli.text import format_columns
from mixtures.manifest import Manifest


def add_arguments(parser: argparse.ArgumentParser, _name: str = "mix") -> None:
    sub = parser.add_subparsers(dest="mix_command", required=True, metavar="SUBCOMMAND")
    pin = sub.add_parser(
        "pin",
        help="resolve every ref of a spec to a snapshot id and list its data files",
        description="Resolve a mixture spec (TOML or YAML) to a pinned manifest: snapshot ids, data files, "
        "record counts, row filters, held-out split and a fingerprint. The loader accepts only manifests.",
    )
    pin.add_argument("spec", metavar="SPEC", help="mixture spec, .toml or .yaml")
    pin.add_argument("--output", "-o", required=True, metavar="MANIFEST", help="where to write the manifest (JSON)")
    # Also accepted after the subcommand; SUPPRESS keeps a value given before it.
    pin.add_argument("--catalog", metavar="NAME", default=argparse.SUPPRESS, help="pyiceberg catalog to use")
    pin.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only print errors")


def run(args: argparse.Namespace) -> int:
    from lakehouse.catalog import load_catalog
    from mixtures.pin import pin
    from mixtures.spec import load_spec

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
