"""Quality filtering: our Spark job vs datatrove's local executor, same filters, same documents, same cores.

    .venv/bin/python benchmarks/quality/run.py [--mb 30] [--cores 2] [--kinds code,text]

Both sides get the same documents (this machine's Python standard library as `code`, its
package documentation as `text`, up to --mb MB each), written as JSONL shards: datatrove reads
them, and ours reads the table ``factory ingest`` makes of them with its default options (only
the fields holding each record's id, path and language named), as a user's ingest writes it. They
get the same filters, from the shipped
configs: for `text` datatrove's own Gopher repetition, Gopher quality, C4 and FineWeb filters
(built with the thresholds of quality/configs/text.toml), for `code` our code filters' reference
``filter`` methods (StarCoder2's patterns as written, one datatrove step per filter), which
datatrove runs through a small BaseFilter adapter. Our job runs the chain's ``decide`` path:
the same verdicts (tests/quality/test_fast_filters.py), computed with shared line splitting and
word tokenizing per document and with fewer regex scans.

- ours: ``filter_documents`` on Spark ``local[<cores>]`` (session started and its Python workers
  warmed by a small run before timing, as in a long-running Spark application), reading
  that ingest's snapshot, writing kept documents and quarantine as Parquet (zstd) through the
  commit protocol; then GX validation and publishing, timed apart.
- datatrove: ``LocalPipelineExecutor(workers=<cores>)`` over JSONL shards of the same records:
  reader → the filters (each with an exclusion writer, as FineWeb's pipeline) → JSONL writer
  (zstd).

It prints MB/s per core for both and their ratio (ours ÷ datatrove; ≥ 1 means Spark costs no
throughput). Figures on a shared machine are indicative; re-measure on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARDS = 8  # JSONL files for datatrove, so each of its tasks has its own input


def collect(kind: str, limit_bytes: int) -> list[dict]:
    """The benchmark's documents of one kind, in a fixed order, up to ``limit_bytes`` of text."""
    from pipelines.ingest_records import doc_id_for, lang_from_path

    if kind == "code":
        root = Path(sysconfig.get_paths()["stdlib"])
        paths = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    else:
        root = Path("/usr/share/doc")
        names = {"copyright", "README", "NEWS"}
        paths = sorted(p for p in root.rglob("*") if p.is_file() and (p.name in names or p.suffix in {".txt", ".md"}))
    docs, total = [], 0
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        size = len(text.encode("utf-8"))
        if not text.strip() or "\x00" in text:
            continue
        rel = str(path.relative_to(root))
        lang = lang_from_path(rel) if kind == "code" else "en"
        docs.append(
            {"id": doc_id_for(kind, rel), "text": text, "source": kind, "lang": lang, "path": rel, "n_bytes": size}
        )
        total += size
        if total >= limit_bytes:
            break
    return docs


def _first_bytes(docs: list[dict], limit: int) -> list[dict]:
    """The first documents holding at least ``limit`` bytes of text (all of them if fewer)."""
    total = 0
    for i, doc in enumerate(docs):
        total += doc["n_bytes"]
        if total >= limit:
            return docs[: i + 1]
    return docs


def write_inputs(docs: list[dict], kind: str, folder: Path, table: str = "bench") -> None:
    """The records as JSONL shards (datatrove reads them), then ``factory ingest`` of those shards
    into ``<table>.<kind>`` (ours reads it) with the job's default options: only the fields holding
    each record's id, path and language are named. A document's ``doc_id`` is then ingest's id of
    the record's ``id`` (``ours_ids`` maps it back)."""
    from benchmarks.user_path import factory

    shard_dir = folder / "jsonl" / kind
    shard_dir.mkdir(parents=True)
    shards = [open(shard_dir / f"{i:02d}.jsonl", "w", encoding="utf-8") for i in range(SHARDS)]  # noqa: SIM115
    for i, doc in enumerate(docs):
        shards[i % SHARDS].write(json.dumps(doc) + "\n")
    for f in shards:
        f.close()
    factory(
        "ingest", str(shard_dir), "--source", kind, "--format", "jsonl", "--output", f"{table}.{kind}",
        "--id-field", "id", "--path-field", "path", "--lang-field", "lang",
    )  # fmt: skip


def ours_ids(docs: list[dict], kind: str) -> dict[str, str]:
    """Ingest's ``doc_id`` of each record → the record's ``id`` (datatrove's document id)."""
    from pipelines.ingest_records import doc_id_for

    return {doc_id_for(kind, f"id:{d['id']}"): d["id"] for d in docs}


def datatrove_pipeline(kind: str, folder: Path) -> list:
    """Reader → the config's filters as datatrove steps → writer."""
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    from quality.config import filter_class, load_config

    config = load_config(kind)
    steps = [JsonlReader(str(folder / "jsonl" / kind))]
    for name in config.filters:
        excluded = JsonlWriter(str(folder / "datatrove" / kind / "removed" / name), compression="zstd")
        cls = filter_class(name)
        if cls.uses_language:  # a datatrove filter: datatrove's own object, with our thresholds
            native = cls(config.settings[name], language=config.language)._datatrove
            native.exclusion_writer = excluded
            steps.append(native)
        else:
            steps.append(_adapter(kind, name, excluded))
    steps.append(JsonlWriter(str(folder / "datatrove" / kind / "kept"), compression="zstd"))
    return steps


def _adapter(kind: str, name: str, exclusion_writer):
    """One of our filters (per-language thresholds included) as a datatrove step."""
    from datatrove.pipeline.filters.base_filter import BaseFilter

    from quality.base import Doc
    from quality.config import filter_class, load_config

    class OurFilter(BaseFilter):
        def __init__(self):
            super().__init__(exclusion_writer)
            self.name = name
            config = load_config(kind)
            self.languages = set(config.languages)
            by_lang = {lang: dict(config.chain_for(lang)).get(name) for lang in [None, *config.languages]}
            self.filters = {lang: filter_class(name)(cfg) for lang, cfg in by_lang.items() if cfg is not None}

        def filter(self, doc):
            lang = doc.metadata.get("lang")
            flt = self.filters.get(lang if lang in self.languages else None)
            if flt is None:  # skipped for this language
                return True
            result = flt.filter(Doc(doc.id, doc.text, kind, lang, None, doc.metadata.get("n_bytes")))
            return True if result.keep else (False, result.reason)

    return OurFilter()


def run_datatrove(kind: str, folder: Path, cores: int) -> tuple[float, set[str]]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader

    executor = LocalPipelineExecutor(
        datatrove_pipeline(kind, folder),
        tasks=SHARDS,
        workers=cores,
        logging_dir=str(folder / "datatrove-logs" / kind),
        skip_completed=False,
    )
    start = time.perf_counter()
    executor.run()
    seconds = time.perf_counter() - start
    kept = {doc.id for doc in JsonlReader(str(folder / "datatrove" / kind / "kept"))()}
    return seconds, kept


def run_ours(spark, catalog, kind: str, table: str = "bench") -> tuple[dict[str, float], set[str]]:
    from pipelines.filter import FilterOptions, filter_documents

    start = time.perf_counter()
    result = filter_documents(spark, catalog, FilterOptions(f"{table}.{kind}", f"filtered_{table}.{kind}", kind))
    seconds = {"total": time.perf_counter() - start, **result.seconds}
    output = catalog.load_table((f"filtered_{table}", kind))
    kept = set(output.scan(selected_fields=("doc_id",)).to_arrow()["doc_id"].to_pylist())
    return seconds, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=30, help="MB of text per corpus (default: 30)")
    parser.add_argument("--cores", type=int, default=2, help="cores for both sides (default: 2)")
    parser.add_argument("--kinds", default="code,text", help="corpora to run (default: code,text)")
    parser.add_argument(
        "--copies", type=int, default=1, help="repeat each corpus this many times, with new ids (default: 1)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the working folder (tables, JSONL, outputs)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-quality-"))
    os.environ["FACTORY_HOME"] = str(work / "home")
    os.environ.setdefault("FACTORY_SPARK_MASTER", f"local[{args.cores}]")
    os.environ.setdefault("FACTORY_SPARK_DRIVER_MEMORY", "2g")
    import logging

    logging.basicConfig(level=logging.WARNING)
    from lakehouse.catalog import load_catalog
    from pipelines.read_units import MIN_UNIT_BYTES
    from pipelines.spark_session import get_spark

    inputs = {}
    for kind in args.kinds.split(","):
        docs = collect(kind, int(args.mb * 1e6))
        docs = [{**d, "id": f"{d['id']}-{copy}"} if copy else d for copy in range(args.copies) for d in docs]
        # A Spark application keeps its Python workers (imports, loaded tokenizers) from job to
        # job, as a cluster's executors do for a whole pipeline; one small job of at least one
        # unit of work per core first warms them all.
        warm_docs = _first_bytes(docs, args.cores * MIN_UNIT_BYTES)
        # Ingested before this process's Spark session starts, so that two JVMs never share the cores.
        write_inputs(docs, kind, work)
        write_inputs(warm_docs, kind, work / "warmup", table="warmup")
        inputs[kind] = (docs, len(warm_docs))
        print(f"{kind}: {len(docs)} documents, {sum(d['n_bytes'] for d in docs) / 1e6:.1f} MB", file=sys.stderr)

    catalog = load_catalog()
    spark = get_spark("bench-quality")
    rows = []
    for kind, (docs, n_warm) in inputs.items():
        mb = sum(d["n_bytes"] for d in docs) / 1e6
        warmup, _ = run_ours(spark, catalog, kind, table="warmup")
        ours, ours_kept = run_ours(spark, catalog, kind)
        ours_kept = {ours_ids(docs, kind)[doc_id] for doc_id in ours_kept}
        theirs, theirs_kept = run_datatrove(kind, work, args.cores)
        ours[f"warm-up ({n_warm} documents)"] = warmup["total"]
        rows.append((kind, len(docs), mb, ours, theirs, len(ours_kept), len(theirs_kept), len(ours_kept & theirs_kept)))

    print(f"\nquality filtering, MB/s per core ({args.cores} cores; ours: Spark local[{args.cores}], "
          f"datatrove: LocalPipelineExecutor workers={args.cores})")  # fmt: skip
    print(
        f"{'corpus':7} {'MB':>6} {'ours filter':>12} {'ours +validate':>15} {'datatrove':>10} {'ratio':>6}  kept (ours/dt/both)"
    )
    for kind, n, mb, ours, theirs, n_ours, n_theirs, n_both in rows:
        filtering, total, baseline = (mb / seconds / args.cores for seconds in (ours["filter"], ours["total"], theirs))
        print(
            f"{kind:7} {mb:6.1f} {filtering:12.2f} {total:15.2f} {baseline:10.2f} {filtering / baseline:6.2f}  "
            f"{n_ours}/{n_theirs}/{n_both} of {n}"
        )
        print(f"        seconds: ours {json.dumps({k: round(v, 1) for k, v in ours.items()})}, datatrove {theirs:.1f}")
    spark.stop()
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
