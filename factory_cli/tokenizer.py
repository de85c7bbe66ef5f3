"""``factory tokenizer train --input REF… --vocab-size N --output FILE``: a BPE tokenizer from pinned data."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, _name: str = "tokenizer") -> None:
    sub = parser.add_subparsers(dest="tokenizer_command", required=True, metavar="SUBCOMMAND")
    train = sub.add_parser(
        "train",
        help="train a byte-level BPE tokenizer on pinned snapshots",
        description="Train a byte-level BPE tokenizer (HF tokenizers) on the text of pinned snapshots. The "
        "snapshot ids it read are recorded inside the tokenizer.json (model.factory). The end-of-document "
        "token is <|endoftext|>.",
    )
    train.add_argument("--input", nargs="+", required=True, metavar="NS.TABLE[@REF]", help="tables to train on")
    train.add_argument("--vocab-size", type=int, required=True, metavar="N", help="vocabulary size")
    train.add_argument("--output", "-o", required=True, metavar="FILE", help="where to write tokenizer.json")
    train.add_argument(
        "--max-bytes", type=int, default=64 << 20, metavar="B",
        help="text to train on, shared evenly among the inputs (default: 64 MiB)",
    )  # fmt: skip
    train.add_argument("--min-frequency", type=int, default=2, metavar="N", help="least count of a merge (default 2)")
    train.add_argument("--catalog", metavar="NAME", default=argparse.SUPPRESS, help="pyiceberg catalog to use")
    train.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only print results and errors"
    )


def run(args: argparse.Namespace) -> int:
    from lakehouse.catalog import load_catalog
    from lakehouse.local_files import check_output_file, write_atomically
    from streaming_loader.tokenizer_train import train_tokenizer

    output = check_output_file(args.output)
    trained = train_tokenizer(
        load_catalog(args.catalog), args.input, args.vocab_size, max_bytes=args.max_bytes,
        min_frequency=args.min_frequency,
    )  # fmt: skip
    write_atomically(output, trained.text)
    sources = ", ".join(f"{i['table']}@{i['snapshot_id']}" for i in trained.inputs)
    print(f"trained on {trained.documents} documents ({trained.bytes / 1e6:.1f} MB) of {sources}")
    print(f"wrote {output} (vocabulary {args.vocab_size})")
    return 0
