"""How sessions start: the JVM class archive, the early start and the Python workers' head start."""

from __future__ import annotations

import sys
import threading

import pyarrow as pa
import pytest

from lakehouse.errors import InputError
from pipelines import jvm_options, spark_session


def test_the_class_archive_is_used_when_it_exists(tmp_path, monkeypatch):
    archive = tmp_path / "spark-classes.jsa"
    monkeypatch.setenv("FACTORY_SPARK_CLASSES", str(archive))
    assert jvm_options.java_options() == ""  # not built: the JVM starts as usual
    archive.write_bytes(b"archive")
    assert f"-XX:SharedArchiveFile={archive}" in jvm_options.java_options()
    monkeypatch.setenv("FACTORY_SPARK_CLASSES", "off")
    assert jvm_options.java_options() == ""
    assert jvm_options.archive_path() is None


def test_building_the_archive_makes_the_jvm_dump_its_classes(tmp_path, monkeypatch):
    dump = tmp_path / "out.jsa.partial"
    monkeypatch.setenv("FACTORY_SPARK_DUMP_CLASSES", str(dump))
    options = jvm_options.java_options()
    assert f"-XX:ArchiveClassesAtExit={dump}" in options
    assert "SharedArchiveFile" not in options  # a JVM dumping an archive must not map one


def test_the_test_session_maps_the_archive_make_built(spark):
    """`make test` builds the archive first: the session's JVM was started with it."""
    options = jvm_options.java_options()
    if not options:
        pytest.skip(f"no class archive at {jvm_options.archive_path()} (run `make install`)")
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert f"-XX:SharedArchiveFile={jvm_options.archive_path()}" in arguments


def test_in_process_sessions_compile_with_c1_only_unless_told(monkeypatch):
    monkeypatch.delenv("FACTORY_SPARK_JIT", raising=False)
    assert jvm_options.jit_options() == "-XX:TieredStopAtLevel=1"
    monkeypatch.setenv("FACTORY_SPARK_JIT", "full")
    assert jvm_options.jit_options() == ""  # the JVM's default tiered compilation
    monkeypatch.setenv("FACTORY_SPARK_JIT", "fastest")
    with pytest.raises(InputError, match="FACTORY_SPARK_JIT must be one of quick, full"):
        jvm_options.jit_options()


def test_the_test_session_jvm_stops_at_c1(spark):
    if not jvm_options.jit_options():
        pytest.skip("FACTORY_SPARK_JIT=full: the JVM compiles as it does by default")
    jvm = spark.sparkContext._jvm
    assert "-XX:TieredStopAtLevel=1" in list(
        jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert "emulated-client" in jvm.System.getProperty("java.vm.info")  # what HotSpot calls running C1 only


def test_early_start_hands_get_spark_the_same_session_with_warm_workers(spark, monkeypatch):
    monkeypatch.setattr(spark_session, "_early_start", None)
    spark_session.start_spark_early("factory-tests", "pipelines.dedup_stages")
    assert spark_session.get_spark("factory-tests").sparkContext is spark.sparkContext
    assert not spark_session._early_start.is_alive()  # get_spark waited for it
    for thread in threading.enumerate():  # …but not for the workers' head start: the test does
        if thread.name == "start-python-workers":
            thread.join(timeout=120)

    def modules(batches):
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"warm": ["pipelines.dedup_stages" in sys.modules] * batch.num_rows})

    # Python workers are reused: at least one of them already imported the job's module.
    warm = spark.range(0, 4, 1, 2).mapInArrow(modules, "warm boolean").collect()
    assert any(row.warm for row in warm)


def test_warming_workers_with_a_module_that_fails_leaves_the_session_working(spark):
    thread = spark_session.start_python_workers(spark, "pipelines.no_such_module")
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert spark.range(0, 10, 1, 2).count() == 10
