"""``factory train``: launch the trainer through torchrun on this machine."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from lakehouse.errors import ConfigError
from trainer.config import load_config


def add_arguments(parser: argparse.ArgumentParser, _name: str = "train") -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="training config (TOML)")
    parser.add_argument("--nproc", type=int, default=1, help="processes (ranks) on this machine (default: 1)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)"
    )


def torchrun_command(args: argparse.Namespace) -> list[str]:
    # torchrun (trainer.launch: torchrun, ending as its ranks did); --standalone: one machine, a
    # private rendezvous on a free port (so runs never collide).
    command = [sys.executable, "-m", "trainer.launch", "--standalone", "--nproc-per-node", str(args.nproc)]
    command += ["-m", "trainer.train", "--config", args.config]
    for override in args.set:
        command += ["--set", override]
    if args.resume:
        command.append("--resume")
    return command


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
