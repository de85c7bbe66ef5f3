"""How many files the demo's text chain writes (issue 19, "No small files").

    FACTORY_HOME=/tmp/demo-files .venv/bin/python benchmarks/files/demo_text.py prepare   # ingest + dedup, once
    FACTORY_HOME=/tmp/demo-files .venv/bin/python benchmarks/files/demo_text.py after     # filter into after.text
    (cd OTHER-CHECKOUT && FACTORY_HOME=/tmp/demo-files PYTHONPATH=$PWD python .../demo_text.py before)

The text corpora of ``factory demo`` (licence texts and package documentation) are ingested and
deduplicated once; then the demo's text filter (the demo definition's ``sources.text.filter``) runs on
``dedup.text`` into ``<NAME>.text``, with whichever code is on ``PYTHONPATH``, so two versions of
the code filter the same pinned input. Prints every table's data files and records (JSON).

Every table is written by the factory's own jobs with their default options (ingest, dedup and
filter, called in one Spark session as `factory demo` calls them), since their files are the
subject.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from factory_cli.demo import DEFINITION, build_corpus
    from lakehouse.catalog import factory_home, load_catalog
    from orchestration.definition_load import load_definition
    from pipelines.dedup import DedupOptions, dedup
    from pipelines.filter import FilterOptions, filter_documents
    from pipelines.ingest import IngestOptions, ingest
    from pipelines.ingest_records import RecordConfig
    from pipelines.spark_session import get_spark

    stage = sys.argv[1] if len(sys.argv) > 1 else "after"
    spark = get_spark("demo-text-files")
    catalog = load_catalog()
    build_corpus(factory_home() / "demo" / "corpus")
    text = load_definition(DEFINITION).sources["text"]
    if stage == "prepare":
        for given in text.inputs:
            opts = IngestOptions(list(given.paths), "files", "raw.text", RecordConfig(source="text"),
                                 include=given.include, exclude=given.exclude)  # fmt: skip
            ingest(spark, catalog, opts)
        dedup(spark, catalog, DedupOptions(inputs=["raw.text"], output="dedup.text"))
    else:
        filter_documents(spark, catalog, FilterOptions("dedup.text", f"{stage}.text", text.filter))
    found = {}
    for namespace in catalog.list_namespaces():
        for identifier in catalog.list_tables(namespace):
            snapshot = catalog.load_table(identifier).current_snapshot()
            if snapshot is not None:
                found[".".join(identifier)] = {
                    "files": int(snapshot.summary["total-data-files"]),
                    "records": int(snapshot.summary["total-records"]),
                }
    print(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
