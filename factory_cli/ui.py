"""``factory ui``: serve the read-only web app over the catalog and run folders (ui/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lakehouse.catalog import factory_home
from lakehouse.errors import InputError


def add_arguments(parser: argparse.ArgumentParser, _name: str = "ui") -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8321, help="port (default: 8321; 0 picks a free one)")
    parser.add_argument(
        "--runs",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder to look for training runs and manifests in (repeatable; default: $FACTORY_HOME)",
    )


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port < 65536:
        raise InputError(f"--port must be between 0 and 65535, got {args.port}")
    from ui.app import create_app
    from ui.server import serve
    from ui.sources import Sources

    sources = Sources(args.catalog, args.runs or [factory_home()])
    sources.catalog  # noqa: B018  (a catalog that cannot load is an error now, not on the first page)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: serving on {args.host}: the UI has no authentication; put it behind a proxy that has",
            file=sys.stderr,
        )
    serve(create_app(sources), args.host, args.port, "warning" if args.quiet else "info")
    return 0
