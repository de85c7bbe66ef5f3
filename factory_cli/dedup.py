"""``factory dedup``: its arguments, and the result printed."""

from __future__ import annotations

import argparse

from factory_cli.arguments import add_run_id_argument
from lakehouse.catalog import load_catalog
from pipelines.dedup import DedupOptions, DedupResult, dedup, resolve_inputs
from pipelines.dedup_stages import VERIFIED_FN_WEIGHT, DedupConfig
from pipelines.minhash import MinHashConfig
from pipelines.shingles import UNITS, ShingleConfig
from pipelines.spark_session import get_spark


def add_arguments(parser: argparse.ArgumentParser, _name: str = "dedup") -> None:
    parser.add_argument(
        "--input", dest="inputs", required=True, nargs="+", action="extend", metavar="REF",
        help="document table(s) to deduplicate together: NS.TABLE or NS.TABLE@REF (repeatable)",
    )  # fmt: skip
    parser.add_argument("--output", required=True, metavar="NS.TABLE", help="table for the kept documents")
    parser.add_argument("--clusters", metavar="NS.TABLE", help="table for the clusters (default: <output>_clusters)")
    parser.add_argument(
        "--against", metavar="REF", help="a published snapshot: remove input documents that duplicate any of it"
    )
    parser.add_argument("--threshold", type=float, default=0.8, help="Jaccard similarity of duplicates (default 0.8)")
    parser.add_argument("--num-perm", type=int, default=128, help="MinHash hash functions (default 128)")
    parser.add_argument("--bands", type=int, help="LSH bands (default: chosen from --threshold and --num-perm)")
    parser.add_argument("--rows", type=int, help="LSH rows per band (with --bands)")
    parser.add_argument("--ngram", type=int, default=5, help="tokens (or characters) per shingle (default 5)")
    parser.add_argument("--shingle", choices=UNITS, default="word", help="word n-grams (default) or character n-grams")
    parser.add_argument(
        "--min-shingles", type=int, default=5,
        help="documents with fewer distinct shingles are deduplicated exactly only (default 5)",
    )  # fmt: skip
    parser.add_argument(
        "--fn-weight", type=float,
        help="weight of false negatives against false positives when choosing bands × rows "
        f"(default {VERIFIED_FN_WEIGHT} with --verify, 0.5 without, as datasketch)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1, help="seed of the MinHash functions (default 1)")
    parser.add_argument(
        "--verify", action=argparse.BooleanOptionalAction, default=True,
        help="check candidate pairs with exact Jaccard before clustering (default: on)",
    )  # fmt: skip
    add_run_id_argument(parser)


def options_from_args(args: argparse.Namespace) -> DedupOptions:
    config = DedupConfig(
        shingles=ShingleConfig(unit=args.shingle, n=args.ngram, min_shingles=args.min_shingles),
        minhash=MinHashConfig(
            threshold=args.threshold,
            num_perm=args.num_perm,
            bands=args.bands,
            rows=args.rows,
            seed=args.seed,
            fn_weight=args.fn_weight if args.fn_weight is not None else (VERIFIED_FN_WEIGHT if args.verify else 0.5),
        ),
        verify=args.verify,
    )
    return DedupOptions(
        inputs=args.inputs,
        output=args.output,
        clusters=args.clusters,
        against=args.against,
        config=config,
        run_id=args.run_id,
    )


def run(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    catalog = load_catalog(args.catalog)
    resolve_inputs(catalog, opts)  # a bad reference fails here, before Spark starts
    result = dedup(get_spark("factory-dedup"), catalog, opts)
    print(format_result(result))
    return 0


def format_result(result: DedupResult) -> str:
    s = result.stats
    lines = [
        f"run {result.run_id}" + (" (already committed: nothing done)" if result.already_committed else ""),
        f"  {result.documents.table}@{result.documents.snapshot_id}: kept {s.get('kept', 0)} of "
        f"{s.get('documents-in', 0)} documents",
        f"  {result.clusters.table}@{result.clusters.snapshot_id}: {s.get('clusters', 0)} duplicate cluster(s), "
        f"largest {s.get('largest-cluster', 0)}",
        f"  removed: {s.get('exact-duplicates', 0)} exact and {s.get('near-duplicates', 0)} near duplicate(s)"
        + (
            f", {s['against-duplicates']} of them already in the --against snapshot"
            if s.get("against-duplicates")
            else ""
        ),
        f"  candidate pairs {s.get('candidate-pairs', 0)}, verified {s.get('verified-pairs', 0)}; "
        f"{s.get('short-documents', 0)} document(s) too short for near dedup (exact only)",
    ]
    return "\n".join(lines)
