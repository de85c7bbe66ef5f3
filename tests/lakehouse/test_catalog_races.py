"""First use of a fresh catalog, namespace and table by several processes at once: all of them land."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog as pyiceberg_load_catalog

from lakehouse.catalog import ensure_table, list_tables, load_catalog
from lakehouse.commit import Run, commit_files
from lakehouse.schemas import DOCUMENT_SCHEMA
from tests.lakehouse.test_commit import stage

WORKERS = 4
NAMESPACES = 4  # first uses one after another: more chances for the workers to meet at one


def _first_use(worker: int, barrier, errors) -> None:
    """One job's first moves: open the catalog, make namespaces and tables, commit to them."""
    try:
        barrier.wait(timeout=120)  # every worker opens the fresh catalog at the same moment
        catalog = load_catalog()
        for k in range(NAMESPACES):
            ensure_table(catalog, (f"ns{k}", "shared"), DOCUMENT_SCHEMA)
        for identifier in (("ns0", "shared"), ("ns0", f"own{worker}")):
            table = ensure_table(catalog, identifier, DOCUMENT_SCHEMA)
            run = Run(job="test", run_id=f"w{worker}", params={}, inputs=[])
            commit_files(catalog, identifier, [stage(table, run, [f"w{worker}"])], run, {}, max_attempts=30)
    except BaseException as exc:  # report it to the test rather than only to stderr
        errors.put(f"worker {worker}: {type(exc).__name__}: {exc}")
        raise


def _race(homes: list[Path], catalog_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, *, made: bool) -> None:
    """Start WORKERS first uses at once on each home's catalog (made already, empty, when ``made``)."""
    # The workers see the catalog's configuration in their environment from the start, as jobs
    # do (pyiceberg reads PYICEBERG_* variables once, when first imported).
    for key, value in catalog_env.items():
        monkeypatch.setenv(key, value)
    if made and catalog_env:  # this process read its PYICEBERG_* variables long ago: open it directly
        pyiceberg_load_catalog("made", **_properties(catalog_env))
    ctx = multiprocessing.get_context("spawn")
    errors = ctx.Queue()
    for home in homes:
        monkeypatch.setenv("FACTORY_HOME", str(home))
        if made and not catalog_env:  # the catalog exists; the namespaces and tables do not
            load_catalog()
        barrier = ctx.Barrier(WORKERS)
        workers = [ctx.Process(target=_first_use, args=(w, barrier, errors)) for w in range(WORKERS)]
        for p in workers:
            p.start()
        for p in workers:
            p.join(timeout=240)
        failures = []
        while not errors.empty():
            failures.append(errors.get())
        assert [p.exitcode for p in workers] == [0] * WORKERS, failures


def _properties(catalog_env: dict[str, str]) -> dict[str, str]:
    prefix = "PYICEBERG_CATALOG__FRESH__"
    return {k.removeprefix(prefix).lower(): v for k, v in catalog_env.items() if k.startswith(prefix)}


def _check_all_landed(catalog) -> None:
    owned = [("ns0", f"own{w}") for w in range(WORKERS)]
    assert list_tables(catalog) == sorted(owned + [(f"ns{k}", "shared") for k in range(NAMESPACES)])
    shared = catalog.load_table(("ns0", "shared")).scan().to_arrow().column("doc_id").to_pylist()
    assert sorted(shared) == [f"w{w}" for w in range(WORKERS)]


@pytest.mark.slow
@pytest.mark.parametrize("made", [False, True], ids=["fresh-catalog", "fresh-namespace"])
def test_concurrent_first_use_of_a_fresh_sqlite_catalog(tmp_path, monkeypatch, made):
    homes = [tmp_path / f"home{i}" for i in range(2)]  # two tries: the race is a matter of timing
    _race(homes, {}, monkeypatch, made=made)
    for home in homes:
        monkeypatch.setenv("FACTORY_HOME", str(home))
        _check_all_landed(load_catalog())


@pytest.mark.slow
@pytest.mark.parametrize("made", [False, True], ids=["fresh-catalog", "fresh-namespace"])
def test_concurrent_first_use_of_a_fresh_postgres_catalog(postgres, tmp_path, monkeypatch, made):
    import sqlalchemy

    database = f"fresh_race_{int(made)}"
    engine = sqlalchemy.create_engine(postgres.url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {database}"))
    engine.dispose()
    env = {
        "FACTORY_CATALOG": "fresh",
        "PYICEBERG_CATALOG__FRESH__TYPE": "sql",
        "PYICEBERG_CATALOG__FRESH__URI": postgres.url.rsplit("/", 1)[0] + f"/{database}",
        "PYICEBERG_CATALOG__FRESH__WAREHOUSE": (tmp_path / "wh").as_uri(),
    }
    _race([tmp_path / "home"], env, monkeypatch, made=made)
    _check_all_landed(pyiceberg_load_catalog("fresh", **_properties(env)))


def test_a_table_whose_columns_cannot_take_the_output_is_refused_naming_it(catalog):
    from lakehouse.errors import InputError
    from lakehouse.schemas import QUARANTINE_SCHEMA

    ensure_table(catalog, ("raw", "good"), DOCUMENT_SCHEMA)
    # A job told to write its quarantine rows, or its dedup output, into a documents table.
    with pytest.raises(InputError, match=r"table raw\.good exists with required column\(s\) text that .*another table"):
        ensure_table(catalog, ("raw", "good"), QUARANTINE_SCHEMA)
    assert [f.name for f in catalog.load_table(("raw", "good")).schema().fields] == [
        f.name for f in DOCUMENT_SCHEMA.fields
    ]
