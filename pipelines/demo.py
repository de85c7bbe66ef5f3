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
from pipelines.exceptions import FactoryError
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
    _step("mix", lambda: _mix_and_stream(catalog))
    _step("train", _train)
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


# The most refined table of each kind the earlier steps made (the chain's later jobs write the first ones).
DEMO_MIXTURE = {
    "code": ("filtered.code", "dedup.code", "raw.code"),
    "text": ("filtered.text", "dedup.text", "raw.text"),
}
DEMO_WEIGHTS = {"code": 0.7, "text": 0.3}


def _mix_and_stream(catalog: Catalog, batches: int = 3) -> None:
    """Train a small tokenizer, pin a two-component mixture and show the first batches' mix."""
    from mixtures.command import format_manifest
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from pipelines.catalog import resolve
    from streaming_loader import StreamingLoader
    from streaming_loader.tokenizer_train import train_tokenizer

    folder = factory_home() / "demo"
    folder.mkdir(parents=True, exist_ok=True)
    tables = {kind: next(t for t in candidates if catalog.table_exists(t)) for kind, candidates in DEMO_MIXTURE.items()}
    refs = [f"{t}@{resolve(catalog, t)[1].snapshot_id}" for t in tables.values()]
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
                {"name": kind, "table": table, "weight": DEMO_WEIGHTS[kind], "heldout_fraction": 0.01}
                for kind, table in tables.items()
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


DEMO_TRAIN_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo-train.toml"


def _train() -> None:
    """Train a tiny model on 2 CPU ranks on the pinned mixture, then show its lineage.

    The run folder is named after the manifest's fingerprint: the same data resumes (a no-op once
    finished), new data starts a new run.
    """
    import json
    import subprocess
    import sys

    folder = factory_home() / "demo"
    fingerprint = json.loads((folder / "manifest.json").read_text())["fingerprint"].removeprefix("sha256:")
    run_dir = folder / "runs" / fingerprint[:12]
    overrides = [
        f"data.manifest='{folder / 'manifest.json'}'",
        f"data.tokenizer='{folder / 'tokenizer.json'}'",
        f"run.dir='{run_dir}'",
    ]
    command = [
        sys.executable,
        "-m",
        "pipelines.cli",
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
    print(f"\n· factory lineage {run_dir}")
    subprocess.run([sys.executable, "-m", "pipelines.cli", "lineage", str(run_dir)], check=True)


def _trained_on(tokenizer: Path) -> list[str]:
    import json

    record = json.loads(tokenizer.read_text(encoding="utf-8")).get("model", {}).get("factory", {})
    return [f"{i['table']}@{i['snapshot_id']}" for i in record.get("inputs", [])]


def _step(name: str, action) -> None:
    print(f"\n== {name} ==", flush=True)
    start = time.monotonic()
    action()
    print(f"({name}: {time.monotonic() - start:.0f}s)", file=sys.stderr)
