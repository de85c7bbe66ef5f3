"""``factory demo``: the chain on the embedded default, with a corpus every machine has.

Code: the Python standard library's ``.py`` files (source ``code``). Text: licence texts and
package documentation found on the system (source ``text``), or, where the system has none,
the licence files of the installed Python packages. Nothing is downloaded.

Then dedup: ``raw.code`` → ``dedup.code`` and ``raw.text`` → ``dedup.text``, printing what it
removed (licence texts and copyright files repeat a lot).

Then it filters the demo tables (``dedup.*`` when they exist, else ``raw.*``) with the shipped
``code`` and ``docs`` configs into ``filtered.*``, validates, publishes and tags them.

Then it removes from ``filtered.code`` the documents that share a 13-gram with HumanEval's
prompts or solutions (``decontaminated.code``, the quarantine says which task).

Then it trains a tokenizer on the filtered tables, pins a two-component mixture of them, shows
the first batches' shares, trains a tiny model on 2 CPU ranks with evals and checkpoints
(``configs/demo-train.toml``), evaluates its last checkpoint (held-out loss and a few HumanEval
problems, run in the sandbox) into ``evals.results`` and prints the checkpoint's lineage with
those results.

Run ids are derived from the corpus listing and, for dedup and filter, from the pinned input
snapshot and the parameters or config, so running the demo again is a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
import sysconfig
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyiceberg.catalog import Catalog

from factory_cli.ingest import format_result
from factory_cli.tables import format_rows, format_tables
from lakehouse.catalog import factory_home, load_catalog, resolve
from lakehouse.errors import FactoryError
from lakehouse.publish import tag_snapshot
from lakehouse.refs import PinnedRef
from pipelines.ingest import IngestOptions, ingest
from pipelines.ingest_inputs import discover
from pipelines.ingest_records import RecordConfig


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
    _step("dedup", lambda: _dedup_all(spark, catalog))
    _step("filter", lambda: _filter_all(spark, catalog))
    _step("decontaminate", lambda: _decontaminate_code(spark, catalog))
    print()
    print(format_tables(catalog))
    _step("mix", lambda: _mix_and_stream(catalog))
    _step("train", _train)
    _step("eval", lambda: _eval(args.catalog))
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


DEDUP_STEPS = (("raw.code", "dedup.code"), ("raw.text", "dedup.text"))


def _dedup_all(spark, catalog: Catalog) -> None:
    from factory_cli.dedup import format_result
    from pipelines.dedup import DedupOptions, dedup
    from pipelines.dedup_stages import DedupConfig

    config = DedupConfig()
    for source, output in DEDUP_STEPS:
        _, pinned = resolve(catalog, source)
        key = f"{pinned}\n{json.dumps(config.params(), sort_keys=True)}"
        run_id = f"demo-dedup-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        print(f"· {pinned} → {output}")
        result = dedup(spark, catalog, DedupOptions(inputs=[str(pinned)], output=output, config=config, run_id=run_id))
        print(format_result(result))
        print(_removed_examples(catalog, pinned, result.clusters.table, result.clusters.snapshot_id))


def _removed_examples(catalog: Catalog, source: PinnedRef, clusters: str, snapshot_id: int, n: int = 5) -> str:
    """A few removed documents, each with the one kept in its place: paths, how they matched."""
    rows = (
        catalog.load_table(tuple(clusters.split(".")))
        .scan(snapshot_id=snapshot_id, row_filter="kept == false")
        .to_arrow()
    )
    if rows.num_rows == 0:
        return "  nothing removed"
    rows = rows.sort_by([("cluster_size", "descending"), ("doc_id", "ascending")]).to_pylist()
    seen: set[str] = set()
    first_of_cluster = [r for r in rows if not (r["cluster_id"] in seen or seen.add(r["cluster_id"]))]
    near = [r for r in first_of_cluster if r["match"] == "near"]
    exact = [r for r in first_of_cluster if r["match"] == "exact"]
    rows = exact[: max(2, n - len(near))] + near[: n - min(2, len(exact))]
    wanted = {r["doc_id"] for r in rows} | {r["duplicate_of"] for r in rows}
    docs = catalog.load_table(source.identifier).scan(
        snapshot_id=source.snapshot_id, selected_fields=("doc_id", "path")
    )
    path = {d["doc_id"]: d["path"] for d in docs.to_arrow().to_pylist() if d["doc_id"] in wanted}
    lines = ["  for example:"]
    for r in rows:
        how = "same text" if r["match"] == "exact" else f"near, Jaccard {r['jaccard'] or r['similarity']:.2f}"
        lines.append(f"    {path.get(r['doc_id'])}  duplicates  {path.get(r['duplicate_of'])}  ({how})")
    return "\n".join(lines)


# The demo's text is package documentation: the `docs` config keeps its technical prose (issue 19).
DEMO_FILTER_CONFIGS = {"code": "code", "text": "docs"}


def _filter_all(spark, catalog: Catalog) -> None:
    """Filter dedup.* (raw.* before dedup exists), validate, publish and tag filtered.*."""
    from factory_cli.filter import format_result as format_filter_result
    from pipelines.filter import FilterOptions, filter_documents
    from quality.config import load_config

    for kind in ("code", "text"):
        source = next((f"{ns}.{kind}" for ns in ("dedup", "raw") if catalog.table_exists((ns, kind))), None)
        if source is None:
            continue
        _, pinned = resolve(catalog, source)
        config_name = DEMO_FILTER_CONFIGS[kind]
        config = load_config(config_name)
        digest = hashlib.sha256(f"{pinned}|{config.sha256}".encode()).hexdigest()[:12]
        opts = FilterOptions(str(pinned), f"filtered.{kind}", config_name, run_id=f"demo-filter-{kind}-{digest}")
        print(f"· {source}@{pinned.snapshot_id} → filtered.{kind} (config {config_name}, sha256 {config.sha256[:12]})")
        result = filter_documents(spark, catalog, opts)
        print(format_filter_result(result))
        table = catalog.load_table(("filtered", kind))
        name = _published_tag(table, result.audited_snapshot_id)
        tag_snapshot(table, PinnedRef(("filtered", kind), result.audited_snapshot_id, None), name)
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


def _decontaminate_code(spark, catalog: Catalog) -> None:
    """Remove code that shares a 13-gram with HumanEval from filtered.code (before it is mixed)."""
    from factory_cli.decontaminate import format_result
    from pipelines.decontaminate import DecontaminateOptions, decontaminate
    from quality.contamination import NGRAM, eval_set_digests

    if not catalog.table_exists(("filtered", "code")):
        return
    _, pinned = resolve(catalog, "filtered.code")
    key = f"{pinned}|{NGRAM}|{json.dumps(eval_set_digests(['humaneval']), sort_keys=True)}"
    run_id = f"demo-decontaminate-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    print(f"· {pinned} → decontaminated.code (against humaneval, {NGRAM}-grams)")
    opts = DecontaminateOptions(str(pinned), ("humaneval",), "decontaminated.code", run_id=run_id)
    print(format_result(decontaminate(spark, catalog, opts)))


# The most refined table of each kind the earlier steps made (the chain's later jobs write the first ones).
DEMO_MIXTURE = {
    "code": ("decontaminated.code", "filtered.code", "dedup.code", "raw.code"),
    "text": ("filtered.text", "dedup.text", "raw.text"),
}
DEMO_WEIGHTS = {"code": 0.7, "text": 0.3}


def _mix_and_stream(catalog: Catalog, batches: int = 3) -> None:
    """Train a small tokenizer, pin a two-component mixture and show the first batches' mix."""
    from factory_cli.mix import format_manifest
    from lakehouse.commit import record_count
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader import StreamingLoader
    from streaming_loader.tokenizer_train import train_tokenizer

    folder = factory_home() / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    tables = {kind: next(t for t in candidates if catalog.table_exists(t)) for kind, candidates in DEMO_MIXTURE.items()}
    resolved = {kind: resolve(catalog, table) for kind, table in tables.items()}
    refs = [f"{tables[kind]}@{pinned.snapshot_id}" for kind, (_, pinned) in resolved.items()]
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.exists() or _trained_on(tokenizer) != refs:  # re-running the demo reuses it
        trained = train_tokenizer(catalog, refs, vocab_size=8192, max_bytes=8 << 20)
        tokenizer.write_text(trained.text, encoding="utf-8")
    print(f"· tokenizer: {tokenizer} (8192 tokens, trained on {', '.join(refs)})")
    spec = spec_from_dict(
        {
            "name": "demo",
            "seed": 0,
            "components": [
                {
                    "name": kind,
                    "table": tables[kind],
                    "weight": DEMO_WEIGHTS[kind],
                    "heldout_fraction": _heldout_fraction(record_count(table, pinned.snapshot_id)),
                }
                for kind, (table, pinned) in resolved.items()
            ],
        }
    )
    manifest = pin(catalog, spec)
    manifest.save(folder / "manifest.json")
    print(f"· manifest: {folder / 'manifest.json'}")
    print(format_manifest(manifest))
    with StreamingLoader.from_manifest(
        manifest, tokenizer, seq_len=256, global_batch_size=16, backend="local", log_interval_s=0
    ) as loader:
        names = loader.components
        target = "  ".join(f"{n} {w:.2f}" for n, w in zip(names, (c.weight for c in manifest.components), strict=True))
        print(f"· first {batches} global batches (16 sequences of 256 tokens; target {target}):")
        for index in range(batches):
            counts = next(loader)["components"].bincount(minlength=len(names)).tolist()
            shares = "  ".join(f"{n} {c:2d} ({c / 16:.2f})" for n, c in zip(names, counts, strict=True))
            print(f"  batch {index}: {shares}")


def _heldout_fraction(records: int, wanted: int = 20) -> float:
    """1% held out, or enough for about ``wanted`` documents (at most a quarter): every rank's
    evaluation shard needs documents of each component, and the text filters keep few of the
    system's documentation files."""
    return round(min(0.25, max(0.01, wanted / max(records, 1))), 4)


DEMO_TRAIN_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo-train.toml"


def _train() -> None:
    """Train a tiny model on 2 CPU ranks on the pinned mixture.

    The run folder is named after the manifest's fingerprint: the same data resumes (a no-op once
    finished), new data starts a new run.
    """
    import subprocess
    import sys

    folder = factory_home() / "demo"
    run_dir = demo_run_dir()
    overrides = [
        f"data.manifest='{folder / 'manifest.json'}'",
        f"data.tokenizer='{folder / 'tokenizer.json'}'",
        f"run.dir='{run_dir}'",
    ]
    command = [
        sys.executable,
        "-m",
        "factory_cli.main",
        "train",
        "--config",
        str(DEMO_TRAIN_CONFIG),
        "--nproc",
        "2",
        "--resume",
    ]
    for override in overrides:
        command += ["--set", override]
    print(f"· {' '.join(command[2:])}", flush=True)
    if subprocess.run(command).returncode != 0:
        raise FactoryError(f"the demo's training run failed (see above); its folder is {run_dir}")


def demo_run_dir() -> Path:
    """The demo's training run: named after its manifest's fingerprint (see ``_train``)."""
    folder = factory_home() / "demo"
    fingerprint = json.loads((folder / "manifest.json").read_text())["fingerprint"].removeprefix("sha256:")
    return folder / "runs" / fingerprint[:12]


# A few HumanEval problems: the tiny model scores 0, the point is the harness running end to end.
DEMO_EVAL = ["--suite", "heldout", "humaneval", "--limit", "4", "--samples", "1"]


def _eval(catalog_name: str | None) -> None:
    """Evaluate the run's last checkpoint (a no-op when done before), then show its lineage and scores."""
    import subprocess

    run_dir = demo_run_dir()
    catalog = ["--catalog", catalog_name] if catalog_name else []
    command = [sys.executable, "-m", "factory_cli.main", "eval", str(run_dir), *DEMO_EVAL, *catalog]
    print(f"· {' '.join(command[2:])}", flush=True)
    if subprocess.run(command).returncode != 0:
        raise FactoryError(f"the demo's eval of {run_dir} failed (see above)")
    print(f"\n· factory lineage {run_dir}", flush=True)
    subprocess.run([sys.executable, "-m", "factory_cli.main", "lineage", str(run_dir), *catalog], check=True)


def _trained_on(tokenizer: Path) -> list[str]:
    import json

    record = json.loads(tokenizer.read_text(encoding="utf-8")).get("model", {}).get("factory", {})
    return [f"{i['table']}@{i['snapshot_id']}" for i in record.get("inputs", [])]


def _step(name: str, action) -> None:
    print(f"\n== {name} ==", flush=True)
    start = time.monotonic()
    action()
    print(f"({name}: {time.monotonic() - start:.0f}s)", file=sys.stderr)
