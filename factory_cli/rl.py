"""``factory rl SUBCOMMAND``: reinforcement learning from code execution (docs/rl.md, docs/rl-training.md).

Each subcommand lives in its own module with ``add_arguments(parser)`` and ``run(args)``, imported
only when invoked (as the top-level commands are): ``rl build`` does not pay for ``rl train``'s
torch, and ``factory rl --help`` lists both from the table below."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any

# name → (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "build": (
        "factory_cli.rl_build",
        "build the environment: tasks from repositories whose tests run, validated in the sandbox",
    ),
    "train": ("factory_cli.rl_train", "train a policy with GRPO from a pre-trained checkpoint, through torchrun"),
}


class _SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser that takes its arguments from its module when it first parses: argparse
    hands the words after the subcommand's name to the chosen subcommand's parser only, so the
    module of a subcommand not invoked is never imported."""

    def __init__(self, *args: Any, module: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._module: str | None = module

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._module is not None:
            module, self._module = self._module, None
            importlib.import_module(module).add_arguments(self)
        return super().parse_known_args(args, namespace)


def add_arguments(parser: argparse.ArgumentParser, _name: str = "rl") -> None:
    sub = parser.add_subparsers(dest="rl_command", required=True, metavar="SUBCOMMAND", parser_class=_SubcommandParser)
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, module=module)  # a module may say more


def run(args: argparse.Namespace) -> int:
    return importlib.import_module(SUBCOMMANDS[args.rl_command][0]).run(args)
