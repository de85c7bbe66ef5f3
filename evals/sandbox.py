"""Running untrusted Python programs (generated code) in a sandbox, never in this process.

Each program runs in its own process tree, in a fresh temporary folder, with a CPU-time limit
(RLIMIT_CPU), an address-space limit (RLIMIT_AS), a process-count limit (RLIMIT_NPROC), a
file-size limit (RLIMIT_FSIZE) and a wall-clock timeout after which its whole process group is
killed. How far it is isolated depends on what the machine has (docs/architecture.md, "The
sandbox"), tried in this order, or forced with ``FACTORY_SANDBOX=bwrap|unshare|setuid``:

- ``bwrap`` (bubblewrap): new user, PID, network, mount, IPC and UTS namespaces; the root file
  system read-only, a private ``/tmp``, only the program's folder writable; user ``nobody``
  inside (run by root: a uid of its own outside, see below); the program dies with its launcher.
- ``unshare`` (util-linux, as root): new network and PID namespaces (no network at all, every
  process killed with the namespace's first); a user id of its own (``claimed_uid``), so it can
  write only where any user may (its folder, world-writable ``/tmp``) and signal only its own
  processes. The file system is otherwise the host's, read as that user.
- ``setuid`` (as root, no namespaces): its own user id and the limits only; the network
  is NOT closed. Used only where neither tool works.

Without root and without a working bubblewrap nothing can keep a program from the user's files
and processes, so evaluation is refused (``MissingDependencyError``) rather than run unguarded.

The limits are set by util-linux's ``prlimit`` inside the namespaces, rather than by a
``preexec_fn``, which is unsafe in this threaded launcher. RLIMIT_NPROC counts the processes of
a user id (per user namespace) but exempts uid 0, so root never runs a program, nor bubblewrap,
as root: each gets a uid no other sandbox holds meanwhile (``claimed_uid``), and one program's
fork bomb reaches neither the others' count nor the host's.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from lakehouse.errors import MissingDependencyError
from lakehouse.schemas import SAMPLE_OUTPUT_BYTES

MODES = ("bwrap", "unshare", "setuid")
SANDBOX_UID = 65534  # nobody, as the program sees itself inside bubblewrap's user namespace
# Run by root, each program runs as a uid of its own from this range (no account needed), in every mode.
SLOT_UID_BASE = 61000
UID_RANGE = 4096
LOCK_DIR = Path(tempfile.gettempdir()) / "factory-sandbox-uids"
# Why a program ended (``Outcome.exit_reason``): how evals.samples records it.
EXIT_REASONS = ("exit", "error", "memory", "cpu", "signal", "timeout")
_MARKER_ROOM = 80  # bytes of an excerpt kept for the line that says it was cut


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
    stdout: str  # its end, at most SAMPLE_OUTPUT_BYTES bytes of UTF-8, marked where cut (``excerpt``)
    stderr: str
    exit_reason: str  # one of EXIT_REASONS (``exit_reason``)
    duration_s: float  # wall-clock seconds from its start to its end (or its kill)

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
    with contextlib.ExitStack() as claims:
        uids: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        for _ in range(workers):
            uids.put(claims.enter_context(claimed_uid()))

        def one(source: str) -> Outcome:
            uid = uids.get()  # one program per uid at a time
            try:
                return run_program(source, limits, mode, uid)
            finally:
                uids.put(uid)

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox") as pool:
            return list(pool.map(one, sources))


@contextlib.contextmanager
def claimed_uid() -> Iterator[int | None]:
    """A uid no other sandbox on this machine uses meanwhile (None when not root: the user's own).

    Claimed by an exclusive lock on a file per uid, which the kernel drops if this process dies:
    two evaluators at once (an orchestrator's parallel evals) never share a uid, whose process
    count and ``kill -1`` clean-up would otherwise reach each other's programs."""
    if os.geteuid() != 0:
        yield None
        return
    LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    for uid in range(SLOT_UID_BASE, SLOT_UID_BASE + UID_RANGE):
        fd = os.open(LOCK_DIR / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            _kill_uid(uid)  # what an evaluator that died left running as this uid
            yield uid
        finally:
            os.close(fd)  # releases the lock
        return
    raise MissingDependencyError(f"all {UID_RANGE} sandbox uids from {SLOT_UID_BASE} are in use")


def run_program(source: str, limits: Limits = Limits(), mode: str | None = None, uid: int | None = None) -> Outcome:
    """Run one program in a sandbox and report how it ended. Never raises for what the program does.

    ``uid``: one claimed with ``claimed_uid`` (claimed here if not given, when root)."""
    mode = mode or sandbox_mode()
    if uid is None and os.geteuid() == 0:
        with claimed_uid() as claimed:
            return run_program(source, limits, mode, claimed)
    folder = Path(tempfile.mkdtemp(prefix="factory-sandbox-"))
    try:
        (folder / "program.py").write_text(source, encoding="utf-8")
        if uid is not None:
            os.chown(folder, uid, uid)
        # Read back through these descriptors, never by name: the program owns its folder and could put
        # a link to another file in the logs' place.
        with tempfile.TemporaryFile(dir=folder) as out, tempfile.TemporaryFile(dir=folder) as err:
            started = time.monotonic()
            process = subprocess.Popen(
                _command(mode, folder, limits, uid),
                cwd=folder,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(folder), "PYTHONHASHSEED": "0"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
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
                duration_s = time.monotonic() - started
                if uid is not None:
                    _kill_uid(uid)  # a process that left the group (setsid) is still this uid's
            stdout, stderr = _excerpt(out), _excerpt(err)
            reason = exit_reason(returncode, stderr, mode)
            return Outcome(status == "passed", status, returncode, stdout, stderr, reason, duration_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def exit_reason(returncode: int | None, stderr: str, mode: str) -> str:
    """``exit`` (status 0), ``error`` (another status), ``memory`` (a MemoryError: RLIMIT_AS),
    ``cpu`` (SIGKILL or SIGXCPU: RLIMIT_CPU, the only limit that kills), ``signal`` (another
    signal, e.g. SIGSEGV) or ``timeout`` (the wall clock; ``returncode`` None)."""
    if returncode is None:
        return "timeout"
    killed_by = -returncode if returncode < 0 else None
    if mode in ("bwrap", "unshare") and returncode > 128:
        killed_by = returncode - 128  # their pid 1 (bubblewrap's, the shell) exits 128 + n for a child killed by n
    if killed_by is not None:
        return "cpu" if killed_by in (signal.SIGKILL, signal.SIGXCPU) else "signal"
    if returncode == 0:
        return "exit"
    last_line = stderr.rstrip().rsplit("\n", 1)[-1]
    return "memory" if last_line.startswith("MemoryError") else "error"


def prlimit(limits: Limits) -> list[str]:
    """The ``prlimit`` command that runs what follows it under ``limits`` (no core files)."""
    return [
        "prlimit",
        f"--cpu={limits.cpu_s}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        "--",
    ]


def _command(mode: str, folder: Path, limits: Limits, uid: int | None) -> list[str]:
    limited = [
        *prlimit(limits),
        _python(mode),
        "-I",  # no environment variables, no user site, no script folder on the path
        "-S",  # no site-packages: generated code gets the standard library only
        "-B",
        str(folder / "program.py"),
    ]
    # Root drops to the program's own uid first, bubblewrap included: RLIMIT_NPROC exempts uid 0, and a
    # user namespace mapped to root outside would leave a fork bomb unbounded.
    as_user = (
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--"]
        if uid is not None
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
        # A shell is the namespace's pid 1, the program its child: the kernel drops the signals a pid 1
        # sends itself without a handler, so a program run as pid 1 that kills itself (SIGSEGV, SIGABRT)
        # would go on and exit 0. The shell exits 128 + n for a child killed by signal n, as bwrap does.
        init = ["/bin/sh", "-c", '"$@"; exit $?', "init"]
        return ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--", *as_user, *init, *limited]
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
    return outcome.passed and outcome.stdout.strip() == "ok"


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


def _excerpt(out: IO[bytes], limit: int = SAMPLE_OUTPUT_BYTES) -> str:
    """The end of what was written to ``out``, at most ``limit`` bytes once encoded as UTF-8; if cut, a
    first line says so. The end, not the start: a traceback and the sentinel are last."""
    size = out.seek(0, os.SEEK_END)
    room = limit if size <= limit else limit - _MARKER_ROOM
    out.seek(size - min(size, room))
    # Invalid UTF-8 becomes U+FFFD (3 bytes for 1): re-encoded and cut again, a split character dropped whole.
    kept = out.read().decode("utf-8", errors="replace").encode("utf-8")[-room:].decode("utf-8", errors="ignore")
    return kept if size <= room else f"[the first {size - room:,} of {size:,} bytes are not kept]\n{kept}"
