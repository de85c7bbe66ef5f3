"""The Spark session every job uses, and reading a pinned Iceberg snapshot into Spark."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession

from lakehouse.errors import MissingDependencyError
from pipelines.jvm_options import java_options, jit_options
from pipelines.ship_code import ship_code
from pipelines.spark_master import check_master

if TYPE_CHECKING:  # pyiceberg is imported where used: importing this module must be quick, as
    from pyiceberg.table import Table  # a command starts the JVM (start_spark_early) right after

log = logging.getLogger("factory.spark")

_LOG4J = Path(__file__).with_name("log4j2.properties")

# Text documents are large: Arrow batches of 1024 rows keep a task's memory in check.
DEFAULT_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "1024",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


# The in-process session's driver memory, unless FACTORY_SPARK_DRIVER_MEMORY says otherwise.
DEFAULT_DRIVER_MEMORY = "4g"

_early_start: threading.Thread | None = None


def start_spark_early(app_name: str, worker_module: str | None = None) -> None:
    """Start the Spark session on a background thread, then its Python workers (``start_python_workers``).

    The JVM takes seconds to start and so does importing a job's Python modules: a command
    that will need Spark calls this first, and the two overlap. ``get_spark`` waits for it. A
    failure here is only logged: ``get_spark`` meets it again and reports it.
    """
    global _early_start

    def start() -> None:
        try:
            spark = _create_session(app_name)
            if worker_module:
                start_python_workers(spark, worker_module)
        except Exception as exc:
            log.debug("starting Spark early failed: %s", exc)

    _early_start = threading.Thread(target=start, name="start-spark", daemon=True)
    _early_start.start()


def get_spark(app_name: str) -> SparkSession:
    """A Spark session: the one spark-submit configured, else ``local[*]`` in this process.

    ``FACTORY_SPARK_MASTER`` and ``FACTORY_SPARK_DRIVER_MEMORY`` adjust the in-process session.
    On a cluster master the executors get the driver's own code (pipelines/ship_code.py).
    """
    if _early_start is not None:
        _early_start.join()
    return _create_session(app_name)


def _create_session(app_name: str) -> SparkSession:
    # Python workers must run the interpreter that has this package installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in DEFAULT_CONF.items():
        builder = builder.config(key, value)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        master = os.environ.get("FACTORY_SPARK_MASTER", "local[*]")
        check_master(master)
        if master.startswith("local"):  # a laptop session needs no network; a cluster's executors
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # must reach the driver's address
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise MissingDependencyError(
                "Spark needs Java 17: install it with `apt-get install -y openjdk-17-jre-headless`"
            )
        options = " ".join(
            filter(None, [f"-Dlog4j.configurationFile={_LOG4J.as_uri()}", jit_options(), java_options()])
        )
        builder = (
            builder.master(master)
            .config("spark.driver.memory", driver_memory())
            .config("spark.driver.extraJavaOptions", options)
            .config("spark.ui.enabled", os.environ.get("FACTORY_SPARK_UI", "false"))
            .config("spark.ui.showConsoleProgress", console_progress())
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if not spark.conf.get("spark.factory.codeShipped", None):  # once per session (getOrCreate returns it again)
        ship_code(spark)
        spark.conf.set("spark.factory.codeShipped", "true")
    _quiet_accumulator_server(spark)
    return spark


def _quiet_accumulator_server(spark: SparkSession) -> None:
    """pyspark's accumulator server prints a traceback when the JVM dies under it (out of memory,
    say); the job's own error says what happened, so the server's goes to the debug log."""
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = lambda _request, address: log.debug(
            "accumulator server: a connection from %s failed", address, exc_info=True
        )


def console_progress() -> str:
    """Spark's stage progress bar on a terminal only: redrawn with carriage returns, it would fill
    a log file or CI output with hundreds of half-lines."""
    try:
        return "true" if os.isatty(sys.stderr.fileno()) else "false"
    except (AttributeError, OSError, ValueError):  # stderr replaced by an object without a descriptor
        return "false"


def driver_memory() -> str:
    """The driver memory an in-process session gets (``$FACTORY_SPARK_DRIVER_MEMORY``)."""
    return os.environ.get("FACTORY_SPARK_DRIVER_MEMORY", DEFAULT_DRIVER_MEMORY)


def start_python_workers(spark: SparkSession, module: str) -> threading.Thread:
    """Start the session's Python workers in the background, each importing ``module``.

    A session's first Python task costs seconds (Spark forks its Python daemon and workers, they
    import numpy, pyarrow and the job's code, the JVM loads its Arrow classes). Run by a tiny job
    on another thread, that happens while the driver resolves its inputs and plans, and the
    job's first real stage finds the workers ready (Spark reuses them).
    """

    def import_module(batches):
        importlib.import_module(module)
        yield from batches

    def run() -> None:
        try:
            parallelism = spark.sparkContext.defaultParallelism
            spark.range(0, parallelism, 1, parallelism).mapInArrow(import_module, "id long").collect()
        except Exception as exc:  # only a head start: the job itself will meet any real problem
            log.debug("warming the Python workers failed: %s", exc)

    thread = threading.Thread(target=run, name="start-python-workers", daemon=True)
    thread.start()
    return thread


# Adaptive execution re-plans after every shuffle and submits each stage as its own job: for a
# job of many small shuffles whose sizes it sets itself, that costs more than it saves.
NO_ADAPTIVE = {"spark.sql.adaptive.enabled": "false"}


@contextlib.contextmanager
def session_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set Spark SQL settings for the duration of a block, then restore them."""
    previous = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def snapshot_files(table: Table, snapshot_id: int, label: str) -> list[str]:
    """The data files of a snapshot, refusing one with delete files (their rows would come back)."""
    from lakehouse.catalog import plan_snapshot

    return [task.file.file_path for task in plan_snapshot(table, snapshot_id, label)]


def read_snapshot(spark: SparkSession, table: Table, snapshot_id: int, label: str) -> DataFrame:
    """A pinned snapshot as a Spark DataFrame (Spark reads the Parquet files pyiceberg plans).

    Spark's own reader reaches only filesystems it has a Hadoop connector for: local disk and
    HDFS here (no ``hadoop-aws`` jar ships with pyspark, and none is fetched at run time). Files
    elsewhere (``s3://``, ``gs://``…) are read by Spark tasks with pyarrow, through the table's
    FileIO properties (``read_units``), as the filter job reads its input."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from lakehouse.catalog import snapshot_schema
    from lakehouse.schemas import arrow_schema

    schema = arrow_schema(snapshot_schema(table, snapshot_id))
    spark_schema = from_arrow_schema(schema)
    paths = snapshot_files(table, snapshot_id, label)
    if not paths:
        return spark.createDataFrame([], spark_schema)
    if all(_hadoop_reads(path) for path in paths):
        return spark.read.schema(spark_schema).parquet(*paths)
    return _read_with_pyarrow(spark, paths, schema, spark_schema, table.io.properties)


def _hadoop_reads(path: str) -> bool:
    scheme, sep, _ = path.partition("://")
    return not sep or scheme in HADOOP_SCHEMES


# The schemes Spark's reader reaches with the jars pyspark ships.
HADOOP_SCHEMES = ("file", "hdfs", "viewfs")


def _read_with_pyarrow(spark: SparkSession, paths: list[str], schema, spark_schema, io_properties) -> DataFrame:
    """The files' rows, one Spark partition per unit of work (``read_units``), in unit order."""
    from lakehouse.parquet import store_properties
    from pipelines.read_units import plan_units

    io_properties = store_properties(io_properties)
    units = plan_units(paths, io_properties)

    def read(ids: Iterator) -> Iterator:
        from pipelines.read_units import read_unit

        for batch in ids:
            for i in batch.column(0).to_pylist():
                yield from read_unit(units[i], schema, io_properties)

    return spark.range(0, len(units), 1, len(units)).mapInArrow(read, spark_schema)
