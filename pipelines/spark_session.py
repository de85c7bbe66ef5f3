"""The Spark session every job uses, and reading a pinned Iceberg snapshot into Spark."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession

from pipelines.catalog import plan_snapshot, snapshot_schema
from pipelines.exceptions import MissingDependencyError

_LOG4J = Path(__file__).with_name("log4j2.properties")

# Text documents are large: Arrow batches of 1024 rows keep a task's memory in check.
DEFAULT_CONF = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "1024",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def get_spark(app_name: str) -> SparkSession:
    """A Spark session: the one spark-submit configured, else ``local[*]`` in this process.

    ``FACTORY_SPARK_MASTER`` and ``FACTORY_SPARK_DRIVER_MEMORY`` adjust the in-process session.
    """
    # Python workers must run the interpreter that has this package installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in DEFAULT_CONF.items():
        builder = builder.config(key, value)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a laptop session needs no network
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise MissingDependencyError(
                "Spark needs Java 17: install it with `apt-get install -y openjdk-17-jre-headless`"
            )
        log4j = f"-Dlog4j.configurationFile={_LOG4J.as_uri()}"
        builder = (
            builder.master(os.environ.get("FACTORY_SPARK_MASTER", "local[*]"))
            .config("spark.driver.memory", os.environ.get("FACTORY_SPARK_DRIVER_MEMORY", "4g"))
            .config("spark.driver.extraJavaOptions", log4j)
            .config("spark.ui.enabled", os.environ.get("FACTORY_SPARK_UI", "false"))
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


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
    return [task.file.file_path for task in plan_snapshot(table, snapshot_id, label)]


def read_snapshot(spark: SparkSession, table: Table, snapshot_id: int, label: str) -> DataFrame:
    """A pinned snapshot as a Spark DataFrame (Spark reads the Parquet files pyiceberg plans)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from pipelines.schemas import arrow_schema

    schema = from_arrow_schema(arrow_schema(snapshot_schema(table, snapshot_id)))
    paths = snapshot_files(table, snapshot_id, label)
    if not paths:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*paths)
