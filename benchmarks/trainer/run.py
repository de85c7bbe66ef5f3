"""Trainer throughput: tokens/s per GPU, MFU, the fraction of each step spent waiting for data, peak memory.

    # the GPU figure: the 1B config on one H200, bf16 and torch.compile on, one command (< 8 min)
    PYTHONPATH=. python benchmarks/trainer/run.py --config configs/1b.toml --steps 30 \
        --set data.global_batch_size=64
    # tiny, on CPU (what the test runs)
    PYTHONPATH=. python benchmarks/trainer/run.py --config configs/demo-train.toml --steps 4 --mb 1 --vocab 512

Without --manifest it first makes its data as a user does, with the factory's own commands and
their default options (benchmarks/user_path.py): --mb MB of this machine's Python standard library
as JSON lines, `factory ingest`, `factory filter --config code`, `factory tokenizer train` of
--vocab tokens on the filtered table and `factory mix pin` of it (1 % held out), in --data (a
fresh folder by default; one that holds data made with the same --mb and --vocab is used as it
is). That takes Spark: a GPU machine without it is sent the folder made here
(benchmarks/device/data.sh, run by prepare.sh; run.sh passes its --data), so both train on the
same table. Then `factory train` for a fresh run directory, through the real streaming
loader, and the run's metrics.jsonl, leaving out the first --warmup steps (start-up,
torch.compile). MFU = model FLOP/s (6 per matrix-product weight per token plus attention's 12·L·d·T,
``Transformer.flops_per_token``) over the devices' peak: looked up for known GPUs (bf16 dense,
989 TFLOP/s for the H100/H200) or given with --peak-tflops. Peak memory is the device's
allocated memory on a GPU, the process's RSS on a CPU (rank 0).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from trainer.config import ModelConfig
from trainer.model import Transformer

# The data it makes by default (benchmarks/device/data.sh makes the same for the GPU machine).
DEFAULT_MB, DEFAULT_VOCAB = 24, 32000
# Dense bf16 peak TFLOP/s per device, from the vendors' data sheets.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0}


def device_peak() -> tuple[str, float | None]:
    if not torch.cuda.is_available():
        return "cpu", None
    name = torch.cuda.get_device_name()
    return name, next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def prepare_data(home: Path, megabytes: int, vocab: int) -> tuple[Path, Path]:
    """In ``home``, on the user's path (benchmarks/user_path.py), each command with its default options:
    ``megabytes`` of the standard library as JSON lines, ``factory ingest``, ``factory filter
    --config code``, ``factory tokenizer train`` of ``vocab`` tokens on the filtered table, and
    ``factory mix pin`` of it; the manifest and the tokenizer. A ``home`` that already holds them,
    made with the same sizes (``benchmarks/device/data.sh`` makes them for a machine without
    Spark), is used as it is."""
    from benchmarks.user_path import factory, ingest_corpus, pin_table, write_stdlib_corpus

    manifest, tokenizer, made = home / "manifest.json", home / "tokenizer.json", home / "data.json"
    wanted = {"mb": megabytes, "vocab": vocab}
    if made.exists():
        found = json.loads(made.read_text())
        if found != wanted:
            print(
                f"error: {home} holds data made with --mb {found['mb']} --vocab {found['vocab']}, not "
                f"--mb {megabytes} --vocab {vocab}: give those, or another --data folder",
                file=sys.stderr,
            )
            raise SystemExit(2)
        return manifest, tokenizer
    lakehouse = home / "factory"
    write_stdlib_corpus(home / "corpus", megabytes=megabytes)
    ingest_corpus(home / "corpus", "raw.code", home=lakehouse)
    factory("filter", "--input", "raw.code", "--output", "filtered.code", "--config", "code", home=lakehouse)
    factory(
        "tokenizer", "train", "--input", "filtered.code", "--vocab-size", str(vocab), "--output", str(tokenizer),
        home=lakehouse,
    )  # fmt: skip
    pin_table(home, "manifest", "filtered.code", home=lakehouse, heldout_fraction=0.01)
    shutil.rmtree(home / "corpus")  # in the table now; a device machine is sent the folder without it
    made.write_text(json.dumps(wanted))
    return manifest, tokenizer


def main() -> int:
    began = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the figures")
    parser.add_argument("--peak-tflops", type=float, help="per-device peak, for MFU where it is not known")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--manifest", help="train on this pinned manifest (with --tokenizer) instead of own data")
    parser.add_argument("--tokenizer", help="the tokenizer.json that goes with --manifest")
    parser.add_argument(
        "--data", type=Path, help="where to make the data when there is no --manifest, or find it made (default: fresh)"
    )
    parser.add_argument("--mb", type=int, default=DEFAULT_MB, help="MB of source to make when there is no --manifest")
    parser.add_argument(
        "--vocab", type=int, default=DEFAULT_VOCAB, help="tokenizer size to train when there is no --manifest"
    )
    args = parser.parse_args()

    run_dir = Path(tempfile.mkdtemp(prefix="bench-train-"))
    data = []
    if args.manifest:
        data = [f"data.manifest='{args.manifest}'", *([f"data.tokenizer='{args.tokenizer}'"] if args.tokenizer else [])]
    else:
        started = time.perf_counter()
        data_home = (args.data or run_dir.parent / f"{run_dir.name}-data").resolve()
        manifest, tokenizer = prepare_data(data_home, args.mb, args.vocab)
        print(f"data: {args.mb} MB pinned, tokenizer of {args.vocab} trained in {time.perf_counter() - started:.1f} s")
        data = [f"data.manifest='{manifest}'", f"data.tokenizer='{tokenizer}'"]
    overrides = [f"run.dir='{run_dir}'", f"train.steps={args.steps}", "checkpoint.every=0", "eval.every=0"]
    overrides += [*data, *args.set]
    command = [sys.executable, "-m", "factory_cli.main", "train", "--config", args.config, "--nproc", str(args.nproc)]
    for override in overrides:
        command += ["--set", override]
    if subprocess.run(command).returncode != 0:
        return 1

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train" and r["step"] > args.warmup]
    resolved = json.loads((run_dir / "config.resolved.json").read_text())
    model_cfg = ModelConfig(**{k: v for k, v in resolved["model"].items()})
    with torch.device("meta"):
        model = Transformer(model_cfg)
    seq_len = resolved["data"]["seq_len"]
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in steps)
    flops = model.flops_per_token(seq_len) * tokens_per_s
    device, peak = device_peak()
    peak = args.peak_tflops or peak
    mfu = flops / (peak * 1e12 * args.nproc) if peak else None
    result = {
        "device": device,
        "ranks": args.nproc,
        "dtype": resolved["train"]["dtype"],
        "compile": resolved["train"]["compile"],
        "params": model.num_params(),
        "seq_len": seq_len,
        "global_batch_size": resolved["data"]["global_batch_size"],
        "steps_measured": len(steps),
        "tokens_per_s": round(tokens_per_s, 1),
        "tokens_per_s_per_gpu": round(tokens_per_s / args.nproc, 1),
        "model_tflops": round(flops / 1e12, 4),
        "mfu": round(mfu, 4) if mfu is not None else None,
        "data_wait_frac": round(statistics.mean(r["data_wait_frac"] for r in steps), 4),
        "peak_mem_gb": round(max(r["peak_mem_gb"] for r in steps), 2),
        "wall_s": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
