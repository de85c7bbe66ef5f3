"""``factory train``: launch the trainer through torchrun on this machine."""

from __future__ import annotations

import argparse
import os
import subprocess

from lakehouse.errors import ConfigError
from trainer.config import load_config
from trainer.launch import command


def add_arguments(parser: argparse.ArgumentParser, _name: str = "train") -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="training config (TOML)")
    parser.add_argument("--nproc", type=int, default=1, help="processes (ranks) on this machine (default: 1)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)"
    )


def torchrun_command(args: argparse.Namespace) -> list[str]:
    return command(args.config, args.nproc, args.set, args.resume)


def run(args: argparse.Namespace) -> int:
    if args.nproc < 1:
        raise ConfigError("--nproc must be at least 1")
    cfg = load_config(args.config, args.set)  # fail here, before starting any rank
    cfg.check_world(args.nproc)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc))),
    }
    return subprocess.run(torchrun_command(args), env=env).returncode
