"""``factory demo``: the chain on the embedded default, with a corpus every machine has.

Code: the Python standard library's ``.py`` files (source ``code``). Text: licence texts and
package documentation found on the system (source ``text``), or, where the system has none,
the licence files of the installed Python packages. Nothing is downloaded.

Then it filters the demo tables (``dedup.*`` when they exist, else ``raw.*``) with the shipped
``code`` and ``text`` configs into ``filtered.*``, validates, publishes and tags them.

Run ids are derived from the corpus listing (ingest) and from the pinned input and config
(filter), so running the demo again is a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
import sysconfig
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyiceberg.catalog import Catalog

from pipelines.catalog import factory_home, load_catalog
from pipelines.explore import format_rows, format_tables, tag
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
    _step("filter", lambda: _filter_all(spark, catalog))
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


def _filter_all(spark, catalog: Catalog) -> None:
    """Filter dedup.* (raw.* before dedup exists), validate, publish and tag filtered.*."""
    from pipelines.catalog import resolve
    from pipelines.filter import FilterOptions, filter_documents
    from pipelines.filter import format_result as format_filter_result
    from quality.config import load_config

    for kind in ("code", "text"):
        source = next((f"{ns}.{kind}" for ns in ("dedup", "raw") if catalog.table_exists((ns, kind))), None)
        if source is None:
            continue
        _, pinned = resolve(catalog, source)
        config = load_config(kind)
        digest = hashlib.sha256(f"{pinned}|{config.sha256}".encode()).hexdigest()[:12]
        opts = FilterOptions(str(pinned), f"filtered.{kind}", kind, run_id=f"demo-filter-{kind}-{digest}")
        print(f"· {source}@{pinned.snapshot_id} → filtered.{kind} (config {kind}, sha256 {config.sha256[:12]})")
        result = filter_documents(spark, catalog, opts)
        print(format_filter_result(result))
        table = catalog.load_table(("filtered", kind))
        name = _published_tag(table, result.audited_snapshot_id)
        tag(table, PinnedRef(("filtered", kind), result.audited_snapshot_id, None), name)
        print(f"  tagged filtered.{kind}@{name}")


def _published_tag(table, snapshot_id: int) -> str:
    """``published-<day the snapshot was made>``, the same name on every re-run of the demo."""
    snapshot = table.snapshot_by_id(snapshot_id)
    day = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC).strftime("%Y%m%d")
    for n in itertools.count(1):
        name = f"published-{day}" + (f".{n}" if n > 1 else "")
        ref = table.metadata.refs.get(name)
        if ref is None or ref.snapshot_id == snapshot_id:
            return name
    raise AssertionError("unreachable")


def _step(name: str, action) -> None:
    print(f"\n== {name} ==", flush=True)
    start = time.monotonic()
    action()
    print(f"({name}: {time.monotonic() - start:.0f}s)", file=sys.stderr)
