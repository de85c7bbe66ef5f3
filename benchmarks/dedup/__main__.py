"""Our dedup job vs datatrove's MinHash pipeline: same corpus, same cores, one run.

    .venv/bin/python -m benchmarks.dedup --mb 200     # the figures in docs/benchmarks.md
    .venv/bin/python -m benchmarks.dedup --mb 20      # a quick look

Both run as fresh processes on ``--cores`` cores (ours: ``factory dedup`` on Spark
``local[N]``; datatrove: its four stages with ``LocalPipelineExecutor(workers=N)``), timed end to
end, start-up included. Accuracy of both is measured against the exact ground truth of
``truth.py`` (every pair, brute force with pruning) as pairwise precision, recall and F1 of
the clusters. The corpus is built once under ``--workdir``: JSONL shards for datatrove, and for
us the same shards ingested by ``factory ingest`` with its default options (only the JSON fields
holding each record's id and path are named), so our job reads the table layout a user's
ingest writes, not one tuned for it. Ingest is not timed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dedup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200, help="corpus size in MB of source code (default 200)")
    parser.add_argument("--cores", type=int, default=2, help="cores given to each tool (default 2)")
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard threshold of both (default 0.8)")
    parser.add_argument("--workdir", type=Path, default=REPO / ".bench" / "dedup", help="corpus and outputs")
    parser.add_argument("--skip-datatrove", action="store_true", help="time only our job")
    args = parser.parse_args()

    from benchmarks.dedup.corpus import build

    label = f"{args.mb:g}MB"
    corpus = build(args.workdir / f"corpus-{label}", args.mb)
    stamp = time.strftime("%Y%m%d%H%M%S")
    results = [_run_ours(args, corpus, args.workdir / f"home-{label}", stamp)]
    if not args.skip_datatrove:
        results.append(_run_datatrove(args, corpus, args.workdir / f"datatrove-{label}-{stamp}"))
    truth_s = _score(results, corpus, args)
    _print_table(results, corpus, args.cores, truth_s)
    summary = {"corpus": {"documents": corpus.documents, "mb": corpus.megabytes}, "cores": args.cores,
               "threshold": args.threshold, "results": results}  # fmt: skip
    (args.workdir / f"results-{label}-{stamp}.json").write_text(json.dumps(summary, indent=2))
    return 0


def _run_ours(args: argparse.Namespace, corpus, home: Path, stamp: str) -> dict:
    env = {
        "FACTORY_HOME": str(home),
        "FACTORY_SPARK_MASTER": f"local[{args.cores}]",
        "FACTORY_SPARK_DRIVER_MEMORY": os.environ.get("FACTORY_SPARK_DRIVER_MEMORY", "4g"),
    }
    _ingest_once(corpus.folder, home, env)
    output = f"bench.dedup_{stamp}"
    seconds = _timed(
        [sys.executable, "-m", "factory_cli.main", "dedup", "--input", "bench.code", "--output", output,
         "--threshold", str(args.threshold), "--run-id", f"bench-{stamp}"],
        env,
    )  # fmt: skip
    return {"tool": "ours (factory dedup, Spark)", "seconds": seconds, "clusters": _our_clusters(home, output)}


def _run_datatrove(args: argparse.Namespace, corpus, work: Path) -> dict:
    from pipelines.minhash import optimal_bands

    bands, rows = optimal_bands(args.threshold, 128)  # datasketch's balance: datatrove does not verify
    seconds = _timed(
        [sys.executable, "-m", "benchmarks.dedup.run_datatrove", str(corpus.folder), str(work),
         "--bands", str(bands), "--rows", str(rows), "--workers", str(args.cores)],
        {},
    )  # fmt: skip
    tool = f"datatrove {_version('datatrove')} ({bands}x{rows})"
    return {"tool": tool, "seconds": seconds, "clusters": _datatrove_clusters(work)}


def _score(results: list[dict], corpus, args: argparse.Namespace) -> float:
    """Add throughput and accuracy against the exact ground truth to each result; the truth's seconds."""
    from benchmarks.dedup.corpus import read_records
    from benchmarks.dedup.truth import score
    from pipelines.dedup_stages import DedupConfig
    from pipelines.similarity import exact_clusters

    records = read_records(corpus.folder)
    start = time.monotonic()
    truth = exact_clusters([r["text"] for r in records], DedupConfig().shingles, args.threshold)
    truth_s = time.monotonic() - start
    ids = [r["id"] for r in records]
    for result in results:
        quality = score(ids, result.pop("clusters"), truth)
        result.update(
            docs_per_s=corpus.documents / result["seconds"],
            mb_per_s_per_core=corpus.megabytes / result["seconds"] / args.cores,
            precision=quality.precision,
            recall=quality.recall,
            f1=quality.f1,
            true_pairs=quality.true_pairs,
        )
    return truth_s


def _ingest_once(folder: Path, home: Path, env: dict[str, str]) -> None:
    marker = home / "ingested"
    if marker.exists():
        return
    command = [sys.executable, "-m", "factory_cli.main", "ingest", "--source", "code", "--format", "jsonl", str(folder),
               "--output", "bench.code", "--id-field", "id", "--path-field", "id", "--run-id", "bench-corpus", "-q"]  # fmt: skip
    subprocess.run(command, cwd=REPO, env={**os.environ, **env}, check=True)
    marker.write_text("bench.code\n")


def _timed(command: list[str], env: dict[str, str]) -> float:
    print(f"running: {' '.join(command[2:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    subprocess.run(command, cwd=REPO, env={**os.environ, **env}, check=True, stdout=sys.stderr)
    return time.monotonic() - start


def _our_clusters(home: Path, output: str) -> dict[str, str]:
    """Corpus id → cluster id, from the clusters table (doc_ids map back through ingest's rule)."""
    os.environ["FACTORY_HOME"] = str(home)
    from lakehouse.catalog import load_catalog

    catalog = load_catalog()
    clusters = catalog.load_table(("bench", f"{output.split('.')[1]}_clusters")).scan().to_arrow()
    docs = catalog.load_table(("bench", "code")).scan(selected_fields=("doc_id", "path")).to_arrow()
    path_of = dict(zip(docs.column("doc_id").to_pylist(), docs.column("path").to_pylist(), strict=True))
    return {
        path_of[doc_id]: cluster
        for doc_id, cluster, size in zip(
            clusters.column("doc_id").to_pylist(),
            clusters.column("cluster_id").to_pylist(),
            clusters.column("cluster_size").to_pylist(),
            strict=True,
        )
        if size > 1
    }


def _datatrove_clusters(work: Path) -> dict[str, int]:
    """Corpus id → datatrove's cluster id (``minhash_cluster_id``, -1 when alone) of kept and removed documents."""
    clusters = {}
    for name in ("output", "removed"):
        for path in sorted((work / name).glob("*.jsonl.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as lines:
                for line in lines:
                    doc = json.loads(line)
                    cluster = doc.get("metadata", {}).get("minhash_cluster_id", -1)
                    if cluster != -1:
                        clusters[doc["id"]] = cluster
    return clusters


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def _print_table(rows: list[dict], corpus, cores: int, truth_s: float) -> None:
    print(f"\ncorpus: {corpus.documents} Python files, {corpus.megabytes:.1f} MB; {cores} cores each; "
          f"ground truth (exact Jaccard, all pairs) in {truth_s:.0f}s: {rows[0]['true_pairs']} duplicate pairs")  # fmt: skip
    header = f"{'tool':<34} {'wall s':>8} {'docs/s':>9} {'MB/s/core':>10} {'precision':>10} {'recall':>8} {'F1':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['tool']:<34} {r['seconds']:>8.1f} {r['docs_per_s']:>9.1f} {r['mb_per_s_per_core']:>10.2f} "
            f"{r['precision']:>10.4f} {r['recall']:>8.4f} {r['f1']:>7.4f}"
        )
    if len(rows) == 2:
        print(f"\nthroughput ratio, ours / datatrove: {rows[1]['seconds'] / rows[0]['seconds']:.1f}x "
              f"(F1 {rows[0]['f1']:.4f} vs {rows[1]['f1']:.4f})")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
