"""Fixtures that start real engines: Spark local[2], SQLite and PostgreSQL Iceberg catalogs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# A pytest-xdist worker's __main__ is execnet's bare module, with neither __spec__ nor __file__:
# pyspark.sql.connect (imported through great_expectations) takes that for a doctest run and exits
# the worker. Given the spec `python -m pytest` gives it, multiprocessing's spawn also does what it
# does there (a child does not run a `*.__main__` module again).
if os.environ.get("PYTEST_XDIST_WORKER") and getattr(sys.modules["__main__"], "__spec__", None) is None:
    sys.modules["__main__"].__spec__ = importlib.util.find_spec("pytest.__main__")

from lakehouse.catalog import embedded_catalog_properties
from tests.postgres import PostgresServer, find_postgres_bin

REPO = Path(__file__).resolve().parent.parent

# Every Spark the tests start, in process or in a subprocess, is local[2] without a UI.
os.environ.setdefault("FACTORY_SPARK_MASTER", "local[2]")
os.environ.setdefault("FACTORY_SPARK_DRIVER_MEMORY", "2g")
# No run is tracked in MLflow unless its test says so (tests/trainer/test_tracking.py, the sweeps):
# importing MLflow and making a fresh store cost each short training run seconds.
os.environ.setdefault("FACTORY_MLFLOW", "off")

# A test that uses one of these, directly or through another fixture, starts an engine (a JVM,
# a Ray cluster, a database server): it is marked `engine` and left out of `make test-fast`.
ENGINE_FIXTURES = {"spark", "ray_cluster", "postgres"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.engine)
    # The files with `slow` tests first (a stable sort: each file stays whole and in order):
    # `make test`'s workers are handed whole files in this order, so the last to start are short
    # and both workers end together.
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(autouse=True)
def _ray_as_found():
    """Ray started in this process by a test (the loader and the rollouts start one and keep it,
    as a library should) is shut down after it: the next test's `ray.init` would fail, or its
    sweep would join this Ray, whose workers lack the environment that test set."""
    was_up = _ray_up()
    yield
    if not was_up and _ray_up():
        sys.modules["ray"].shutdown()


def _ray_up() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.fixture(scope="session")
def spark():
    from pipelines.spark_session import get_spark

    session = get_spark("factory-tests")
    yield session
    session.stop()


@pytest.fixture
def factory_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh embedded lakehouse for this test (also seen by subprocesses through the env)."""
    home = tmp_path / "factory-home"
    monkeypatch.setenv("FACTORY_HOME", str(home))
    monkeypatch.delenv("FACTORY_CATALOG", raising=False)
    return home


@pytest.fixture
def catalog(factory_home: Path):
    from lakehouse.catalog import load_catalog

    return load_catalog()


@pytest.fixture
def sqlite_properties(factory_home: Path) -> dict[str, str]:
    (factory_home / "warehouse").mkdir(parents=True, exist_ok=True)
    return embedded_catalog_properties(factory_home)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server from the Debian packages, started for this test session."""
    bindir = find_postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql; .ci/run does it)")
    try:
        server = PostgresServer(bindir)
        server.start()
    except (OSError, KeyError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"PostgreSQL could not be started here: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def moto():
    """moto's S3-API server (``tests/s3.py``) for the tests of a module; skipped where it cannot start."""
    from tests.s3 import MotoServer

    server = MotoServer()
    try:
        server.start()
    except OSError as exc:
        pytest.skip(f"moto's server could not be started here: {exc}")
    yield server
    server.stop()


def run_factory(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run the ``factory`` command line in a fresh process, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "factory_cli.main", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def factory_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess:
    """The ``factory`` command line run in this process, its output read from ``capsys``: for the
    many refusals that end before any work, where each fresh interpreter's imports (torch) cost
    seconds. An error no refusal explains raises here, as it would print a traceback there. Not for
    the Spark commands, whose session would start in the test process."""
    from factory_cli.main import SPARK_COMMANDS, main

    assert args[0] not in SPARK_COMMANDS, f"run `factory {args[0]}` with run_factory"
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as usage:  # argparse's refusal
        code = usage.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["factory", *args], code, out, err)


def start_factory(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The ``factory`` command line started in a fresh process and left running (text pipes)."""
    return subprocess.Popen(
        [sys.executable, "-m", "factory_cli.main", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
