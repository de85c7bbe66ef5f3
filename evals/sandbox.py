"""Running untrusted Python programs (generated code) in a sandbox, never in this process.

Each program runs in its own process tree, in a fresh temporary folder, with a CPU-time limit
(RLIMIT_CPU), an address-space limit (RLIMIT_AS), a process-count limit (RLIMIT_NPROC), a
file-size limit (RLIMIT_FSIZE) and a wall-clock timeout after which its whole process group is
killed. How far it is isolated depends on what the machine has (docs/architecture.md, "The
sandbox"), tried in this order, or forced with ``FACTORY_SANDBOX=bwrap|unshare|setuid``:

- ``bwrap`` (bubblewrap): new user, PID, network, mount, IPC and UTS namespaces; the root file
  system read-only, a private ``/tmp``, only the program's folder writable; user ``nobody``; the
  program dies with its launcher.
- ``unshare`` (util-linux, as root): new network and PID namespaces (no network at all, every
  process killed with the namespace's first); a user id of its own per worker slot, so it can
  write only where any user may (its folder, world-writable ``/tmp``) and signal only its own
  processes. The file system is otherwise the host's, read as that user.
- ``setuid`` (as root, no namespaces): the user id of its slot and the limits only; the network
  is NOT closed. Used only where neither tool works.

Without root and without a working bubblewrap nothing can keep a program from the user's files
and processes, so evaluation is refused (``MissingDependencyError``) rather than run unguarded.

The limits are set by util-linux's ``prlimit`` inside the namespaces, rather than by a
``preexec_fn``, which is unsafe in this threaded launcher. RLIMIT_NPROC counts the processes of
a user id (per user namespace): each sandbox has its own (a user namespace, or its slot's uid),
so one program's fork bomb neither reaches the others' count nor the host's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lakehouse.errors import MissingDependencyError

MODES = ("bwrap", "unshare", "setuid")
SANDBOX_UID = 65534  # nobody, as the program sees itself inside bubblewrap's user namespace
SLOT_UID_BASE = 61000  # run by root, slot n runs as uid 61000 + n (no account needed) in every mode
_OUTPUT_TAIL = 4096


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 10  # RLIMIT_CPU, seconds of CPU time
    memory_bytes: int = 1 << 30  # RLIMIT_AS, address space
    processes: int = 32  # RLIMIT_NPROC, processes of the sandbox's user
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE, largest file it may write
    wall_s: float = 10.0  # wall-clock timeout; then the whole process group is killed


@dataclass(frozen=True)
class Outcome:
    passed: bool  # exited with status 0 within its limits
    status: str  # passed, failed (non-zero exit or killed by a signal), timeout
    returncode: int | None
    output: str  # the last 4 KiB of its stdout and stderr

    @property
    def failed(self) -> bool:
        return not self.passed


def sandbox_mode() -> str:
    """The isolation this machine gives (``FACTORY_SANDBOX`` forces one), else MissingDependencyError."""
    forced = os.environ.get("FACTORY_SANDBOX")
    if forced:
        if forced not in MODES:
            raise MissingDependencyError(f"FACTORY_SANDBOX must be one of {', '.join(MODES)}, got {forced!r}")
        if not _works(forced):
            raise MissingDependencyError(f"the {forced} sandbox does not work on this machine")
        return forced
    for mode in MODES:
        if _works(mode):
            return mode
    raise MissingDependencyError(
        "no sandbox to run generated code in: install bubblewrap (apt-get install bubblewrap) or run as root "
        "(for unshare and a separate user id); untrusted programs are never run unguarded"
    )


def run_programs(
    sources: Sequence[str], limits: Limits = Limits(), workers: int | None = None, mode: str | None = None
) -> list[Outcome]:
    """Run each program in its own sandbox, ``workers`` at a time (default: the CPU count)."""
    mode = mode or sandbox_mode()
    workers = max(1, min(workers or os.cpu_count() or 1, len(sources) or 1))
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(workers):
        slots.put(slot)

    def one(source: str) -> Outcome:
        slot = slots.get()  # a slot is one uid: no two programs share one at a time
        try:
            return run_program(source, limits, mode, slot)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
        return list(pool.map(one, sources))


def run_program(source: str, limits: Limits = Limits(), mode: str | None = None, slot: int = 0) -> Outcome:
    """Run one program in a sandbox and report how it ended. Never raises for what the program does."""
    mode = mode or sandbox_mode()
    folder = Path(tempfile.mkdtemp(prefix="factory-sandbox-"))
    uid = SLOT_UID_BASE + slot
    try:
        (folder / "program.py").write_text(source, encoding="utf-8")
        if os.geteuid() == 0:
            os.chown(folder, uid, uid)
        # Read back through this descriptor, never by name: the program owns its folder and could put
        # a link to another file in the log's place.
        with tempfile.TemporaryFile(dir=folder) as out:
            process = subprocess.Popen(
                _command(mode, folder, limits, uid),
                cwd=folder,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(folder), "PYTHONHASHSEED": "0"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the timeout kills all of it
                close_fds=True,
            )
            try:
                returncode = process.wait(timeout=limits.wall_s)
                status = "passed" if returncode == 0 else "failed"
            except subprocess.TimeoutExpired:
                returncode, status = None, "timeout"
            finally:
                _kill_group(process.pid)
                process.wait()
                if os.geteuid() == 0:
                    _kill_uid(uid)  # a process that left the group (setsid) is still this uid's
            return Outcome(status == "passed", status, returncode, _tail(out))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _command(mode: str, folder: Path, limits: Limits, uid: int) -> list[str]:
    limited = [
        "prlimit",
        f"--cpu={limits.cpu_s}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        "--",
        _python(mode),
        "-I",  # no environment variables, no user site, no script folder on the path
        "-S",  # no site-packages: generated code gets the standard library only
        "-B",
        str(folder / "program.py"),
    ]
    # Root drops to the slot's uid first, bubblewrap included: RLIMIT_NPROC exempts uid 0, and a
    # user namespace mapped to root outside would leave a fork bomb unbounded.
    as_user = (
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]
        if os.geteuid() == 0
        else []
    )
    if mode == "bwrap":
        return [
            *as_user,
            "bwrap",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--tmpfs", "/tmp",
            "--bind", str(folder), str(folder),
            "--chdir", str(folder),
            "--unshare-all",
            "--unshare-user",
            "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID),
            "--die-with-parent",
            "--new-session",
            "--cap-drop", "ALL",
            "--",
            *limited,
        ]  # fmt: skip
    if mode == "unshare":
        return ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", *as_user, *limited]
    return [*as_user, *limited]


def _python(mode: str) -> str:
    """An interpreter the sandbox's user may run: this one, or the system's for a uid of its own
    when this one is in a folder only root may enter (e.g. under /root)."""
    if os.geteuid() != 0 or _others_can_run(sys.executable):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if _others_can_run(candidate):
            return candidate
    raise MissingDependencyError(f"no Python interpreter that the {mode} sandbox's user may run")


def _others_can_run(path: str) -> bool:
    real = Path(os.path.realpath(path))
    if not real.is_file() or not real.stat().st_mode & stat.S_IXOTH:
        return False
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in real.parents)


@functools.cache
def _works(mode: str) -> bool:
    """Whether ``mode`` runs a trivial program here (probed once per process)."""
    tools = {
        "bwrap": ("bwrap", "prlimit"),
        "unshare": ("unshare", "setpriv", "prlimit"),
        "setuid": ("setpriv", "prlimit"),
    }
    if any(shutil.which(tool) is None for tool in tools[mode]):
        return False
    if mode != "bwrap" and os.geteuid() != 0:  # they need root to change uid or make namespaces
        return False
    try:
        _python(mode)
        outcome = run_program("print('ok')", Limits(wall_s=30), mode)
    except (OSError, MissingDependencyError):
        return False
    return outcome.passed and outcome.output.strip() == "ok"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pgid, signal.SIGKILL)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of ``uid`` (``kill -1`` as that user reaches exactly those)."""
    subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", "kill", "-KILL", "-1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def _tail(out: IO[bytes]) -> str:
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - _OUTPUT_TAIL))
    return out.read().decode("utf-8", errors="replace")
