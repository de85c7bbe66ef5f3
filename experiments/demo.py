"""``make experiments-demo``: the mixture search validated on real data this machine has.

Three components, ingested by the real ingest job into ``$FACTORY_HOME`` (default
``.factory/experiments-demo``): ``code`` (part of the Python standard library's source),
``docs`` (package documentation under /usr/share/doc: READMEs and Markdown) and ``licenses``
(/usr/share/common-licenses and the packages' copyright files). A tokenizer and a base manifest
over them, then ``factory mix search`` with K = 16 tiny proxies on Ray Tune (2 CPUs), the
chosen mixture trained fresh, and the lineage of its checkpoint. Prints the trials' table, the
cross-validated Spearman of the fit on held-out trials, and the chosen mixture's metric beside
the swarm's median and best. Run again, the committed ingest runs and the finished search are
reused (the search's state and its rows are kept: delete ``$FACTORY_HOME`` to run it afresh).
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import time
from pathlib import Path

STDLIB_PACKAGES = ("json", "logging", "http", "concurrent", "email")
TRIALS = 16
TRAIN_CONFIG = """\
# The proxies of `make experiments-demo`: the tiny model, a few hundred thousand tokens each.
[data]
manifest = "{home}/base-manifest.json"
tokenizer = "{home}/tokenizer.json"
seq_len = 64
global_batch_size = 16
num_shards = 4

[model]
preset = "tiny"

[train]
steps = 30

[optim]
lr = 0.003
warmup_steps = 3

[eval]
batches = 2

[checkpoint]
keep = 1
"""


def corpora() -> dict[str, list[tuple[list[str], tuple[str, ...], tuple[str, ...]]]]:
    """component → its parts: (input folders, include, exclude), each ingested as one run."""
    stdlib = sysconfig.get_paths()["stdlib"]
    return {
        "code": [([f"{stdlib}/{p}" for p in STDLIB_PACKAGES if Path(stdlib, p).is_dir()], ("*.py",), ())],
        "docs": [(["/usr/share/doc"], ("README*", "*.md"), ("*.gz", "*.html"))],
        "licenses": [(["/usr/share/common-licenses"], ("*",), ()), (["/usr/share/doc"], ("copyright",), ())],
    }


def ingest_components(catalog) -> None:
    from lakehouse.commit import record_count
    from pipelines.ingest import IngestOptions, ingest
    from pipelines.ingest_inputs import discover
    from pipelines.ingest_records import RecordConfig
    from pipelines.spark_session import get_spark

    spark = get_spark("factory-experiments-demo")
    try:
        for name, parts in corpora().items():
            for n, (inputs, include, exclude) in enumerate(parts):
                files = discover(inputs, "files", include, exclude)
                listing = "\n".join(f"{f.relpath}\t{f.size}" for f in files)
                run_id = f"xdemo-{name}-{n}-{hashlib.sha256(listing.encode()).hexdigest()[:12]}"
                options = IngestOptions(
                    inputs, "files", f"raw.{name}", RecordConfig(source=name), include=include, exclude=exclude,
                    run_id=run_id,
                )  # fmt: skip
                ingest(spark, catalog, options)
            table = catalog.load_table(("raw", name))
            print(f"· raw.{name}: {record_count(table, table.current_snapshot().snapshot_id)} documents", flush=True)
    finally:
        spark.stop()


def prepare(home: Path, catalog) -> None:
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    names = list(corpora())
    if not (home / "tokenizer.json").is_file():
        trained = train_tokenizer(catalog, [f"raw.{n}" for n in names], 2048, max_bytes=6 << 20)
        (home / "tokenizer.json").write_text(trained.text)
    spec = {
        "name": "experiments-demo",
        "seed": 7,
        "components": [{"name": n, "table": f"raw.{n}", "weight": 1.0, "heldout_fraction": 0.05} for n in names],
    }
    pin(catalog, spec_from_dict(spec)).save(home / "base-manifest.json")
    (home / "proxy-train.toml").write_text(TRAIN_CONFIG.format(home=home))
    (home / "search.toml").write_text(
        f'name = "xdemo"\nconfig = "{home / "proxy-train.toml"}"\ntrials = {TRIALS}\nseed = 0\nmin_weight = 0.02\n'
        "[resources]\ncpus = 1\n"
    )


def main() -> int:
    os.environ.setdefault("FACTORY_HOME", str(Path(".factory/experiments-demo").resolve()))
    os.environ.setdefault("FACTORY_SPARK_MASTER", "local[2]")
    from experiments.mixture_search import (
        format_search,
        format_verification,
        load_search_spec,
        run_search,
        verify_optimum,
        write_winner,
    )
    from experiments.report import format_ranking
    from experiments.sweep import ray_session, sweep_dir_of
    from lakehouse.catalog import factory_home, load_catalog
    from trainer.lineage import format_lineage, read_lineage

    started = time.monotonic()
    home = factory_home()
    catalog = load_catalog()
    print(f"== ingest (lakehouse {home}) ==", flush=True)
    ingest_components(catalog)
    print("== tokenizer and base manifest ==", flush=True)
    prepare(home, catalog)
    spec = load_search_spec(home / "search.toml")
    resume = (sweep_dir_of(spec.search_id) / "tune").is_dir()
    print(f"== mixture search: {TRIALS} proxies on Ray Tune (2 CPUs){', resumed' if resume else ''} ==", flush=True)
    with ray_session(None, 2):
        result = run_search(spec, resume=resume, num_cpus=2)
        manifest, spec_path = write_winner(catalog, result, spec, str(home / "base-manifest.json"),
                                           home / "chosen-manifest.json")  # fmt: skip
        optimum_dir = sweep_dir_of(f"{spec.search_id}-optimum")
        row = None
        if (optimum_dir / "tune").is_dir():  # trained before: its row is in the table
            from experiments.trials_table import read_trials

            row = next(iter(read_trials(catalog, f"{spec.search_id}-optimum")), None)
        else:
            print("== the chosen mixture, trained fresh ==", flush=True)
            row = verify_optimum(spec, result, home / "chosen-manifest.json", num_cpus=2)
    print()
    print(format_ranking(result.rows))
    print()
    print(format_search(result))
    print(format_verification(result, row))
    print(f"wrote {spec_path} and {home / 'chosen-manifest.json'} ({manifest.fingerprint})")
    if row is not None:
        print(f"\n· factory lineage {row['run_dir']}")
        print(format_lineage(read_lineage(row["run_dir"], to_print=True)))
    print(f"\nexperiments demo: {time.monotonic() - started:.0f} s (load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
