"""``factory train``: launch the trainer through torchrun, on this machine or as one node of many."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

from lakehouse.errors import ConfigError
from trainer.config import load_config
from trainer.launch import QUIET_ENV, command, signal_on_parent_death
from trainer.resume import check_start

# Training opens no catalog by name: the loader reads the manifest's pinned data files, and each
# checkpoint's lineage reads the catalog the manifest records it was pinned in. A --catalog here
# would be ignored, so it is refused (factory_cli/main.py).
NO_CATALOG = (
    "it reads the data files its manifest pinned, and its checkpoints' lineage reads the catalog the manifest "
    "was pinned in (recorded in the manifest); choose the catalog when pinning: factory mix pin SPEC --catalog NAME"
)


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
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, VALUE read as TOML, e.g. --set optim.lr=0.003; text goes in double quotes "
        "(--set 'run.dir=\"runs/a\"'), though unquoted text that is no TOML value is taken as it is; repeatable",
    )


def torchrun_command(args: argparse.Namespace) -> list[str]:
    nodes = None if args.nnodes == 1 else (args.nnodes, args.rdzv_endpoint, args.rdzv_id)
    return command(args.config, args.nproc, args.set, args.resume, nodes)


def run(args: argparse.Namespace) -> int:
    if args.nproc < 1 or args.nnodes < 1:
        raise ConfigError("--nproc and --nnodes must be at least 1")
    if args.nnodes > 1 and not args.rdzv_endpoint:
        raise ConfigError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT, the rendezvous every node joins")
    cfg = load_config(args.config, args.set)  # fail here, before starting any rank
    cfg.check_world(args.nproc * args.nnodes)
    cfg.run.check_local_ranks(args.nproc)
    check_start(cfg, args.resume)  # its inputs, vocabulary and run folder, before any rank starts
    return launch(torchrun_command(args), args.nproc, quiet=args.quiet)


def launch(argv: Sequence[str], nproc: int, quiet: bool = False) -> int:
    """Run torchrun (``factory train`` and ``factory rl train``), the machine's cores shared among
    its ``nproc`` ranks, its stderr passed on line by line through this process's ``sys.stderr``
    rather than inherited: under `factory run` that stream is where a step's output is kept, and a
    rank's ``error (rank r): …`` line has to reach the step's failure. Its stdout (the line a
    finished run ends with) stays inherited, shown as it is printed. ``quiet`` (``-q``): the ranks
    print no progress line (``QUIET_ENV``), only errors and that last line.

    torchrun runs in its own session, so that a signal reaches it once, from here: SIGTERM or
    SIGINT (Ctrl-C) to this process is passed on and torchrun stops its ranks before this one
    ends; its line (``training stopped: the launcher got SIGINT; …``) is the one the command
    prints, with no ``interrupted`` after it. Were this process killed outright (SIGKILL, the OOM
    killer), the kernel sends torchrun SIGTERM (PR_SET_PDEATHSIG, as a sweep's trials do): the one
    mechanism that needs nothing from a dead parent, and torchrun then stops its ranks as it
    always does."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc))),
    }
    env.pop(QUIET_ENV, None)  # -q alone decides
    if quiet:
        env[QUIET_ENV] = "1"
    proc = subprocess.Popen(
        argv,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=signal_on_parent_death,
    )
    forward = _Forwarder(proc)
    with proc, forward:
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
    if forward.interrupted:
        if proc.returncode == 128 + signal.SIGINT:  # torchrun stopped its ranks and said so, in one line
            return proc.returncode
        raise KeyboardInterrupt  # it did not (a second Ctrl-C killed it): said as every command says it
    if proc.returncode < 0:  # torchrun itself killed (SIGKILL, the OOM killer): its ranks follow it
        name = signal.Signals(-proc.returncode).name
        print(f"training stopped: torchrun was killed by {name}; resume with --resume", file=sys.stderr)
        return 128 - proc.returncode
    return proc.returncode


class _Forwarder:
    """While torchrun runs: SIGTERM and SIGINT to this process are passed on to torchrun's process
    group, and this process waits for torchrun to stop its ranks rather than leaving them running,
    at most ``STOP_S`` before it kills the group (a second signal kills it at once)."""

    STOP_S = 60

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.interrupted = False
        self._got: int | None = None
        self._previous: dict[int, object] = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> _Forwarder:
        if threading.current_thread() is threading.main_thread():  # the only thread signals reach
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, error: type[BaseException] | None, *_: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self._timer is not None:
            self._timer.cancel()
        if error is not None and self.proc.poll() is None:  # this process failed: torchrun must not outlive it
            self._kill()

    def _handle(self, signum: int, _frame: object) -> None:
        self.interrupted |= signum == signal.SIGINT
        if self._got is not None:
            self._kill()
            return
        self._got = signum
        self._signal(signum)
        self._timer = threading.Timer(self.STOP_S, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def _kill(self) -> None:
        self._signal(signal.SIGKILL)
