"""``python -m trainer.launch ARGS``: torchrun (the same ARGS), ending as the ranks did.

A rank that fails says why itself (``error (rank r): …``, exit status 2, or its own traceback
for a bug); torchrun then adds a traceback of the launcher and exits 1, which tells a user
nothing more. Here a failed run ends with one line per failed rank and exit status 2 when a rank
reported an error of ours (1 otherwise), so ``factory train`` ends as every other command does.
The ranks torchrun stopped because another failed, and those whose collective broke because a
peer died (exit status ``PEER_LOST``, said by nothing), are not failures of their own: not named.
A launcher stopped by a signal says so in one line and exits 128 + the signal's number.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# Set to "1" by `factory train -q` for its ranks: no progress line (trainer/metrics.py), only
# errors and the line a finished run ends with. Also for a torchrun started by hand.
QUIET_ENV = "FACTORY_QUIET"

# The exit status of a rank whose collective failed because another rank's process ended: the
# other rank's own line (or its signal) says why; this one is its consequence, not a failure.
PEER_LOST = 3

# torch-elastic's log lines that this module restates in its own words (or that restate a
# rank's own line): filtered out of its loggers, which keep every other warning.
_RESTATED = {
    "torch.distributed.elastic.multiprocessing.api": ("Sending process %s closing signal", "failed (exitcode"),
    "torch.distributed.elastic.agent.server.api": ("Received %s death signal",),
}


def signal_on_parent_death(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process ``sig`` when its parent dies: a child that outlives a
    killed parent (a trial's worker ended by Ray, torchrun killed by the OOM killer) would go on
    training for no one. prctl through ctypes: the standard library has no binding for it. Not
    Linux: nothing happens, and the parent's own shutdown is the only guard."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def quiet() -> bool:
    """Whether this process was asked to print no progress (``QUIET_ENV``)."""
    return os.environ.get(QUIET_ENV) == "1"


def command(
    config: str,
    nproc: int,
    overrides: Sequence[str] = (),
    resume: bool = False,
    nodes: tuple[int, str, str] | None = None,
    module: str = "trainer.train",
) -> list[str]:
    """The command that trains ``config`` on ``nproc`` ranks per machine: what ``factory train`` runs,
    and each trial of ``factory sweep``. One machine: ``--standalone``, a private rendezvous on a free
    port, so runs never collide. Several (``nodes`` = count, rendezvous endpoint, rendezvous id):
    each machine runs this command and joins the c10d rendezvous, which also ranks the nodes.
    ``module``: the program each rank runs (``rl.learner`` for ``factory rl train``)."""
    argv = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", str(nproc)]
    if nodes is None:
        argv.append("--standalone")
    else:
        count, endpoint, rdzv_id = nodes
        argv += ["--nnodes", str(count), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    return argv + rank_arguments(config, overrides, resume, module)


def rank_arguments(config: str, overrides: Sequence[str], resume: bool, module: str) -> list[str]:
    """What each rank is started with, after the interpreter: its module and the run's options."""
    argv = ["-m", module, "--config", str(config)]
    for override in overrides:
        argv += ["--set", override]
    if resume:
        argv.append("--resume")
    return argv


# What torchrun gives the rank of a one-process world: the same process group (gloo or NCCL, a
# device mesh of 1, FSDP) as under torchrun, so its run, checkpoints included, is the same. Port 0:
# rank 0's store takes a free port itself, and a world of one has no peer that must find it.
ONE_RANK_ENV = {
    "RANK": "0",
    "LOCAL_RANK": "0",
    "GROUP_RANK": "0",
    "WORLD_SIZE": "1",
    "LOCAL_WORLD_SIZE": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "0",
}


def one_rank_command(
    config: str, overrides: Sequence[str] = (), resume: bool = False, module: str = "trainer.train"
) -> list[str]:
    """The rank of a one-rank run started without torchrun (run it with ``ONE_RANK_ENV``): a sweep's
    trial, whose own process watches it, need not pay a launcher's second torch import (about 2 s
    of CPU, a quarter of a small trial's). ``failed_one_rank`` says what torchrun would have said."""
    # -u: as torchrun starts its ranks
    return [sys.executable, "-u", *rank_arguments(config, overrides, resume, module)]


@dataclass(frozen=True)
class _Ended:
    """One rank's end as ``summary`` reads a torchrun ``ProcessFailure``: its exit status, or minus
    the signal that killed it."""

    exitcode: int

    def signal_name(self) -> str:
        return signal.Signals(-self.exitcode).name


def failed_one_rank(returncode: int) -> tuple[int, list[str]]:
    """A one-rank run's rank that exited ``returncode`` (not 0; minus a signal, as ``Popen`` says),
    ended as ``main`` would have ended its launcher: the exit status and the lines it prints."""
    return (2 if returncode == 2 else 1), summary({0: _Ended(returncode)})


def summary(failures: Mapping[int, Any]) -> list[str]:
    """One line per rank that failed, from torchrun's ``ChildFailedError.failures`` (rank →
    ``ProcessFailure``). A rank that exited with a status of its own failed; ranks killed by torchrun's
    SIGTERM once another had, or that lost a peer, are named only when no rank failed on its own:
    the signals first (the OOM killer's SIGKILL), then, with none, the ranks that lost a peer (whose
    cause is on another machine's output)."""

    def signal_of(failure: Any) -> str:
        return failure.signal_name() if failure.exitcode < 0 else ""

    own = {r: f for r, f in failures.items() if f.exitcode > 0 and f.exitcode != PEER_LOST}
    killed = {r: f for r, f in failures.items() if f.exitcode < 0}
    first_killed = {r: f for r, f in killed.items() if signal_of(f) != "SIGTERM"} or killed
    named = own or first_killed
    if named:
        return [
            f"training failed: rank {rank} "
            + (f"was killed by {signal_of(failure)}" if failure.exitcode < 0 else f"exited {failure.exitcode}")
            for rank, failure in sorted(named.items())
        ]
    ranks = ", ".join(str(rank) for rank in sorted(failures))
    who = f"rank {ranks}" if len(failures) == 1 else f"ranks {ranks}"
    return [f"training failed: {who} lost the connection to another rank, which ended (see its output)"]


def stopped(signum: int) -> str:
    """The line a launcher stopped by ``signum`` ends with: its ranks were stopped too."""
    return f"training stopped: the launcher got {signal.Signals(signum).name}; resume with --resume"


def quiet_restated_logs() -> None:
    for name, prefixes in _RESTATED.items():
        logging.getLogger(name).addFilter(lambda record, p=prefixes: not str(record.msg).startswith(p))


def say(line: str) -> None:
    """Print ``line`` to stderr; a reader that is gone (a killed ``factory train``) is no error."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def main() -> int:
    # Imported here: ``command`` is used by processes that never start torch (a sweep's trials).
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    quiet_restated_logs()
    try:
        torchrun()
    except ChildFailedError as failed:
        for line in summary(failed.failures):
            say(line)
        return 2 if any(f.exitcode == 2 for f in failed.failures.values()) else 1
    except SignalException as got:  # torchrun has stopped its ranks; its traceback says no more
        say(stopped(got.sigval))
        return 128 + int(got.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
