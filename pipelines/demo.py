"""``factory demo``: the chain on the embedded default, with a corpus every machine has.

Code: the Python standard library's ``.py`` files (source ``code``). Text: licence texts and
package documentation found on the system (source ``text``), or, where the system has none,
the licence files of the installed Python packages. Nothing is downloaded.

Run ids are derived from the corpus listing, so running the demo again is a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog import Catalog

from pipelines.catalog import factory_home, load_catalog
from pipelines.explore import format_rows, format_tables
from pipelines.ingest import IngestOptions, format_result, ingest
from pipelines.ingest_inputs import discover
from pipelines.ingest_records import RecordConfig
from pipelines.refs import PinnedRef


@dataclass(frozen=True)
class Corpus:
    name: str
    source: str
    table: str
    path: str
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()


def demo_corpora() -> list[Corpus]:
    """The demo's inputs that exist on this machine."""
    stdlib = sysconfig.get_paths()["stdlib"]
    corpora = [Corpus("stdlib", "code", "raw.code", stdlib, ("*.py",), ("site-packages/*", "dist-packages/*"))]
    system_text = [
        Corpus("licenses", "text", "raw.text", "/usr/share/common-licenses", ("*",)),
        Corpus("docs", "text", "raw.text", "/usr/share/doc", ("copyright", "*.txt", "*.md", "README")),
    ]
    found = [c for c in system_text if Path(c.path).is_dir()]
    if not found:  # no system docs (e.g. a slim container): the installed packages' licence files
        site = sysconfig.get_paths()["purelib"]
        found = [Corpus("package-licenses", "text", "raw.text", site, ("LICENSE*", "COPYING*", "NOTICE*"))]
    return corpora + found


def run_id_for(corpus: Corpus) -> str:
    """A run id that changes only when the corpus does."""
    files = discover([corpus.path], "files", corpus.include, corpus.exclude)
    listing = "\n".join(f"{f.relpath}\t{f.size}" for f in files)
    return f"demo-{corpus.name}-{hashlib.sha256(listing.encode()).hexdigest()[:12]}"


def add_arguments(parser: argparse.ArgumentParser, _name: str = "demo") -> None:
    parser.description = __doc__.split("\n\n")[0]


def run(args: argparse.Namespace) -> int:
    from pipelines.spark_session import get_spark

    catalog = load_catalog(args.catalog)
    print(f"lakehouse: {factory_home()} (catalog {catalog.name})")
    spark = get_spark("factory-demo")
    _step("ingest", lambda: _ingest_all(spark, catalog))
    print()
    print(format_tables(catalog))
    return 0


def _ingest_all(spark, catalog: Catalog) -> None:
    for corpus in demo_corpora():
        opts = IngestOptions(
            inputs=[corpus.path],
            fmt="files",
            output=corpus.table,
            records=RecordConfig(source=corpus.source),
            include=corpus.include,
            exclude=corpus.exclude,
            run_id=run_id_for(corpus),
        )
        print(f"· {corpus.name}: {corpus.path} → {corpus.table}")
        result = ingest(spark, catalog, opts)
        print(format_result(result))
        docs = result.documents
        table = catalog.load_table(tuple(docs.table.split(".")))
        print(format_rows(table, PinnedRef(tuple(docs.table.split(".")), docs.snapshot_id, None), 3, as_json=False))


def _step(name: str, action) -> None:
    print(f"\n== {name} ==", flush=True)
    start = time.monotonic()
    action()
    print(f"({name}: {time.monotonic() - start:.0f}s)", file=sys.stderr)
