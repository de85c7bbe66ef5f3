"""Time the UI's documents pages on a large table as the factory writes it: ``raw.code``, made by
``factory ingest`` with its default options from --megabytes (128) of this machine's Python
standard library written as JSON lines (copies of it, the last cut short), as a user's ingest
makes it (benchmarks/user_path.py); its files and row groups are the ones the job chooses.

Each page is fetched over HTTP from the real app (uvicorn in this process, httpx as the client),
``--repeat`` times, the UI's caches emptied before each fetch (this times reading a page; keeping
it is benchmarks/ui/load.py's subject); the median is reported with the data files it opened. The baseline is what a
plain pyiceberg read does for the same page: ``scan(limit=offset + size)`` and a slice.

    PYTHONPATH=. python benchmarks/ui/run.py [--home DIR] [--megabytes 128]

--home DIR is the factory home: a table made there by an earlier run is used again as it is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TABLE = ("raw", "code")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="reuse or build the table here (default: a temporary folder)")
    parser.add_argument(
        "--megabytes", type=int, default=128, help="MB of source ingested into the table (default: 128)"
    )
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    home = (args.home or Path(tempfile.mkdtemp(prefix="ui-bench-"))).resolve()
    catalog = _catalog(home, args.megabytes)
    table = catalog.load_table(TABLE)
    snapshot_id = table.current_snapshot().snapshot_id
    total = int(table.current_snapshot().summary["total-records"])
    files = int(table.current_snapshot().summary["total-data-files"])
    some_id = table.scan(selected_fields=("doc_id",), limit=total).to_arrow().column("doc_id")[total * 3 // 4].as_py()
    print(f"{'.'.join(TABLE)}: {total} documents in {files} files, {args.megabytes} MB")

    from ui import documents

    opened: list[str] = []
    original = documents.open_parquet

    def counting(uri: str, label: str):
        opened.append(uri)
        return original(uri, label)

    documents.open_parquet = counting
    size = documents.PAGE_SIZE
    pages = {
        "first page": "documents",
        "middle page": f"documents?page_no={total // size // 2}",
        "last page": f"documents?page_no={(total - 1) // size}",
        "doc_id lookup": f"documents?doc_id={some_id}",
        "substring search (one step)": "documents?q=asyncio",
    }
    results = {}
    with _serve(home) as client:
        for name, path in pages.items():
            times = []
            for _ in range(args.repeat):
                for kept in (documents.data_files, documents.read_page, documents.find_document, documents.search):
                    kept.cache_clear()
                opened.clear()
                began = time.perf_counter()
                response = client.get(f"/tables/{'.'.join(TABLE)}/snapshots/{snapshot_id}/{path}")
                times.append(time.perf_counter() - began)
                assert response.status_code == 200, response.text[-500:]
            results[name] = {"median_s": statistics.median(times), "files_opened": len(opened)}
            print(f"{name:30s} {statistics.median(times) * 1000:8.1f} ms   {len(opened)} of {files} files opened")
    for name, offset in (
        ("first page", 0),
        ("middle page", total // size // 2 * size),
        ("last page", (total - 1) // size * size),
    ):
        times = []
        for _ in range(max(1, args.repeat // 2)):
            began = time.perf_counter()
            table.scan(snapshot_id=snapshot_id, limit=offset + size).to_arrow().slice(offset, size)
            times.append(time.perf_counter() - began)
        results[f"baseline {name}"] = {"median_s": statistics.median(times)}
        print(f"{'baseline ' + name:30s} {statistics.median(times) * 1000:8.1f} ms   (pyiceberg scan(limit) + slice)")
    (home / "ui-results.json").write_text(json.dumps(results, indent=2))
    return 0


def _catalog(home: Path, megabytes: int):
    """The catalog of the factory home ``home``, holding ``TABLE`` (ingested first if it is not there)."""
    from pyiceberg.catalog import load_catalog

    from benchmarks.user_path import ingest_corpus, write_stdlib_corpus
    from lakehouse.catalog import EMBEDDED_CATALOG_NAME, embedded_catalog_properties

    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    # Under the embedded catalog's name: the UI opens $FACTORY_HOME's catalog by it.
    catalog = load_catalog(EMBEDDED_CATALOG_NAME, **embedded_catalog_properties(home))
    if not catalog.table_exists(TABLE):
        write_stdlib_corpus(home / "corpus", megabytes=megabytes)
        ingest_corpus(home / "corpus", ".".join(TABLE), home=home)
    return catalog


class _serve:
    def __init__(self, home: Path) -> None:
        import os

        import uvicorn

        from ui.app import create_app
        from ui.sources import Sources

        os.environ["FACTORY_HOME"] = str(home)
        self.server = uvicorn.Server(uvicorn.Config(create_app(Sources(None, [home])), port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        import httpx

        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)
        return self.client

    def __exit__(self, *_exc) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
