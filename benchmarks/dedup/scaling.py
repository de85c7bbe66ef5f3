"""Dedup time against corpus size: our job alone at several sizes, a log-log fit, and a plot.

    .venv/bin/python -m benchmarks.dedup.scaling --sizes 50 100 200 400

Each size is its own corpus (the same seeded sample of this machine's Python source as the
dedup benchmark, so a larger corpus holds the smaller ones), ingested once (not timed); then
``factory dedup`` runs as a fresh process on ``--cores`` cores, start-up included, as in the
benchmark. The fit is time = a · size^b by least squares on the logs; b is the exponent the
docs quote. Beside the wall time each run records the CPU seconds of the whole process tree
(the JVM, Spark's Python workers: every process of its session, sampled from /proc five times a
second), which other work on a shared machine disturbs far less than wall time, and the load
average, and the peak memory of the driver (its Python process), the JVM (with ``local[N]`` the
driver and the executors in one) and the executors' Python workers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.dedup.__main__ import REPO, _ingest_once

_TICK = os.sysconf("SC_CLK_TCK")


def fit_exponent(sizes: list[float], seconds: list[float]) -> tuple[float, float]:
    """(a, b) of seconds = a · size^b, least squares in log-log space."""
    b, log_a = np.polyfit(np.log(sizes), np.log(seconds), 1)
    return float(np.exp(log_a)), float(b)


def run_measured(command: list[str], env: dict[str, str]) -> tuple[float, float, dict[str, float]]:
    """(wall seconds, CPU seconds of every process in the command's session, peak memory in MB).

    The peaks: the driver's Python process and the JVM (with ``local[N]`` the driver and the
    executors share it) each by the kernel's high-water mark of its resident set; Spark's Python
    workers (the executors' Python side) by the largest sum of their resident sets in a sample."""
    print(f"running: {' '.join(command[2:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, env={**os.environ, **env}, stdout=sys.stderr, start_new_session=True)
    cpu: dict[tuple[int, int], int] = {}  # (pid, start time) → ticks, the last seen
    peak = {"driver_python_mb": 0.0, "jvm_mb": 0.0, "python_workers_mb": 0.0}
    while proc.poll() is None:
        workers = 0.0
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                    status = _status(entry) if int(fields[3]) == proc.pid else {}
                except (OSError, IndexError):
                    continue
                if int(fields[3]) == proc.pid:  # its session: the command and all it started
                    cpu[(int(entry), int(fields[19]))] = int(fields[11]) + int(fields[12])
                    if int(entry) == proc.pid:
                        peak["driver_python_mb"] = max(peak["driver_python_mb"], status.get("VmHWM", 0.0))
                    elif status.get("Name") == "java":
                        peak["jvm_mb"] = max(peak["jvm_mb"], status.get("VmHWM", 0.0))
                    else:
                        workers += status.get("VmRSS", 0.0)
        peak["python_workers_mb"] = max(peak["python_workers_mb"], workers)
        time.sleep(0.2)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, command)
    return time.monotonic() - start, sum(cpu.values()) / _TICK, {k: round(v, 1) for k, v in peak.items()}


def _status(pid: str) -> dict:
    """A process's name and its memory lines (kB) of /proc/PID/status, in MB."""
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "Name":
            status[key] = value.strip()
        elif key in ("VmHWM", "VmRSS"):
            status[key] = int(value.split()[0]) / 1024
    return status


def plot(runs: list[dict], wall: tuple[float, float], cpu: tuple[float, float], path: Path, cores: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mb = [r["mb"] for r in runs]
    grid = np.linspace(min(mb), max(mb), 100)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for key, (a, b), label, colour in (
        ("seconds", wall, "wall s", "C0"),
        ("cpu_seconds", cpu, "CPU s (all processes)", "C1"),
    ):
        values = [r[key] for r in runs]
        ax.plot(mb, values, "o", color=colour, label=f"{label}, measured")
        ax.plot(grid, a * grid**b, "-", color=colour, label=f"{label}, fit {a:.3g} · MB^{b:.2f}")
        ax.plot(
            grid, values[0] * grid / mb[0], ":", color=colour, alpha=0.6, label=f"{label}, linear from the smallest"
        )
    ax.set_xlabel("corpus (MB of Python source)")
    ax.set_ylabel("seconds (factory dedup, end to end)")
    loads = ", ".join(f"{r['load_before']:.1f}" for r in runs)
    ax.set_title(f"dedup on {cores} cores (load avg before each run: {loads})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dedup.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[50, 100, 200, 400], help="corpus sizes in MB")
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N] (default 2)")
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench" / "dedup", help="corpora and outputs")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "images" / "dedup-scaling.png")
    args = parser.parse_args()

    from benchmarks.dedup.corpus import build

    runs = []
    for mb in sorted(args.sizes):
        label = f"{mb:g}MB"
        corpus = build(args.workdir / f"corpus-{label}", mb)
        home = args.workdir / f"home-{label}"
        env = {"FACTORY_HOME": str(home), "FACTORY_SPARK_MASTER": f"local[{args.cores}]"}
        _ingest_once(corpus.folder, home, env)
        stamp = time.strftime("%Y%m%d%H%M%S")
        load_before = os.getloadavg()[0]
        seconds, cpu_seconds, peak_memory = run_measured(
            [sys.executable, "-m", "factory_cli.main", "dedup", "--input", "bench.code", "--output",
             f"bench.scaling_{stamp}", "--run-id", f"scaling-{stamp}", "-q"],
            env,
        )  # fmt: skip
        runs.append({"mb": corpus.megabytes, "documents": corpus.documents, "seconds": seconds,
                     "cpu_seconds": cpu_seconds, "peak_memory": peak_memory, "load_before": load_before,
                     "load_after": os.getloadavg()[0]})  # fmt: skip
        print(json.dumps(runs[-1]), flush=True)
    a, b = fit_exponent([r["mb"] for r in runs], [r["seconds"] for r in runs])
    cpu_a, cpu_b = fit_exponent([r["mb"] for r in runs], [r["cpu_seconds"] for r in runs])
    plot(runs, (a, b), (cpu_a, cpu_b), args.plot, args.cores)
    summary = {"cores": args.cores, "runs": runs, "fit": {"a": a, "exponent": b},
               "cpu_fit": {"a": cpu_a, "exponent": cpu_b}, "plot": str(args.plot)}  # fmt: skip
    (args.workdir / f"scaling-{time.strftime('%Y%m%d%H%M%S')}.json").write_text(json.dumps(summary, indent=2))
    print(f"wall: exponent {b:.3f} (seconds = {a:.3g} · MB^{b:.3f}); CPU: exponent {cpu_b:.3f}; plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
