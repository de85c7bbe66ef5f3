"""Catalog commit rates: how many commits a second one table and several tables take, on the
PostgreSQL SQL catalog (the shared catalog a cluster uses), through the commit protocol.

    .venv/bin/python -m benchmarks.catalog --commits 40 --writers 1 2 4

Each writer is its own process committing small files (one Parquet file of 3 rows per commit,
as a job's commit of its staged files) as fast as it can, to one shared table or each to its
own table. Reported: commits per second in all, mean latency, and retries (commits that lost a
race and tried again). Also the latency of the first and last commits of a long run on one
table, since each commit rewrites the table's metadata, which grows with its snapshots.

Its tables are written here, not by `factory` commands: the subject is the commit protocol
itself (``lakehouse.commit.commit_files``, what every job's last step calls), and each commit's
file is as small as a file can be so that the figure is the catalog's cost, not the data's.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _stage(table, run, ids: list[str]):
    from lakehouse.commit import StagedFile
    from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

    prefix = run.staging_prefix(table).removeprefix("file://")
    Path(prefix).mkdir(parents=True, exist_ok=True)
    path = f"{prefix}/part-{ids[0]}.parquet"
    rows = [{"doc_id": i, "source": "t", "text": f"text {i}", "path": None, "lang": None, "n_bytes": 6} for i in ids]
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(DOCUMENT_SCHEMA)), path)
    return StagedFile(f"file://{path}", len(ids))


def _writer(properties: dict, table_name: tuple[str, ...], worker: int, commits: int, barrier, out) -> None:
    import logging

    from pyiceberg.catalog import load_catalog

    from lakehouse.commit import Run, commit_files

    retries = []
    logging.getLogger("lakehouse.commit").addFilter(lambda r: retries.append(1) and False)
    catalog = load_catalog("bench", **properties)
    latencies = []
    barrier.wait(timeout=120)
    for i in range(commits):
        table = catalog.load_table(table_name)
        run = Run(job="bench", run_id=f"w{worker}-c{i}", params={}, inputs=[])
        staged = _stage(table, run, [f"w{worker}-c{i}-{k}" for k in range(3)])
        start = time.monotonic()
        commit_files(catalog, table_name, [staged], run, {"kept": 3}, max_attempts=50)
        latencies.append(time.monotonic() - start)
    out.put({"worker": worker, "latencies": latencies, "retries": len(retries)})


def _round(properties: dict, writers: int, commits: int, shared: bool) -> dict:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import ensure_table
    from lakehouse.schemas import DOCUMENT_SCHEMA

    catalog = load_catalog("bench", **properties)
    stamp = f"{writers}_{'shared' if shared else 'own'}_{int(time.time() * 1000)}"
    names = [("bench", f"t{stamp}" if shared else f"t{stamp}_{w}") for w in range(writers)]
    for name in set(names):
        ensure_table(catalog, name, DOCUMENT_SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(writers + 1), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(properties, names[w], w, commits, barrier, out)) for w in range(writers)]
    for p in procs:
        p.start()
    barrier.wait(timeout=120)
    start = time.monotonic()
    results = [out.get(timeout=1800) for _ in procs]
    seconds = time.monotonic() - start
    for p in procs:
        p.join()
    latencies = [x for r in results for x in r["latencies"]]
    return {
        "writers": writers,
        "tables": "one shared" if shared else "one each",
        "commits": len(latencies),
        "commits_per_s": len(latencies) / seconds,
        "mean_latency_s": sum(latencies) / len(latencies),
        "first_latency_s": sum(r["latencies"][0] for r in results) / writers,
        "last_latency_s": sum(r["latencies"][-1] for r in results) / writers,
        "retries": sum(r["retries"] for r in results),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.catalog", description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=40, help="commits per writer (default 40)")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4], help="concurrent writers")
    args = parser.parse_args()

    from tests.postgres import PostgresServer, find_postgres_bin

    server = PostgresServer(find_postgres_bin())
    server.start()
    try:
        warehouse = Path(tempfile.mkdtemp(prefix="factory-commit-bench-"))
        properties = {"type": "sql", "uri": server.url, "warehouse": warehouse.as_uri()}
        rows = []
        for writers in args.writers:
            for shared in (True, False) if writers > 1 else (True,):
                rows.append(_round(properties, writers, args.commits, shared))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.stop()
    return 0
