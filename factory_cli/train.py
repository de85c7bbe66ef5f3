"""``factory train``: launch the trainer through torchrun, on this machine or as one node of many."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from lakehouse.errors import ConfigError
from trainer.config import load_config
from trainer.launch import command
from trainer.resume import check_start


def add_arguments(parser: argparse.ArgumentParser, _name: str = "train") -> None:
    parser.epilog = "The config's keys: docs/training.md#the-config"
    parser.add_argument("--config", required=True, metavar="FILE", help="training config (TOML)")
    parser.add_argument("--nproc", type=int, default=1, help="processes (ranks) on this machine (default: 1)")
    parser.add_argument(
        "--nnodes", type=int, default=1, help="machines in the run; each runs this command (default: 1, this one)"
    )
    parser.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="with --nnodes > 1: the c10d rendezvous every node joins (a port on one of the nodes)",
    )
    parser.add_argument("--rdzv-id", default="factory", help="with --nnodes > 1: the run's rendezvous id")
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)"
    )


def torchrun_command(args: argparse.Namespace) -> list[str]:
    nodes = None if args.nnodes == 1 else (args.nnodes, args.rdzv_endpoint, args.rdzv_id)
    return command(args.config, args.nproc, args.set, args.resume, nodes)


def check_inputs(cfg) -> None:
    """The manifests and tokenizer the run reads, read once here: a missing or damaged one is
    refused before torchrun starts (each rank would fail on it, its error among torchrun's)."""
    from mixtures.manifest import Manifest
    from streaming_loader.tokenize import load_tokenizer_spec

    for manifest in dict.fromkeys(m for m in (cfg.data.manifest, cfg.eval.manifest) if m):
        Manifest.load(manifest)
    load_tokenizer_spec(cfg.data.tokenizer)


def run(args: argparse.Namespace) -> int:
    if args.nproc < 1 or args.nnodes < 1:
        raise ConfigError("--nproc and --nnodes must be at least 1")
    if args.nnodes > 1 and not args.rdzv_endpoint:
        raise ConfigError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the rendezvous every node joins")
    cfg = load_config(args.config, args.set)  # fail here, before starting any rank
    cfg.check_world(args.nproc * args.nnodes)
    check_inputs(cfg)
    check_start(cfg, args.resume)
    return launch(torchrun_command(args), args.nproc)


def launch(argv: Sequence[str], nproc: int) -> int:
    """Run torchrun (``factory train`` and ``factory rl train``), the machine's cores shared among
    its ``nproc`` ranks, its stderr passed on line by line through this process's ``sys.stderr``
    rather than inherited: under `factory run` that stream is where a step's output is kept, and a
    rank's ``error (rank r): …`` line has to reach the step's failure. Its stdout (progress) stays
    inherited, shown as it is printed."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc))),
    }
    with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True, errors="replace") as proc:
        try:
            for line in proc.stderr:
                sys.stderr.write(line)
                sys.stderr.flush()
        except BaseException:  # interrupted: end torchrun, as subprocess.run would (its ranks follow it)
            proc.kill()
            raise
    return proc.returncode
