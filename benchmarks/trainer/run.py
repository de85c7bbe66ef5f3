"""Trainer throughput: tokens/s, MFU and the fraction of each step spent waiting for data.

    python benchmarks/trainer/run.py --config configs/demo-train.toml --nproc 2 --steps 20
    python benchmarks/trainer/run.py --config configs/1b.toml --nproc 8 --steps 50   # on GPUs

It runs `factory train` for a fresh run directory and reads the run's metrics.jsonl, skipping
the first steps (start-up, compilation). MFU = achieved model FLOP/s over the devices' peak:
the peak is looked up for known GPUs (bf16 dense) or given with --peak-tflops (e.g. for a CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from trainer.config import ModelConfig
from trainer.model import Transformer

# Dense bf16 peak TFLOP/s per device, from the vendors' data sheets.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0}


def device_peak() -> tuple[str, float | None]:
    if not torch.cuda.is_available():
        return "cpu", None
    name = torch.cuda.get_device_name()
    return name, next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the figures")
    parser.add_argument("--peak-tflops", type=float, help="per-device peak, for MFU where it is not known")
    parser.add_argument("--set", action="append", default=[])
    args = parser.parse_args()

    run_dir = Path(tempfile.mkdtemp(prefix="bench-train-"))
    overrides = [f"run.dir='{run_dir}'", f"train.steps={args.steps}", "checkpoint.every=0", "eval.every=0", *args.set]
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
        "params": model.num_params(),
        "seq_len": seq_len,
        "global_batch_size": resolved["data"]["global_batch_size"],
        "steps_measured": len(steps),
        "tokens_per_s": round(tokens_per_s, 1),
        "model_tflops": round(flops / 1e12, 4),
        "mfu": round(mfu, 4) if mfu is not None else None,
        "data_wait_frac": round(statistics.mean(r["data_wait_frac"] for r in steps), 4),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
