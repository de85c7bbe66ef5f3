"""What a careless user or a failing machine causes ends in ``error: …`` and exit status 2, with
nothing committed and nothing half-made: fresh ``factory`` processes, real Spark, real file systems."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_factory

# Every test here runs `factory ingest`, which starts Spark in its process (in the background at least).
pytestmark = pytest.mark.engine


def ingest_args(path: Path, output: str = "raw.web", *extra: str, fmt: str = "jsonl") -> list[str]:
    return ["ingest", "--source", "web", "--format", fmt, str(path), "--output", output, *extra]


def clear_error(proc: subprocess.CompletedProcess) -> str:
    """The one-line error a failed command ended with (among whatever Spark and its JVM logged)."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert not re.search(r"^Traceback", proc.stderr, re.M), proc.stderr[-3000:]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    return error


def made_in(home: Path) -> list[tuple[str, ...]]:
    """Every namespace and table in the embedded catalog at ``home`` (none if it was never created)."""
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties

    if not (home / "catalog.db").exists():
        return []
    catalog = load_catalog("check", **embedded_catalog_properties(home))
    namespaces = catalog.list_namespaces()
    return [*namespaces, *(t for ns in namespaces for t in catalog.list_tables(ns))]


def snapshots_in(home: Path) -> dict[str, int]:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties

    catalog = load_catalog("check", **embedded_catalog_properties(home))
    tables = [t for ns in catalog.list_namespaces() for t in catalog.list_tables(ns)]
    return {".".join(t): len(catalog.load_table(t).snapshots()) for t in tables}


@contextlib.contextmanager
def mounted_tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A small tmpfs at ``path`` (the tests run as root here); skipped where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_table_name_too_long_is_refused_before_anything_is_created(factory_home, tmp_path):
    corpus = tmp_path / "a.jsonl"
    corpus.write_text('{"text": "one"}\n')
    proc = run_factory(*ingest_args(corpus, "raw." + "t" * 300))
    assert "at most 128" in clear_error(proc)
    assert made_in(factory_home) == []


@pytest.mark.slow
def test_inputs_without_the_named_fields_are_refused_before_anything_is_created(factory_home, tmp_path):
    pq.write_table(pa.table({"body": ["a"], "url": ["u"]}), tmp_path / "crawl.parquet")
    wrong_schema = clear_error(run_factory(*ingest_args(tmp_path / "crawl.parquet", fmt="parquet")))
    assert "crawl.parquet" in wrong_schema and "'text' (--text-field)" in wrong_schema and "body, url" in wrong_schema

    (tmp_path / "dump.jsonl").write_text(json.dumps({"content": "a document"}) + "\n")
    typo = clear_error(run_factory(*ingest_args(tmp_path / "dump.jsonl", "raw.web", "--text-field", "contnet")))
    assert "dump.jsonl" in typo and "'contnet' (--text-field)" in typo and "content" in typo
    assert made_in(factory_home) == []


@pytest.mark.slow
def test_a_read_only_home_is_a_clear_error(tmp_path):
    corpus = tmp_path / "a.jsonl"
    corpus.write_text('{"text": "one"}\n')
    with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        proc = run_factory(*ingest_args(corpus), env={"FACTORY_HOME": str(ro / "home")})
        assert "read-only file system" in clear_error(proc)
    with mounted_tmpfs(tmp_path / "was-rw", "size=1m") as home:
        assert run_factory("tables", env={"FACTORY_HOME": str(home)}).returncode == 0  # makes the catalog
        subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True)
        proc = run_factory(*ingest_args(corpus), env={"FACTORY_HOME": str(home)})
        assert "read-only" in clear_error(proc)
        assert made_in(home) == []


@pytest.mark.slow
def test_a_full_disk_ends_in_a_clear_error_and_commits_nothing(tmp_path):
    import random
    import string

    rng = random.Random(0)  # text that does not compress: 3 MB of it cannot be staged on a 1 MB disk
    corpus = tmp_path / "big.jsonl"
    corpus.write_text(
        "".join(json.dumps({"text": "".join(rng.choices(string.ascii_letters, k=10_000))}) + "\n" for _ in range(300))
    )
    with mounted_tmpfs(tmp_path / "small", "size=1m") as home:
        proc = run_factory(*ingest_args(corpus), env={"FACTORY_HOME": str(home)})
        message = clear_error(proc)
        assert "no space left" in message.lower() and "free" in message
        assert set(snapshots_in(home).values()) <= {0}  # nothing committed


@pytest.mark.slow
def test_spark_out_of_memory_on_a_huge_record_names_the_limit_and_the_memory_setting(factory_home, tmp_path):
    corpus = tmp_path / "huge.jsonl"
    with corpus.open("w") as out:
        out.write('{"text": "' + "word " * (20 << 20) + '"}\n')  # one 100 MiB record
    proc = run_factory(
        *ingest_args(corpus, "raw.web", "--max-doc-bytes", str(1 << 30)),
        env={"FACTORY_SPARK_DRIVER_MEMORY": "512m"},
    )
    message = clear_error(proc)
    assert "out of memory" in message and "--max-doc-bytes 1073741824" in message
    assert "FACTORY_SPARK_DRIVER_MEMORY" in message and "512m" in message and "spark.executor.memory" in message
    assert set(snapshots_in(factory_home).values()) <= {0}
