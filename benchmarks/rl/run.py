"""Rollouts per second in the repository sandbox against the same tests run bare, on the same cores, interleaved.

    PYTHONPATH=. .venv/bin/python benchmarks/rl/run.py [--table rl.tasks] [--tasks 24] [--workers 2] [--repeats 3]

The tasks are the first ``--tasks`` of an environment ``factory rl build`` made (``rl.tasks`` of
``$FACTORY_HOME``'s catalog), those whose runner is pytest, spread over its repositories; each
rollout's completion is the task's original body, so both sides run the same code and every test
passes. Ours: ``rl.rollouts.score`` (bubblewrap, a uid of its own, the harness forking a process
per test, the changed file bound over the original and compiled from source). Bare: ``python -m
pytest`` on the same test ids, with the same pytest configuration (an empty ini, the import root
as rootdir, the repository as confcutdir, no cache provider), no sandbox and no harness, the same
number at a time from a thread pool. Within a repeat the two sides alternate which goes first.
It prints each measurement, each ratio (ours ÷ bare, in rollouts per second) and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lakehouse.catalog import load_catalog
from rl.rollouts import score
from rl.tasks import Task, read_tasks


def pick(table: str, count: int) -> list[Task]:
    """``count`` pytest tasks, taken from each repository in turn (by task id within one)."""
    by_repository: dict[str, list[Task]] = {}
    for task in read_tasks(load_catalog(), table):
        if task.runner == "pytest":
            by_repository.setdefault(task.repository, []).append(task)
    chosen, queues = [], [tasks for _, tasks in sorted(by_repository.items())]
    while len(chosen) < count and any(queues):
        for tasks in queues:
            if tasks and len(chosen) < count:
                chosen.append(tasks.pop(0))
    if not chosen:
        raise SystemExit(f"no pytest task in {table}: build one first (factory rl build --repository joblib ...)")
    return chosen


def ours(tasks: list[Task], workers: int) -> float:
    results = score(tasks, [t.original_body for t in tasks], workers=workers)
    failed = [r.task_id for r in results if r.reward != 1.0]
    if failed:
        raise SystemExit(f"original bodies that did not score 1 in the sandbox: {failed}")
    return len(tasks)


def bare(tasks: list[Task], workers: int, ini: str) -> float:
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",  # the repositories stay as they are, as in the sandbox
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }

    def one(task: Task) -> None:
        with tempfile.TemporaryDirectory() as work:
            command = [
                task.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", ini,
                "--rootdir", task.import_root, "--confcutdir", task.repo_root,
                *[os.path.join(task.import_root, test) for test in task.tests],
            ]  # fmt: skip
            # A session of its own, as each sandbox has: with the kernel's autogroup scheduling a
            # session is the unit that shares the CPUs with the machine's other sessions.
            done = subprocess.run(
                command, cwd=work, env={**env, "HOME": work}, capture_output=True, check=False, start_new_session=True
            )
        if done.returncode != 0:
            raise SystemExit(f"bare pytest failed on {task.task_id}: {done.stdout.decode()[-1000:]}")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, tasks))
    return len(tasks)


def timed(run) -> float:
    start = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default="rl.tasks")
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tasks = pick(args.table, args.tasks)
    repositories = sorted({t.repository for t in tasks})
    tests = sum(len(t.tests) for t in tasks)
    print(f"{len(tasks)} tasks ({tests} tests) from {', '.join(repositories)}; {args.workers} at a time")
    with tempfile.TemporaryDirectory() as folder:
        ini = str(Path(folder) / "pytest.ini")
        Path(ini).write_text("[pytest]\n")
        sides = {"ours": lambda: ours(tasks, args.workers), "bare": lambda: bare(tasks, args.workers, ini)}
        runs = []
        for repeat in range(args.repeats):
            order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
            rates = {name: timed(sides[name]) for name in order}
            ratio = rates["ours"] / rates["bare"]
            runs.append(
                {"repeat": repeat + 1, "ours_rollouts_s": rates["ours"], "bare_runs_s": rates["bare"], "ratio": ratio}
            )
            print(
                f"repeat {repeat + 1}  ours {rates['ours']:.2f} rollouts/s  bare {rates['bare']:.2f} runs/s  "
                f"ratio {ratio:.2f}",
                flush=True,
            )
    print(json.dumps({"median_ratio": statistics.median(r["ratio"] for r in runs), "runs": runs}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
