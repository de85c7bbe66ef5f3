"""Running a repository's tests in bubblewrap, with at most one of its files replaced.

Every run gets a fresh mount namespace: the host's file system read-only (the repository with
it), a private ``/tmp`` (a size-bounded tmpfs, the tests' working folder), the one changed file
bound read-only over the original from a copy in the run's own folder, and the harness
(``rl/harness.py``) beside it. Network, PID, IPC and UTS namespaces are new: no network but a
private loopback, and every process of the run dies with it. The program runs as a uid of its
own (``evals.sandbox.claimed_uid``) when the launcher is root, without capabilities, under the
rlimits of ``evals.sandbox.Limits`` (set by ``prlimit``) and a wall-clock timeout.

Root runs bubblewrap itself (not in a user namespace: the program's uid is then a real one, which
RLIMIT_NPROC counts and the host's permissions apply to) and drops to the claimed uid inside,
after the mounts. Folders only root may enter (``/root``, where pyenv keeps an interpreter) are
replaced by an empty tmpfs into which just the paths a run needs are bound (the interpreter's
prefix, the repository), so nothing else of them is visible. Without root, bubblewrap makes a
user namespace and the program runs as ``nobody`` inside it, as ``evals/sandbox.py`` does.

Only bubblewrap isolates one changed file from every other run's: without it rollouts are
refused (``MissingDependencyError``), whatever ``FACTORY_SANDBOX`` says.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evals.sandbox import SANDBOX_UID, Limits, prlimit
from lakehouse.errors import MissingDependencyError

HARNESS = Path(__file__).with_name("harness.py")
INSIDE = "/tmp/.rl"  # the harness and its files, inside the sandbox
WORKDIR = "/tmp/work"  # the tests' working folder, inside the sandbox
TMP_BYTES = 256 << 20  # the private /tmp's size
RESULT_BYTES = 256 << 20  # the most a run may report (a trace of many tests is large)
OUTPUT_TAIL = 4096  # bytes of the tests' output kept

# Rollouts import whole libraries (pandas, scipy) and fork a process per test: more room than an
# eval's single program.
ROLLOUT_LIMITS = Limits(cpu_s=300, memory_bytes=4 << 30, processes=64, file_bytes=64 << 20, wall_s=300.0)
STARTUP_S = 60.0  # a run's allowance for importing and collecting, besides its tests' time

_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": WORKDIR,
    "TMPDIR": WORKDIR,
    "PYTHONHASHSEED": "0",  # hash order (sets of strings) as in every other run
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # no third-party plugin the repository did not ask for
    "OPENBLAS_NUM_THREADS": "1",  # threads count against RLIMIT_NPROC; one core per run
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
}


@dataclass(frozen=True)
class Checkout:
    """How a repository's tests run: with which interpreter, from which import root, by which runner."""

    python: str  # the interpreter (its prefix is made visible to the sandbox)
    import_root: str  # the sys.path entry the repository's packages import from; pytest's rootdir
    repo_root: str  # the repository's folder: pytest's confcutdir, the tracer's filter
    runner: str  # pytest | unittest


@dataclass(frozen=True)
class Overlay:
    """One file of the repository replaced, for one run."""

    path: str  # absolute path of the repository's file
    text: str  # what the run sees there instead


@dataclass
class HarnessRun:
    records: list[dict]  # what the harness reported (nonce-checked, nonce removed)
    status: str  # ok | timeout | crashed (no final record) | too-much-output
    output: str  # the last OUTPUT_TAIL bytes of the tests' output
    seconds: float
    verdicts: dict[str, str] = field(default_factory=dict)  # test id -> passed|failed|timeout|crashed|missing


def run_harness(
    checkout: Checkout,
    *,
    mode: str,
    tests: Sequence[str] = (),
    modules: Sequence[str] = (),
    max_tests: int = 0,
    overlay: Overlay | None = None,
    limits: Limits = ROLLOUT_LIMITS,
    test_timeout: float = 20.0,
    uid: int | None = None,
) -> HarnessRun:
    """Run the harness over ``tests`` (score) or ``modules`` (trace) in a fresh sandbox.

    ``uid``: one claimed with ``evals.sandbox.claimed_uid`` (required when root). Never raises for
    what the tests or the code under test do."""
    require_bwrap()
    if os.geteuid() == 0 and uid is None:
        raise ValueError("a root launcher must pass a uid claimed with evals.sandbox.claimed_uid")
    nonce = secrets.token_hex(16)
    spec = {
        "mode": mode,
        "runner": checkout.runner,
        "import_root": checkout.import_root,
        "repo_root": checkout.repo_root,
        "tests": list(tests),
        "modules": list(modules),
        "max_tests": max_tests,
        "test_timeout": test_timeout,
        "nonce": nonce,
        "ini": f"{INSIDE}/pytest.ini",
    }
    count = len(tests) if mode == "score" else max(1, len(modules)) * max(1, max_tests)
    wall = min(limits.wall_s, STARTUP_S + count * (test_timeout + 1))
    folder = Path(tempfile.mkdtemp(prefix="factory-rl-"))
    started = time.monotonic()
    try:
        folder.chmod(0o755)
        _private_copy(HARNESS.read_text(encoding="utf-8"), folder / "harness.py")
        _private_copy("[pytest]\n", folder / "pytest.ini")  # pytest's config is ours, not a parent folder's
        (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        if overlay is not None:
            _overlay_copy(overlay, folder / "changed.py")
        command = _command(checkout, folder, overlay, limits, uid)
        with open(folder / "spec.json", "rb") as stdin, tempfile.TemporaryFile() as err:
            process = subprocess.Popen(
                command,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=err,
                env=_ENV,
                start_new_session=True,  # its own process group: the timeout kills all of it
                close_fds=True,
            )
            raw, status = _read_results(process, wall)
            output = _tail(err)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    records = _records(raw, nonce)
    if status == "ok" and not any(r.get("done") for r in records):
        status = "crashed"
    verdicts = {r["test"]: r["verdict"] for r in records if "test" in r and "verdict" in r}
    return HarnessRun(records, status, output, time.monotonic() - started, verdicts)


def require_bwrap() -> None:
    """Refuse, with MissingDependencyError, a machine where the repository sandbox cannot run."""
    if not _bwrap_works():
        raise MissingDependencyError(
            f"rollouts need bubblewrap with util-linux's prlimit on {_ENV['PATH']}, the sandbox's PATH (apt-get "
            "install bubblewrap util-linux): "
            "only a mount namespace isolates one changed file of a repository from every other run's"
        )


@functools.cache
def _bwrap_works() -> bool:
    # Found, and tried, as a rollout launches them: with the sandbox's PATH, not the caller's.
    tools = ("bwrap", "prlimit", *(("setpriv",) if os.geteuid() == 0 else ()))
    if any(shutil.which(tool, path=_ENV["PATH"]) is None for tool in tools):
        return False
    command = ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--die-with-parent", "--", "true"]
    try:
        return subprocess.run(command, env=_ENV, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _private_copy(text: str, path: Path) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o644)


def _overlay_copy(overlay: Overlay, path: Path) -> None:
    _private_copy(overlay.text, path)
    # A cached .pyc is trusted when the source's mtime and size match those it recorded: the copy
    # gets an mtime the original never had, so the changed source is compiled, never the cache.
    original = os.stat(overlay.path)
    os.utime(path, ns=(original.st_atime_ns, original.st_mtime_ns + 1_000_000_000))


def _command(checkout: Checkout, folder: Path, overlay: Overlay | None, limits: Limits, uid: int | None) -> list[str]:
    root = os.geteuid() == 0
    binds = [
        "--perms", "0755", "--dir", INSIDE,
        "--ro-bind", str(folder / "harness.py"), f"{INSIDE}/harness.py",
        "--ro-bind", str(folder / "pytest.ini"), f"{INSIDE}/pytest.ini",
        "--perms", "1777", "--dir", WORKDIR,
    ]  # fmt: skip
    if overlay is not None:
        binds += ["--ro-bind", str(folder / "changed.py"), overlay.path]
    limited = [
        *prlimit(limits),
        checkout.python,
        "-s",  # no user site
        "-P",  # no script folder on sys.path (-I would also drop PYTHONHASHSEED)
        "-B",  # the repository is read-only: no .pyc is written
        "--check-hash-based-pycs", "always",
        f"{INSIDE}/harness.py",
    ]  # fmt: skip
    if root:
        user = [
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
            "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
            "--",
        ]  # fmt: skip
    else:
        user = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--"]
    return [
        "bwrap",
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
        *_visible(_needed_paths(checkout), root),
        *binds,
        "--chdir", WORKDIR,
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        *user,
        *limited,
    ]  # fmt: skip


def _needed_paths(checkout: Checkout) -> list[str]:
    interpreter = Path(os.path.realpath(checkout.python)).parent.parent
    paths = {str(interpreter), str(Path(checkout.python).parent.parent), checkout.import_root, checkout.repo_root}
    paths = {os.path.realpath(p) for p in paths}
    # A path inside another is visible with it.
    return sorted(p for p in paths if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths))


def _visible(paths: Sequence[str], root: bool) -> list[str]:
    """Mounts that make ``paths`` visible in the sandbox: each lies under the private /tmp or, for a
    root launcher, under a folder only root may enter; that folder becomes an empty tmpfs holding
    the path, bound read-only from the host, and the folders between (readable by all)."""
    args: list[str] = []
    hidden_done, dirs_done = {"/tmp"}, set()
    for path in paths:
        parts = Path(path).parts
        ancestors = [str(Path(*parts[: i + 1])) for i in range(1, len(parts) - 1)]
        hidden = next((a for a in ancestors if a == "/tmp" or (root and not _others_may_enter(a))), None)
        if hidden is None:
            continue
        if hidden not in hidden_done:
            args += ["--perms", "0755", "--tmpfs", hidden]
            hidden_done.add(hidden)
        for folder in ancestors[ancestors.index(hidden) + 1 :]:
            if folder not in dirs_done:
                args += ["--perms", "0755", "--dir", folder]
                dirs_done.add(folder)
        args += ["--ro-bind", path, path]
    return args


def _others_may_enter(folder: str) -> bool:
    return bool(os.stat(folder).st_mode & stat.S_IXOTH)


def _read_results(process: subprocess.Popen, wall_s: float) -> tuple[bytes, str]:
    """All the harness wrote to stdout, bounded, and how the run ended; its process group is
    killed at the end (bubblewrap's PID namespace takes every process of the run with it)."""
    deadline = time.monotonic() + wall_s
    chunks, size, status = [], 0, "ok"
    stdout = process.stdout
    assert stdout is not None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            ready, _, _ = select.select([stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(stdout.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > RESULT_BYTES:
                status = "too-much-output"
                break
        if status == "ok":
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                status = "timeout"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        stdout.close()
    return b"".join(chunks), status


def _records(raw: bytes, nonce: str) -> list[dict]:
    """The harness's lines; a line without the run's nonce (a test printing JSON to the results
    descriptor, say) is not the harness's and is ignored."""
    records = []
    for line in raw.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.pop("nonce", None) == nonce:
            records.append(record)
    return records


def _tail(out) -> str:
    size = out.seek(0, os.SEEK_END)
    out.seek(max(0, size - OUTPUT_TAIL))
    return out.read().decode("utf-8", errors="replace")
