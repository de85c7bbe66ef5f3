"""Scoring completions of tasks by their repositories' own tests, in the sandbox (docs/rl.md, "Rollouts").

    from rl.rollouts import score
    results = score(tasks, completions)                  # this machine's cores
    results = score(tasks, completions, backend="ray")   # a Ray cluster's (RAY_ADDRESS, or local)
    results[0].reward                                    # share of the task's tests passed, in [0, 1]

A completion is the function's body as it would stand in the file (indented as ``task.indent``);
it is put between the task's prompt and the rest of its file, and the task's tests run against
that file in a fresh sandbox (``rl/sandbox.py``), each test in its own process
(``rl/harness.py``). The reward is the share of the task's tests the harness saw pass. A
completion that does not compile, or is longer than ``MAX_COMPLETION_CHARS``, scores 0 without
running. Results come back in the order of the completions, whatever ran where.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import queue
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from evals.sandbox import Limits, claimed_uid
from lakehouse.errors import InputError
from rl.sandbox import ROLLOUT_LIMITS, Overlay, run_harness
from rl.tasks import Task

log = logging.getLogger("factory.rl")

BACKENDS = ("local", "ray")
MAX_COMPLETION_CHARS = 64 * 1024
TEST_TIMEOUT_S = 20.0
OUTCOMES = ("passed", "partial", "failed", "timeout", "syntax-error", "too-long", "error")
# What a Ray worker needs of this project to score (a cluster's nodes may hold another version).
_SHIPPED_PACKAGES = ("lakehouse", "evals", "rl")


@dataclass(frozen=True)
class RolloutResult:
    task_id: str
    reward: float  # passed / total, in [0, 1]
    passed: int  # tests that passed
    total: int  # the task's tests
    outcome: str  # passed (all) | partial | failed (none) | timeout | syntax-error | too-long | error
    output: str  # the last 4 KiB of what the tests printed (failures' reports included)
    duration_s: float  # the sandboxed run's wall time (0 when nothing ran)
    verdicts: dict[str, str] = field(default_factory=dict)  # test id -> passed|failed|timeout|crashed|missing


def score(
    tasks: Sequence[Task],
    completions: Sequence[str],
    *,
    workers: int | None = None,
    backend: str = "local",
    limits: Limits = ROLLOUT_LIMITS,
    test_timeout: float = TEST_TIMEOUT_S,
    address: str | None = None,
) -> list[RolloutResult]:
    """Score ``completions[i]`` against ``tasks[i]``, ``workers`` sandboxes at a time (default:
    this machine's cores; on Ray, the cluster's CPUs). Never raises for what a completion does."""
    if len(tasks) != len(completions):
        raise InputError(f"{len(tasks)} tasks but {len(completions)} completions: give one completion per task")
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not tasks:
        return []
    if backend == "ray":
        return _score_on_ray(list(tasks), list(completions), workers, limits, test_timeout, address)
    return score_here(list(tasks), list(completions), workers, limits, test_timeout)


def score_here(
    tasks: Sequence[Task],
    completions: Sequence[str],
    workers: int | None = None,
    limits: Limits = ROLLOUT_LIMITS,
    test_timeout: float = TEST_TIMEOUT_S,
) -> list[RolloutResult]:
    """``score`` on this machine: a thread per sandbox, each with a uid of its own."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    with contextlib.ExitStack() as claims:
        uids: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        for _ in range(workers):
            uids.put(claims.enter_context(claimed_uid()))

        def one(pair: tuple[Task, str]) -> RolloutResult:
            uid = uids.get()  # one sandbox per uid at a time
            try:
                return rollout(pair[0], pair[1], uid=uid, limits=limits, test_timeout=test_timeout)
            finally:
                uids.put(uid)

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout") as pool:
            return list(pool.map(one, zip(tasks, completions, strict=True)))


def rollout(
    task: Task,
    completion: str,
    *,
    uid: int | None,
    limits: Limits = ROLLOUT_LIMITS,
    test_timeout: float = TEST_TIMEOUT_S,
) -> RolloutResult:
    """One completion of one task, in one sandbox run as ``uid`` (claimed by the caller)."""
    total = len(task.tests)
    if len(completion) > MAX_COMPLETION_CHARS:
        return RolloutResult(task.task_id, 0.0, 0, total, "too-long", "", 0.0)
    text = task.with_body(completion)
    try:
        # Compiling runs nothing of the completion; it only saves a sandbox for what cannot import.
        compile(text, task.file, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return RolloutResult(task.task_id, 0.0, 0, total, "syntax-error", f"{type(exc).__name__}: {exc}"[-4096:], 0.0)
    run = run_harness(
        task.checkout,
        mode="score",
        tests=task.tests,
        overlay=Overlay(task.file, text),
        limits=limits,
        test_timeout=test_timeout,
        uid=uid,
    )
    verdicts = {test: run.verdicts.get(test, "missing") for test in task.tests}
    passed = sum(v == "passed" for v in verdicts.values())
    if run.status == "timeout":
        outcome = "timeout"
    elif run.status != "ok" and not run.verdicts:
        outcome = "error"
    else:
        outcome = "passed" if passed == total else "partial" if passed else "failed"
    reward = passed / total if total else 0.0
    return RolloutResult(task.task_id, reward, passed, total, outcome, run.output, run.seconds, verdicts)


def _score_on_ray(
    tasks: list[Task],
    completions: list[str],
    workers: int | None,
    limits: Limits,
    test_timeout: float,
    address: str | None,
) -> list[RolloutResult]:
    """One Ray task per chunk of rollouts, one CPU each, wherever the cluster has room; each scores
    its chunk with one sandbox at a time (the node's own rlimits and uids)."""
    import ray

    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        runtime_env = {"py_modules": [importlib.import_module(p) for p in _SHIPPED_PACKAGES]} if address else None
        ray.init(address=address, runtime_env=runtime_env, include_dashboard=False, logging_level=logging.WARNING)
    slots = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    # A few chunks per slot: a slow chunk does not hold the others back.
    size = max(1, math.ceil(len(tasks) / (slots * 4)))
    remote = ray.remote(num_cpus=1)(_score_chunk)
    refs = [
        remote.remote(tasks[i : i + size], completions[i : i + size], limits, test_timeout)
        for i in range(0, len(tasks), size)
    ]
    started = time.monotonic()
    results = [result for chunk in ray.get(refs) for result in chunk]
    log.info("scored %d rollouts on Ray in %.1fs", len(results), time.monotonic() - started)
    return results


def _score_chunk(tasks: list[Task], completions: list[str], limits: Limits, test_timeout: float) -> list[RolloutResult]:
    return score_here(tasks, completions, 1, limits, test_timeout)
