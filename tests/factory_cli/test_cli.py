"""The command line as a user runs it: fresh processes, real Spark, real catalogs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from factory_cli.main import COMMANDS, build_parser
from lakehouse.commit import find_run_snapshot, snapshot_stats
from lakehouse.lease import LEASE_FILE
from lakehouse.lease import TIMEOUT as LEASE_TIMEOUT
from tests.conftest import REPO, run_factory
from tests.spark_cluster import QUICK_JIT_SUBMIT


def write_corpus(folder: Path, n: int = 5) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"text": f"document number {i}"}) for i in range(n)] + ["{broken"]
    (folder / "part.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def ingest_args(corpus: Path, output: str = "raw.web", *extra: str) -> list[str]:
    return ["ingest", "--source", "web", "--format", "jsonl", str(corpus), "--output", output, *extra]


def test_help_lists_every_command_with_what_it_does():
    proc = run_factory("--help")
    assert proc.returncode == 0
    for name, (_module, summary) in COMMANDS.items():
        assert f"    {name}" in proc.stdout and summary[:40] in proc.stdout
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert run_factory("--version").stdout == f"factory {version}\n"
    ingest_help = run_factory("ingest", "--help")
    assert "--max-doc-bytes" in ingest_help.stdout and "--run-id" in ingest_help.stdout


def _command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and subcommand under ``parser``, each given as the words that name it."""
    for action in parser._actions:  # argparse offers no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name)
                yield from _command_paths(child, (*path, name))


def test_every_commands_help_runs_from_the_installed_script(tmp_path):
    """As a user runs it: the `factory` script of the environment, from another folder, the
    checkout not on the path. A help text argparse cannot format, or a command module the install
    lacks, fails here."""
    paths = [p for name in COMMANDS for p in _command_paths(build_parser(name)) if p[0] == name]
    assert ("mix", "search") in paths and ("rl", "build") in paths and ("tokenizer", "train") in paths
    script = str(Path(sys.executable).with_name("factory"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def help_of(path: tuple[str, ...]) -> subprocess.CompletedProcess:
        return subprocess.run([script, *path, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)

    with ThreadPoolExecutor(4) as pool:
        for path, proc in zip(paths, pool.map(help_of, paths), strict=True):
            assert proc.returncode == 0 and not proc.stderr, (path, proc.stderr[-2000:])
            assert proc.stdout.startswith(f"usage: factory {' '.join(path)} "), (path, proc.stdout[:300])


def test_errors_are_clear_and_exit_non_zero(factory_home):
    bad = run_factory("show", "raw/../etc")
    assert bad.returncode == 2
    assert "invalid table identifier" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_factory("snapshots", "raw.nope")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    no_input = run_factory(*ingest_args(factory_home / "absent"))
    assert no_input.returncode == 2 and "does not exist" in no_input.stderr


def test_a_python_workers_memory_error_names_its_limit_not_a_traceback():
    import pyspark  # noqa: F401  (explain asks about memory only once a Spark job may have run)

    from factory_cli.failures import explain
    from lakehouse.errors import JobMemoryError

    worker = Exception(  # as a PythonException from a reading task shows it
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        'Traceback (most recent call last):\n  File "pipelines/ingest_inputs.py", line 469, in _read_file\n'
        "MemoryError\n"
    )
    found = explain(worker, argparse.Namespace(max_doc_bytes=1 << 30))
    assert isinstance(found, JobMemoryError)
    assert "Python worker ran out of memory" in str(found) and "spark.executor.pyspark.memory" in str(found)
    assert "--max-doc-bytes 1073741824" in str(found)


@pytest.mark.parametrize("command", ["decisions", "run --list"])
def test_output_into_a_closed_pipe_ends_quietly(factory_home, tmp_path, command):
    """`factory … | head -1`: the reader has gone when the command writes. No traceback, exit 1."""
    from tests.orchestration.definitions import two_sources

    argv = ["decisions"] if command == "decisions" else ["run", str(two_sources(tmp_path)), "--list"]
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes a byte
    with os.fdopen(write, "wb") as closed:
        proc = subprocess.run(
            [sys.executable, "-m", "factory_cli.main", *argv], cwd=REPO, stdout=closed, stderr=subprocess.PIPE,
            text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 1 and "Error" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_look_around_after_an_ingest(factory_home, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    done = run_factory(*ingest_args(corpus, "raw.web", "--run-id", "first"))
    assert done.returncode == 0, done.stderr
    assert "5 documents" in done.stdout and "malformed-json=1" in done.stdout

    tables = run_factory("tables")
    assert "raw.web" in tables.stdout and "raw.quarantine" in tables.stdout

    snapshots = json.loads(run_factory("snapshots", "raw.web", "--json").stdout)
    (snap,) = snapshots
    assert snap["factory"]["run-id"] == "first" and snap["stats"]["kept"] == 5
    assert "job ingest  run first" in run_factory("snapshots", "raw.web").stdout

    shown = run_factory("show", "raw.web", "-n", "2", "--json")
    assert len(shown.stdout.splitlines()) == 2
    assert json.loads(shown.stdout.splitlines()[0])["source"] == "web"

    tagged = run_factory("tag", "raw.web", "v1")
    assert tagged.returncode == 0, tagged.stderr
    assert run_factory("show", "raw.web@v1", "-n", "1").returncode == 0
    assert "v1" in run_factory("tables").stdout
    again = run_factory("tag", f"raw.web@{snap['snapshot_id']}", "v1")
    assert again.returncode == 0  # same snapshot: nothing to move
    moved = run_factory("tag", "raw.quarantine", "v1")  # a tag of another table: no clash
    assert moved.returncode == 0, moved.stderr


@pytest.mark.slow
def test_a_job_killed_before_commit_leaves_the_table_unchanged_and_gc_cleans_up(factory_home, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    assert run_factory(*ingest_args(corpus, "raw.web", "--run-id", "before")).returncode == 0
    more = write_corpus(tmp_path / "more", n=8)
    killed = run_factory(*ingest_args(more, "raw.web", "--run-id", "doomed"), env={"FACTORY_FAIL_AT": "before-commit"})
    assert killed.returncode != 0

    snapshots = json.loads(run_factory("snapshots", "raw.web", "--json").stdout)
    assert [s["factory"]["run-id"] for s in snapshots] == ["before"]
    runs_dir = factory_home / "warehouse" / "raw" / "web" / "data" / "runs"
    orphans = list((runs_dir / "doomed").rglob("*.parquet"))
    assert orphans, "the killed run should have left staged files behind"

    # The killed run's leases stop being renewed; once older than the lease timeout, it is dead.
    for path in (factory_home / "warehouse").glob(f"*/*/data/runs/doomed/*/{LEASE_FILE}"):
        then = time.time() - LEASE_TIMEOUT.total_seconds() - 60
        os.utime(path, (then, then))
    gc = run_factory("gc", "--grace-hours", "0")
    assert gc.returncode == 0, gc.stderr
    assert not (runs_dir / "doomed").exists()
    assert list((runs_dir / "before").rglob("*.parquet"))  # committed files stay
    shown = run_factory("show", "raw.web", "-n", "100", "--json")
    assert len(shown.stdout.splitlines()) == 5

    # The same run id, run again to completion, now commits once.
    retried = run_factory(*ingest_args(more, "raw.web", "--run-id", "doomed"))
    assert retried.returncode == 0, retried.stderr
    assert len(run_factory("show", "raw.web", "-n", "100", "--json").stdout.splitlines()) == 5 + 8


@pytest.mark.slow
@pytest.mark.engine
def test_an_ingest_killed_between_its_two_commits_finishes_on_retry(factory_home, catalog, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    killed = run_factory(
        *ingest_args(corpus, "raw.web", "--run-id", "twice"), env={"FACTORY_FAIL_AT": "between-commits"}
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    documents = find_run_snapshot(catalog.load_table(("raw", "web")), "twice")
    assert documents is not None and find_run_snapshot(catalog.load_table(("raw", "quarantine")), "twice") is None

    retried = run_factory(*ingest_args(corpus, "raw.web", "--run-id", "twice"))

    assert retried.returncode == 0, retried.stderr
    assert "5 documents" in retried.stdout and "quarantined by reason: malformed-json=1" in retried.stdout
    assert [s.snapshot_id for s in catalog.load_table(("raw", "web")).snapshots()] == [documents.snapshot_id]
    quarantine = catalog.load_table(("raw", "quarantine"))
    assert [r["reason"] for r in quarantine.scan().to_arrow().to_pylist()] == ["malformed-json"]
    assert snapshot_stats(quarantine.current_snapshot()) == snapshot_stats(documents)

    # The same run id with another parameter: refused, naming what differs, nothing done.
    other = run_factory(*ingest_args(corpus, "raw.web", "--run-id", "twice", "--max-doc-bytes", "100"))
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "error: " in other.stderr and "params.max_doc_bytes: committed with 10485760, now 100" in other.stderr
    assert len(catalog.load_table(("raw", "web")).snapshots()) == 1


@pytest.mark.slow
def test_spark_submit_runs_the_job_file(factory_home, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    venv_bin = Path(sys.executable).parent
    spark_submit = venv_bin / "spark-submit"
    activated = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}  # as after `activate`
    proc = subprocess.run(
        [str(spark_submit), "--master", "local[2]", *QUICK_JIT_SUBMIT, "pipelines/ingest.py", "--source", "web", "--format", "jsonl",
         str(corpus), "--output", "raw.submitted"],
        cwd=REPO, env=activated, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "raw.submitted@" in proc.stdout and "5 documents" in proc.stdout


@pytest.mark.slow
def test_a_spark_job_run_as_a_program_ends_after_its_commit_without_teardown(factory_home, catalog):
    from tests.pipelines.dedup_corpus import planted_corpus, write_table

    write_table(catalog, "raw.docs", planted_corpus(originals=4).docs)
    # An exit hook stands for the interpreter's teardown: it must not run, and nothing the job
    # printed may be lost with it.
    program = (
        "import atexit, sys; atexit.register(print, 'teardown ran', file=sys.stderr); "
        "sys.argv = ['factory', 'dedup', '--input', 'raw.docs', '--output', 'dedup.docs', '--run-id', 'quick']; "
        "from factory_cli.main import main; sys.exit(main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, env=os.environ, capture_output=True, text=True, timeout=300
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "teardown ran" not in proc.stderr
    documents = catalog.load_table(("dedup", "docs"))
    stats = snapshot_stats(find_run_snapshot(documents, "quick"))
    assert f"kept {stats['kept']} of {stats['documents-in']} documents" in proc.stdout
    assert find_run_snapshot(catalog.load_table(("dedup", "docs_clusters")), "quick") is not None
    # Called as a function (tests, other commands), main returns.
    assert "teardown ran" in subprocess.run(
        [sys.executable, "-c", program.replace("sys.exit(main())", "main([*sys.argv[1:], '-q'])")],
        cwd=REPO, env=os.environ, capture_output=True, text=True, timeout=300,
    ).stderr  # fmt: skip


@pytest.mark.slow
def test_postgres_catalog_from_standard_pyiceberg_config(postgres, tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    env = {
        "PYICEBERG_CATALOG__PGTEST__TYPE": "sql",
        "PYICEBERG_CATALOG__PGTEST__URI": postgres.url,
        "PYICEBERG_CATALOG__PGTEST__WAREHOUSE": (tmp_path / "pg-warehouse").as_uri(),
        "FACTORY_HOME": str(tmp_path / "unused-home"),
    }
    done = run_factory(*ingest_args(corpus, "raw.pg", "--catalog", "pgtest"), env=env)
    assert done.returncode == 0, done.stderr
    # FACTORY_CATALOG selects it too; the embedded catalog is never created.
    listed = run_factory("tables", env={**env, "FACTORY_CATALOG": "pgtest"})
    assert "raw.pg" in listed.stdout
    rows = run_factory("show", "raw.pg", "-n", "10", "--json", env={**env, "FACTORY_CATALOG": "pgtest"})
    assert sorted(json.loads(r)["text"] for r in rows.stdout.splitlines()) == [f"document number {i}" for i in range(5)]
    assert not (tmp_path / "unused-home").exists()


def test_unknown_catalog_names_its_configuration():
    proc = run_factory("tables", "--catalog", "nowhere")
    assert proc.returncode == 2
    assert "PYICEBERG_CATALOG__NOWHERE__" in proc.stderr
    assert "no catalog named 'nowhere' is configured" in proc.stderr and "--uri" not in proc.stderr


def test_a_damaged_embedded_catalog_is_named_not_a_traceback(tmp_path):
    (tmp_path / "catalog.db").write_text("garbage\n")
    for command in (["tables"], ["ui", "--port", "0"]):
        proc = run_factory(*command, env={"FACTORY_HOME": str(tmp_path), "FACTORY_CATALOG": ""})
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.startswith(f"error: the embedded catalog {tmp_path / 'catalog.db'} cannot be read:")
        assert "Traceback" not in proc.stderr
