"""``python -m trainer.launch ARGS``: torchrun (the same ARGS), ending as the ranks did.

A rank that fails says why itself (``error (rank r): …``, exit status 2, or its own traceback
for a bug); torchrun then adds a traceback of the launcher and exits 1, which tells a user
nothing more. Here a failed run ends with one line per failed rank and exit status 2 when a rank
reported an error of ours (1 otherwise), so ``factory train`` ends as every other command does.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def signal_on_parent_death(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send this process ``sig`` when its parent dies: a child that outlives a
    killed parent (a trial's worker ended by Ray, torchrun killed by the OOM killer) would go on
    training for no one. prctl through ctypes: the standard library has no binding for it. Not
    Linux: nothing happens, and the parent's own shutdown is the only guard."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


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
    argv += ["-m", module, "--config", str(config)]
    for override in overrides:
        argv += ["--set", override]
    if resume:
        argv.append("--resume")
    return argv


def main() -> int:
    # Imported here: ``command`` is used by processes that never start torch (a sweep's trials).
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun()
    except ChildFailedError as failed:
        for rank, failure in sorted(failed.failures.items()):
            how = f"was killed by {failure.signal_name()}" if failure.exitcode < 0 else f"exited {failure.exitcode}"
            print(f"training failed: rank {rank} {how}", file=sys.stderr)
        return 2 if any(f.exitcode == 2 for f in failed.failures.values()) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
