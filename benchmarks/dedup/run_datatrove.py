"""datatrove's MinHash deduplication, its four stages with the local executor, as its example has it.

    python -m benchmarks.dedup.run_datatrove CORPUS_DIR WORK_DIR --bands 9 --rows 13 --workers 2

Stage 1 signatures (``tasks=workers``, one task per JSONL shard group), stage 2 buckets (one
task per band), stage 3 clusters (one task), stage 4 filter (``tasks=workers``), writing the
kept documents and the removed ones (both with their cluster id) as gzipped JSONL.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus")
    parser.add_argument("work")
    parser.add_argument("--bands", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter

    config = MinhashConfig(n_grams=args.ngram, num_buckets=args.bands, hashes_per_bucket=args.rows)
    work = args.work.rstrip("/")

    def reader():
        return JsonlReader(args.corpus, glob_pattern="shard-*.jsonl", text_key="text", id_key="id")

    stage1 = LocalPipelineExecutor(
        pipeline=[reader(), MinhashDedupSignature(output_folder=f"{work}/signatures", config=config)],
        tasks=args.workers,
        workers=args.workers,
        logging_dir=f"{work}/logs/signatures",
    )
    stage2 = LocalPipelineExecutor(
        pipeline=[
            MinhashDedupBuckets(input_folder=f"{work}/signatures", output_folder=f"{work}/buckets", config=config)
        ],
        tasks=config.num_buckets,
        workers=args.workers,
        logging_dir=f"{work}/logs/buckets",
        depends=stage1,
    )
    stage3 = LocalPipelineExecutor(
        pipeline=[
            MinhashDedupCluster(
                input_folder=f"{work}/buckets", output_folder=f"{work}/remove_ids", config=config, save_cluster_id=True
            )
        ],
        tasks=1,
        logging_dir=f"{work}/logs/clusters",
        depends=stage2,
    )
    stage4 = LocalPipelineExecutor(
        pipeline=[
            reader(),
            MinhashDedupFilter(
                input_folder=f"{work}/remove_ids",
                exclusion_writer=JsonlWriter(f"{work}/removed"),
                load_cluster_ids=True,
            ),
            JsonlWriter(f"{work}/output"),
        ],
        tasks=args.workers,
        workers=args.workers,
        logging_dir=f"{work}/logs/filter",
        depends=stage3,
    )
    start = time.monotonic()
    stage4.run()
    print(f"datatrove stages done in {time.monotonic() - start:.1f}s")


if __name__ == "__main__":
    main()
