"""Recognising a Spark job that died of memory, so the command can say which limit to change.

On a cluster, an executor that runs out of memory fails its task with ``OutOfMemoryError`` (or
is killed for exceeding its container's limit), and the driver's error says so. A task's Python
worker past its own limit (``spark.executor.pyspark.memory``) raises ``MemoryError``, which comes
back as the last line of the worker's traceback in the driver's error. In a session
started in this process the executors live in the driver's JVM, and Spark's handler exits that
JVM with status 52 (SparkExitCode.OOM): the driver then sees only a stopped SparkContext (an
error such as a NullPointerException from a dead scheduler), so the JVM's exit status is asked.
"""

from __future__ import annotations

import re
import subprocess

from lakehouse.storage_errors import chain_texts

_TEXT = re.compile(r"OutOfMemoryError|exceeding memory limits|exit(?:ed with)? code:? 52\b|exitCode 52\b")
# The last line of a Python traceback: "MemoryError" alone or with its message.
_PYTHON_TEXT = re.compile(r"^MemoryError\b", re.MULTILINE)
SPARK_OOM_EXIT = 52
# How long a dying JVM may take to exit (it runs Spark's shutdown hooks first).
_EXIT_WAIT_S = 15


def ran_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a Spark job, means Spark ran out of memory."""
    if any(_TEXT.search(text) for text in chain_texts(exc)):
        return True
    return _context_stopped() and _jvm_exit_status() == SPARK_OOM_EXIT


def python_ran_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a Spark job, means a task's Python worker ran out of memory."""
    return isinstance(exc, MemoryError) or any(_PYTHON_TEXT.search(text) for text in chain_texts(exc))


def _context_stopped() -> bool:
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return False
    try:
        return bool(context._jsc.sc().isStopped())
    except Exception:  # the JVM is gone
        return True


def _jvm_exit_status() -> int | None:
    """The exit status of this process's own Spark JVM once it has exited (None under spark-submit)."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    if process is None:
        return None
    try:
        return process.wait(timeout=_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        return None
