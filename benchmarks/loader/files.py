"""Loader benchmark by file count: time to first batch and memory for the same documents held in
10, 1,000 and 10,000 files (issue 19, "No small files").

    .venv/bin/python benchmarks/loader/files.py                  # local and ray, 10 / 1,000 / 10,000 files
    .venv/bin/python benchmarks/loader/files.py --backends local --counts 10,10000
    .venv/bin/python benchmarks/loader/files.py --home DIR   # again over DIR's tables (another version of the code)

One command, same machine, same documents: the first 2,000 characters of each source file of the
Python standard library (cycled to ``--docs`` documents), written as N Parquet files straight
through pyarrow and committed to an Iceberg table with one ``add_files`` (so a table of 10,000
tiny files costs one commit, as a job's would), then pinned as a one-component manifest. Each
measurement runs in a fresh process: ``StreamingLoader`` construction, the first batch, then
``--batches`` more; it prints seconds to construct, seconds from construction to the first
batch (and the CPU seconds this process spent on it, steadier than wall time on a shared
machine), the tokens/s of the batches after it (about one pass over the table), and peak resident memory of the loader's process
(and of Ray's workers, with ``backend="ray"``). The baseline is the 10-file table: each row's
ratio to it shows what the file count costs.

Its tables are written here, not by `factory` commands, because the file count is the subject:
the factory's jobs and ``factory compact`` write few files of a target size
(lakehouse/file_sizes.py), so none of them writes the 10,000-file table whose cost this
measures. The loader's figures on the tables the jobs write are benchmarks/loader/run.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.loader.run import RssSampler, run_child  # noqa: E402
from benchmarks.user_path import stdlib_texts  # noqa: E402

DOC_CHARS = 2000


def write_table(catalog, name: str, texts: list[str], files: int) -> dict:
    """``len(texts)`` documents in ``files`` Parquet files, committed in one snapshot."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from lakehouse.catalog import ensure_table
    from lakehouse.schemas import DOCUMENT_SCHEMA, arrow_schema

    table = ensure_table(catalog, ("bench", name), DOCUMENT_SCHEMA)
    schema = arrow_schema(DOCUMENT_SCHEMA)
    folder = Path(table.location().removeprefix("file://"), "data")
    folder.mkdir(parents=True, exist_ok=True)
    started, paths = time.perf_counter(), []
    per_file = -(-len(texts) // files)
    for f, start in enumerate(range(0, len(texts), per_file)):
        rows = [
            {"doc_id": hashlib.sha256(f"{start + i}".encode()).hexdigest()[:32], "source": "code", "text": text,
             "path": None, "lang": "python", "n_bytes": len(text.encode())}
            for i, text in enumerate(texts[start : start + per_file])
        ]  # fmt: skip
        path = folder / f"part-{f:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")
        paths.append(f"file://{path}")
    written = time.perf_counter() - started
    table.add_files(paths, check_duplicate_files=False)
    return {"files": len(paths), "write_s": written, "commit_s": time.perf_counter() - started - written}


def prepare(home: Path, counts: list[int], docs: int, vocab: int) -> dict:
    from pyiceberg.catalog import load_catalog

    from lakehouse.catalog import embedded_catalog_properties
    from mixtures.pin import pin
    from mixtures.spec import spec_from_dict
    from streaming_loader.tokenizer_train import train_tokenizer

    (home / "warehouse").mkdir(parents=True, exist_ok=True)
    catalog = load_catalog("bench", **embedded_catalog_properties(home))
    library = [text[:DOC_CHARS] for _, text in stdlib_texts() if text.strip()]
    texts = [library[i % len(library)] for i in range(docs)]
    tables = {}
    for n in counts:
        tables[n] = write_table(catalog, f"files{n}", texts, n)
        started = time.perf_counter()
        spec = spec_from_dict({"seed": 1, "components": [{"name": "code", "table": f"bench.files{n}", "weight": 1}]})
        pin(catalog, spec).save(home / f"files{n}.json")
        tables[n]["pin_s"] = time.perf_counter() - started
        tables[n]["manifest_bytes"] = (home / f"files{n}.json").stat().st_size
    trained = train_tokenizer(catalog, [f"bench.files{counts[0]}"], vocab, max_bytes=4 << 20)
    (home / "tokenizer.json").write_text(trained.text)
    return {"tables": tables, "text_bytes": sum(len(t.encode()) for t in texts)}


def measure(home: Path, backend: str, files: int, batches: int, seq_len: int, batch: int, window: int) -> dict:
    from streaming_loader import StreamingLoader

    raylet = None
    if backend == "ray":
        import ray

        ray.init(include_dashboard=False, logging_level="WARNING")
        raylet = ray._private.worker._global_node.all_processes["raylet"][0].process.pid
    sampler = RssSampler(raylet)
    sampler.start()
    cpu, started = time.process_time(), time.perf_counter()
    loader = StreamingLoader.from_manifest(
        home / f"files{files}.json", home / "tokenizer.json", seq_len=seq_len, global_batch_size=batch,
        backend=backend, shuffle_window=window, log_interval_s=0,
    )  # fmt: skip
    constructed = time.perf_counter() - started
    next(loader)
    first = time.perf_counter() - started
    first_cpu = time.process_time() - cpu  # this process's threads: on a shared machine, steadier than wall time
    after = time.perf_counter()
    for _ in range(batches):
        next(loader)
    rest = time.perf_counter() - after
    sampler.done.set()
    sampler.join()
    loader.close()
    return {
        "backend": backend,
        "files": files,
        "construct_s": constructed,
        "first_batch_s": first,
        "first_batch_cpu_s": first_cpu,
        "tokens_per_s": batches * seq_len * batch / rest if rest else None,
        "peak_rss_mb": sampler.peak_self / 2**20,
        "peak_ray_workers_rss_mb": sampler.peak_workers / 2**20,
    }


def measure_planning(home: Path, files: int, reps: int = 3) -> dict:
    """CPU seconds of the loader's steps that depend on the file count, median of ``reps``:
    reading the manifest, its fingerprint asked again, checking the files exist, one unit's plan."""
    import statistics

    from lakehouse.parquet import file_io_properties, missing_files
    from mixtures.manifest import Manifest
    from streaming_loader.plan import StreamPlan

    cpu, found = time.process_time, {"load": [], "fingerprint": [], "missing": [], "unit": []}
    for _ in range(reps):
        started = cpu()
        manifest = Manifest.load(home / f"files{files}.json")
        found["load"].append(cpu() - started)
        started = cpu()
        _ = manifest.fingerprint
        found["fingerprint"].append(cpu() - started)
        started = cpu()
        missing_files([f.path for f in manifest.components[0].files], file_io_properties(None))
        found["missing"].append(cpu() - started)
        plan = StreamPlan.from_manifest(manifest, 16, 64, "train")
        units = [u for _, u in zip(range(201), plan.units_from(0, 0, 0, 0), strict=False)]
        plan.rows(units[0])
        started = cpu()
        for unit in units[1:]:
            plan.rows(unit)
        found["unit"].append((cpu() - started) / (len(units) - 1))
    return {"files": files, **{k: statistics.median(v) for k, v in found.items()}}


def report(results: dict) -> str:
    lines = [
        f"{results['setup']['text_bytes'] / 1e6:.1f} MB of text in {results['settings']['docs']} documents; "
        f"seq_len {results['settings']['seq_len']}, global batch {results['settings']['batch']}",
        f"{'files':>6} {'write s':>8} {'commit s':>9} {'pin s':>6} {'manifest KB':>12}",
    ]
    for n, t in results["setup"]["tables"].items():
        lines.append(
            f"{n:>6} {t['write_s']:>8.1f} {t['commit_s']:>9.1f} {t['pin_s']:>6.1f} {t['manifest_bytes'] / 1e3:>12.0f}"
        )
    lines += ["", "CPU seconds, median of 3: read the manifest, its fingerprint again, check files, plan one unit"]
    for p in results["planning"]:
        lines.append(
            f"{p['files']:>6} files: load {p['load']:.3f}  fingerprint {p['fingerprint']:.3f}  "
            f"missing_files {p['missing']:.3f}  unit {p['unit'] * 1e3:.2f} ms"
        )
    lines += [
        "",
        f"{'backend':8} {'files':>6} {'construct':>10} {'1st batch':>10} {'vs 10':>6} {'CPU-s':>6} {'tokens/s':>10} "
        f"{'RSS MB':>7} {'vs 10':>6} {'workers MB':>11}",
    ]
    for m in results["measurements"]:
        base = next(b for b in results["measurements"] if b["backend"] == m["backend"])
        lines.append(
            f"{m['backend']:8} {m['files']:>6} {m['construct_s']:>9.2f}s {m['first_batch_s']:>9.2f}s "
            f"{m['first_batch_s'] / base['first_batch_s']:>6.2f} {m.get('first_batch_cpu_s', 0):>6.2f} "
            f"{m['tokens_per_s'] or 0:>10,.0f} "
            f"{m['peak_rss_mb']:>7.0f} {m['peak_rss_mb'] / base['peak_rss_mb']:>6.2f} "
            f"{m['peak_ray_workers_rss_mb']:>11.0f}"
        )
    return "\n".join(lines)


def _child(home: Path, common: list[str], *args: str) -> dict:
    """One measurement in a fresh process (this file, ``--child``)."""
    return run_child(home, common, *args, script=__file__)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="working folder (default: a fresh temporary one)")
    parser.add_argument("--counts", default="10,1000,10000", help="file counts, comma-separated (first: baseline)")
    parser.add_argument("--docs", type=int, default=10_000, help="documents in every table")
    parser.add_argument("--backends", default="local,ray", help="comma-separated: local, ray")
    parser.add_argument(
        "--batches", type=int, default=150,
        help="batches timed after the first (150: about one pass over the default table, read-ahead included)",
    )  # fmt: skip
    parser.add_argument("--vocab", type=int, default=4096, help="tokenizer vocabulary")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=16, help="global batch size (sequences)")
    parser.add_argument("--shuffle-window", type=int, default=64)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.child[0] == "planning":
        print(json.dumps(measure_planning(args.home, int(args.child[1]))))
        return 0
    if args.child:
        backend, files = args.child
        result = measure(args.home, backend, int(files), args.batches, args.seq_len, args.batch, args.shuffle_window)
        print(json.dumps(result))
        return 0

    counts = [int(c) for c in args.counts.split(",")]
    home = args.home or Path(tempfile.mkdtemp(prefix="loader-files-"))
    print(f"working in {home} on {os.cpu_count()} CPU(s); load {os.getloadavg()[0]:.1f}", flush=True)
    if (home / "setup.json").exists():  # the tables of an earlier run (e.g. to compare two versions of the code)
        setup = json.loads((home / "setup.json").read_text())
        setup["tables"] = {int(n): t for n, t in setup["tables"].items()}
    else:
        setup = prepare(home, counts, args.docs, args.vocab)
        (home / "setup.json").write_text(json.dumps(setup))
    print(json.dumps(setup["tables"]), flush=True)
    common = ["--batches", str(args.batches), "--seq-len", str(args.seq_len), "--batch", str(args.batch)]
    common += ["--shuffle-window", str(args.shuffle_window)]
    planning = [_child(home, common, "planning", str(n)) for n in counts]
    measurements = []
    for backend in args.backends.split(","):
        for n in counts:
            measurements.append(_child(home, common, backend, str(n)))
            print(json.dumps(measurements[-1]), flush=True)
    results = {
        "setup": setup,
        "settings": {k: str(v) for k, v in vars(args).items()} | {"cpus": os.cpu_count()},
        "planning": planning,
        "measurements": measurements,
    }
    (home / "files-results.json").write_text(json.dumps(results, indent=2))
    print()
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
