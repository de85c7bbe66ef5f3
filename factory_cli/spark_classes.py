"""A JVM class-data-sharing archive of the classes Spark loads: sessions start seconds sooner.

A fresh JVM spends most of a Spark job's first seconds loading, parsing and verifying the
classes of Spark, Scala, Catalyst and Arrow (some 20,000 of them, measured on a 2-core machine:
about 12 s from start to the end of the first Python stage, 7 s with the archive). The JVM's
own remedy is an application class-data-sharing archive: the classes a run loaded, dumped
once (``-XX:ArchiveClassesAtExit``, Java 13+) and mapped into memory by every later JVM
(``-XX:SharedArchiveFile``).

``make`` builds the archive (``python -m factory_cli.spark_classes``) by running the
jobs themselves (ingest, dedup, filter) on a few generated documents in a scratch lakehouse.
``get_spark`` uses it when it exists. The JVM checks that an archive matches its own build and
class path and silently ignores one that does not (after pyspark or Java is upgraded, say):
a stale archive costs the speed, never the result. ``FACTORY_SPARK_CLASSES`` names another
archive, or turns it off (``off``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.jvm_options import DEFAULT_ARCHIVE


def build(path: Path) -> float:
    """Run the workload in a fresh JVM that dumps its classes to ``path``; the seconds it took."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="factory-classes-") as home:
        env = {
            **os.environ,
            "FACTORY_HOME": home,
            "FACTORY_SPARK_CLASSES": "off",
            "FACTORY_SPARK_DUMP_CLASSES": str(partial),
        }
        command = [sys.executable, "-m", "factory_cli.spark_classes", "--workload"]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"building the Spark class archive failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    partial.replace(path)  # whole or not at all: a JVM must never map a half-written archive
    return time.monotonic() - start


def _workload() -> None:
    """Ingest, dedup and filter a few generated documents; then let the JVM exit and dump."""
    from lakehouse.catalog import load_catalog
    from pipelines.dedup import DedupOptions, dedup
    from pipelines.filter import FilterOptions, filter_documents
    from pipelines.ingest import IngestOptions, ingest
    from pipelines.ingest_records import RecordConfig
    from pipelines.spark_session import get_spark

    home = Path(os.environ["FACTORY_HOME"])
    records = home / "records.jsonl"
    body = "\n".join(f"def f{i}(x):\n    return x * {i} + sum(range({i}))" for i in range(40))
    with records.open("w") as out:
        for i in range(24):
            text = body if i % 3 else body + f"\n# copy {i}"  # exact and near duplicates
            out.write(json.dumps({"id": f"doc-{i}", "text": text}) + "\n")
    spark = get_spark("factory-classes")
    catalog = load_catalog()
    ingest(
        spark, catalog, IngestOptions([str(records)], "jsonl", "raw.code", RecordConfig(source="code", id_field="id"))
    )
    dedup(spark, catalog, DedupOptions(inputs=["raw.code"], output="dedup.code"))
    filter_documents(spark, catalog, FilterOptions(input="dedup.code", output="filtered.code", config="code"))
    gateway = spark.sparkContext._gateway
    spark.stop()
    # The JVM writes the archive as it exits, when its stdin (our pipe) closes: wait for that.
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=300)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m factory_cli.spark_classes", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "path", nargs="?", type=Path, default=DEFAULT_ARCHIVE, help=f"where (default {DEFAULT_ARCHIVE})"
    )
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.workload:
        _workload()
        return 0
    seconds = build(args.path)
    print(f"Spark class archive: {args.path} ({args.path.stat().st_size >> 20} MB, built in {seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
