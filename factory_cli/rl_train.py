"""``factory rl train --config FILE``: the GRPO learner (``rl/learner.py``) on this machine's ranks, through torchrun."""

from __future__ import annotations

import argparse

from factory_cli.train import launch
from lakehouse.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Train a policy with GRPO from a pre-trained checkpoint: sample completions of the tasks, reward them by "
        "running their tests in the sandbox, update the policy (FSDP2 under torchrun, as factory train), evaluate "
        "on held-out tasks and checkpoint as configured."
    )
    parser.epilog = "The config's keys: docs/rl-training.md#the-config"
    parser.add_argument("--config", required=True, metavar="FILE", help="RL training config (TOML)")
    parser.add_argument("--nproc", type=int, default=1, help="processes (ranks) on this machine (default: 1)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value (repeatable)"
    )
    # Also accepted after the subcommand, as `rl build` does; SUPPRESS keeps a value given before it.
    parser.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only print results and errors"
    )


def run(args: argparse.Namespace) -> int:
    from rl.lineage import check_run_dir
    from rl.train_config import load_rl_config
    from trainer.launch import command
    from trainer.lineage import read_lineage

    if args.nproc < 1:
        raise ConfigError("--nproc must be at least 1")
    cfg = load_rl_config(args.config, args.set)  # fail here, before starting any rank
    cfg.check_world(args.nproc)
    check_run_dir(cfg, args.resume)  # the ranks check it again
    read_lineage(cfg.start.checkpoint)  # the starting checkpoint: there, complete, readable
    argv = command(args.config, args.nproc, args.set, args.resume, module="rl.learner")
    return launch(argv, args.nproc, quiet=args.quiet)  # -q: the ranks print no progress line
