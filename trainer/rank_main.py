"""The entry point of one torchrun rank: read the config, join the world, train, and turn what a
user can fix into ``error: …`` and exit 2 (``trainer.train`` and ``rl.learner`` share it)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from lakehouse.errors import FactoryError
from lakehouse.storage_errors import storage_error
from trainer.launch import PEER_LOST, signal_on_parent_death
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
    # torchrun stops its ranks with the signal it got: SIGINT (Ctrl-C) ends a rank as SIGTERM
    # does, at once and silently, not with a KeyboardInterrupt traceback from wherever it was.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
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
        if lost_a_peer(exc):  # another rank ended first: its own line (or its signal) is the failure
            return PEER_LOST
        error = storage_error(exc)
        if error is None:
            raise
        print(f"error (rank {world.rank}): {error}", file=sys.stderr)
        return 2
    finally:
        shutdown(world)
    return 0


# How gloo says that the rank at the other end of a collective has gone (its process ended).
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def lost_a_peer(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from, as DCP wraps a rank's) is a collective
    that failed because another rank's process ended: a consequence, said by that rank, whose
    traceback here (some fifty lines of gloo) would hide the one line that says why."""
    seen: BaseException | None = exc
    while seen is not None:
        if any(marker in str(seen) for marker in _PEER_GONE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def die_with_launcher() -> None:
    """Get SIGTERM when torchrun, this rank's parent (or a one-rank trial's worker, which starts
    the rank itself: ``trainer.launch.one_rank_command``), dies; end now if it died a moment ago.

    torchrun stops its ranks when it is stopped, but not when it is killed (a sweep's trial
    ended by Ray, a launcher killed by the OOM killer): its ranks would live on, orphans that
    wait in the rendezvous or go on training, holding memory and writing to a run no one owns."""
    launcher = os.getppid()
    signal_on_parent_death()
    if os.getppid() != launcher:  # it died before the request above: no signal will come
        sys.exit("error: torchrun, this rank's launcher, has exited")
