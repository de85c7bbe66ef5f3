"""``factory rl SUBCOMMAND``: reinforcement learning from code execution (docs/rl.md, docs/rl-training.md).

Each subcommand lives in its own module with ``add_arguments(parser)`` and ``run(args)``, imported
only when invoked (as the top-level commands are)."""

from __future__ import annotations

import argparse
import importlib

# name → (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "build": (
        "factory_cli.rl_build",
        "build the environment: tasks from repositories whose tests run, validated in the sandbox",
    ),
    "train": ("factory_cli.rl_train", "train a policy with GRPO from a pre-trained checkpoint, through torchrun"),
}


def add_arguments(parser: argparse.ArgumentParser, _name: str = "rl") -> None:
    sub = parser.add_subparsers(dest="rl_command", required=True, metavar="SUBCOMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)  # a module may say more
        importlib.import_module(module).add_arguments(command)


def run(args: argparse.Namespace) -> int:
    return importlib.import_module(SUBCOMMANDS[args.rl_command][0]).run(args)
