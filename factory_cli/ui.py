"""``factory ui``: serve the web app over the catalog and run folders (ui/)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from lakehouse.catalog import factory_home
from lakehouse.errors import InputError


def add_arguments(parser: argparse.ArgumentParser, _name: str = "ui") -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    parser.add_argument(
        "--port",
        type=int,
        default=8321,
        help="port (default: 8321; 0 picks a free one: the URL printed once listening names it)",
    )
    parser.add_argument(
        "--runs",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder to look for training runs and manifests in (repeatable; default: $FACTORY_HOME)",
    )
    playground = parser.add_argument_group("the playground's generation")
    playground.add_argument(
        "--generate-workers", type=int, default=1, metavar="N", help="generations at once (default: 1)"
    )
    playground.add_argument(
        "--generate-queue",
        type=int,
        default=4,
        metavar="N",
        help="generations that may wait for a worker; past that the playground answers 503 (default: 4)",
    )
    playground.add_argument(
        "--generate-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds a request waits for its generation before a 504 (default: 120)",
    )
    playground.add_argument(
        "--models", type=int, default=4, metavar="N", help="models kept loaded, most recently used (default: 4)"
    )
    playground.add_argument(
        "--device", default="", help="torch device to generate on, e.g. cpu or cuda:1 (default: cuda if any, else cpu)"
    )


# Checked here rather than by torch.device, which would import torch at start-up (the playground
# imports it on its first generation).
_DEVICE = re.compile(r"cpu|mps|(cuda|xpu)(:\d+)?")


def _check_device_present(device: str) -> None:
    """A device torch cannot reach failed each generation with a 500, the server itself running on.
    Naming an accelerator costs the torch import at start-up; the default (and cpu) does not."""
    import torch

    kind, _, index = device.partition(":")
    backend = {"cuda": torch.cuda, "xpu": getattr(torch, "xpu", None), "mps": torch.backends.mps}[kind]
    count = 0 if backend is None or not backend.is_available() else getattr(backend, "device_count", lambda: 1)()
    if int(index or 0) >= count:
        raise InputError(
            f"--device {device}: this machine has {count} {kind} device(s) that torch can use; "
            "name one of them, or cpu (or leave --device out)"
        )


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port < 65536:
        raise InputError(f"--port must be between 0 and 65535, got {args.port}")
    if args.generate_workers < 1 or args.generate_queue < 0 or args.models < 1 or not args.generate_timeout > 0:
        raise InputError(
            "--generate-workers and --models must be 1 or more, --generate-queue 0 or more, --generate-timeout above 0"
        )
    missing = [folder for folder in args.runs or () if not Path(folder).is_dir()]
    if missing:
        raise InputError(f"--runs {missing[0]} is not a folder")
    if args.device and not _DEVICE.fullmatch(args.device):
        raise InputError(f"--device {args.device!r} is not a torch device: cpu, cuda, cuda:N, mps")
    if args.device not in ("", "cpu"):
        _check_device_present(args.device)
    from ui.app import create_app
    from ui.generation import GenerationSettings
    from ui.server import check_can_listen, serve
    from ui.sources import Sources

    check_can_listen(args.host, args.port)

    if not (args.catalog or os.environ.get("FACTORY_CATALOG")) and not (factory_home() / "catalog.db").is_file():
        # A mistyped FACTORY_HOME would otherwise serve an empty lakehouse, made there, without a word.
        print(
            f"warning: no lakehouse in {factory_home()} yet (FACTORY_HOME): serving an empty one, made there",
            file=sys.stderr,
        )
    sources = Sources(args.catalog, args.runs or [factory_home()])
    sources.catalog  # noqa: B018  (a catalog that cannot load is an error now, not on the first page)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: serving on {args.host}: the UI has no authentication and its forms write (ratings) and "
            "generate (playground); put it behind a proxy that authenticates and limits rates",
            file=sys.stderr,
        )
    generation = GenerationSettings(
        args.generate_workers, args.generate_queue, args.generate_timeout, args.models, args.device
    )
    serve(create_app(sources, generation), args.host, args.port, "warning" if args.quiet else "info")
    return 0
