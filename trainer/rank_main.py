"""The entry point of one torchrun rank: read the config, join the world, train, and turn what a
user can fix into ``error: …`` and exit 2 (``trainer.train`` and ``rl.learner`` share it)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from lakehouse.errors import FactoryError
from lakehouse.storage_errors import storage_error
from trainer.launch import signal_on_parent_death
from trainer.parallel import World, init_world, shutdown


def rank_main(
    prog: str,
    description: str,
    load: Callable[[str, list[str]], Any],
    train: Callable[[Any, World, bool], None],
    argv: list[str] | None = None,
) -> int:
    """``load(config, sets)`` gives a config with ``check_world(size)``; ``train(cfg, world, resume)``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--config", required=True, help="the config (TOML)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a value")
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    args = parser.parse_args(argv)
    die_with_launcher()
    try:
        cfg = load(args.config, args.set)
        world = init_world()
    except FactoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        cfg.check_world(world.size)
        train(cfg, world, args.resume)
    except FactoryError as exc:
        print(f"error (rank {world.rank}): {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a full disk or a read-only run directory (also inside DCP's errors): said plainly
        error = storage_error(exc)
        if error is None:
            raise
        print(f"error (rank {world.rank}): {error}", file=sys.stderr)
        return 2
    finally:
        shutdown(world)
    return 0


def die_with_launcher() -> None:
    """Get SIGTERM when torchrun, this rank's parent, dies; end now if it died a moment ago.

    torchrun stops its ranks when it is stopped, but not when it is killed (a sweep's trial
    ended by Ray, a launcher killed by the OOM killer): its ranks would live on, orphans that
    wait in the rendezvous or go on training, holding memory and writing to a run no one owns."""
    launcher = os.getppid()
    signal_on_parent_death()
    if os.getppid() != launcher:  # it died before the request above: no signal will come
        sys.exit("error: torchrun, this rank's launcher, has exited")
