"""Failures of the machine a command runs on, as ``error: …`` messages that say what to do.

``main._execute`` asks here about any exception that is not a FactoryError; what is not
recognised stays a traceback (a bug should show where it is).
"""

from __future__ import annotations

import argparse
import sys

from lakehouse.errors import FactoryError, JobMemoryError
from lakehouse.storage_errors import catalog_database_error, storage_error


def explain(exc: BaseException, args: argparse.Namespace) -> FactoryError | None:
    """The FactoryError that ``exc`` amounts to for this command, or None."""
    found = storage_error(exc) or catalog_database_error(exc)
    if found is not None:
        return found
    if "pyspark" in sys.modules:  # only a command that ran a Spark job can have met Spark's memory limit
        from pipelines.spark_failures import python_ran_out_of_memory, ran_out_of_memory

        if python_ran_out_of_memory(exc):
            return JobMemoryError(_python_memory_message(args))
        if ran_out_of_memory(exc):
            return JobMemoryError(_memory_message(args))
    return None


def _memory_message(args: argparse.Namespace) -> str:
    from pipelines.spark_session import driver_memory

    return (
        f"Spark ran out of memory and the job stopped before publishing anything. {_records_hint(args)}"
        f"FACTORY_SPARK_DRIVER_MEMORY (now {driver_memory()}; Spark's spark.driver.memory) when the job runs in "
        "this process, or spark.driver.memory and spark.executor.memory under spark-submit."
    )


def _python_memory_message(args: argparse.Namespace) -> str:
    return (
        "A Spark task's Python worker ran out of memory (MemoryError) and the job stopped before publishing "
        f"anything. {_records_hint(args)}raise spark.executor.pyspark.memory (the Python workers' limit) or, "
        "where none is set, run on a machine with more memory."
    )


def _records_hint(args: argparse.Namespace) -> str:
    from pipelines.ingest_records import JSON_ESCAPE_GROWTH

    limit = getattr(args, "max_doc_bytes", None)
    if not limit:
        return "Give Spark more memory: "
    return (
        f"Each task holds whole records, and --max-doc-bytes {limit} ({limit / 2**20:.0f} MiB) lets one be that "
        f"large (a JSONL line {JSON_ESCAPE_GROWTH} times that): lower it (larger records are then quarantined "
        "as too-large), or give Spark more memory: "
    )
