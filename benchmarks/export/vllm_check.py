"""vLLM serves an exported checkpoint: its greedy completions against ours (``evals.generate``).

    # on a GPU machine with vLLM installed (the device tool: bash benchmarks/device/run.sh vllm)
    PYTHONPATH=. python benchmarks/export/vllm_check.py [--checkpoint CKPT] [--dtype float32|bfloat16]

Without --checkpoint it trains its own first: a tiny model (the demo's config,
``configs/demo-train.toml``, for --steps steps in one process) on --mb MB of this machine's Python
standard library with a BPE tokenizer of --vocab tokens, made with the factory's commands as
``benchmarks/trainer/run.py`` makes them, in --data (which takes Spark: on a GPU machine without
it, the folder ``benchmarks/device/data.sh`` made here, which run.sh passes). Then ``factory export --format hf`` into a temporary folder, vLLM's offline
``LLM(model=DIR)`` with greedy ``SamplingParams``, and ``evals.generate.generate`` on our model
from the same checkpoint, on the same prompts. Prints each prompt's two completions and where they
part, and a JSON summary; exits 0 when every completion is the same, 1 otherwise, and 0 with a
line saying why when vLLM is not importable here or there is no GPU (nothing was compared).

float32 by default, our weights as trained, so equal logits give equal greedy tokens. In bfloat16
(``--dtype bfloat16``, for a vLLM whose attention refuses float32) both sides round differently,
and two candidates within bfloat16's precision of each other may be ordered either way: a
completion that parts late is then rounding, one that parts at its first token is not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The data it trains on by default (benchmarks/device/data.sh makes the same for the GPU machine).
DEFAULT_MB, DEFAULT_VOCAB = 4, 8192
PROMPTS = ["def fibonacci(n):\n", "import os\n\n\ndef main():\n", "class Stack:\n    def push(self, item):\n", "# "]


def train_checkpoint(home: Path, data: Path | None, steps: int, megabytes: int, vocab: int) -> Path:
    """A tiny model trained for ``steps`` steps on the data in ``data`` (made there if need be, by
    default under ``home``); its checkpoint."""
    from benchmarks.trainer.run import prepare_data

    manifest, tokenizer = prepare_data((data or home / "data").resolve(), megabytes, vocab)
    run_dir = home / "run"
    overrides = [f"run.dir='{run_dir}'", f"data.manifest='{manifest}'", f"data.tokenizer='{tokenizer}'"]
    overrides += [f"train.steps={steps}", "eval.every=0", "checkpoint.every=0", "data.num_shards=0"]
    command = [sys.executable, "-m", "trainer.train", "--config", "configs/demo-train.toml"]
    for override in overrides:
        command += ["--set", override]
    subprocess.run(command, check=True)
    return run_dir


def ours(checkpoint: Path, prompts: list[str], max_new_tokens: int, dtype: str) -> list[str]:
    import torch

    from evals.checkpoint_model import load_checkpoint
    from evals.generate import generate

    loaded = load_checkpoint(checkpoint)
    model = loaded.model.to(getattr(torch, dtype))
    texts = generate(model, loaded.tokenizer, prompts, samples=1, max_new_tokens=max_new_tokens, device=loaded.device)
    return [sample[0] for sample in texts]


def vllm_completions(folder: Path, prompts: list[str], max_new_tokens: int, dtype: str) -> list[str]:
    from vllm import LLM, SamplingParams

    # enforce_eager: no CUDA graphs to capture for a model this size; a small share of the GPU's memory.
    llm = LLM(model=str(folder), dtype=dtype, enforce_eager=True, gpu_memory_utilization=0.2, seed=0)
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_new_tokens))
    return [output.outputs[0].text for output in outputs]


def parting(a: str, b: str) -> int | None:
    """The first character where ``a`` and ``b`` differ; None when they are equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="a checkpoints/step-N folder or run folder (default: train one)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40, help="training steps of the model it trains")
    parser.add_argument("--data", type=Path, help="where its training data is made, or found made (default: fresh)")
    parser.add_argument("--mb", type=int, default=DEFAULT_MB, help="MB of source to train it on")
    parser.add_argument("--vocab", type=int, default=DEFAULT_VOCAB, help="its tokenizer's size (the demo's)")
    args = parser.parse_args()

    if importlib.util.find_spec("vllm") is None:
        print("skipped: vllm is not importable here (pip install vllm on a GPU machine); nothing compared")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("skipped: no GPU here, and vLLM serves on one; nothing compared")
        return 0

    from evals.hf_export import export_hf

    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="vllm-check-"))
    checkpoint = (
        Path(args.checkpoint) if args.checkpoint else train_checkpoint(work, args.data, args.steps, args.mb, args.vocab)
    )
    exported = export_hf(checkpoint, work / "hf")
    print(f"exported step {exported.step} of {exported.checkpoint} to {exported.output}", flush=True)
    mine = ours(exported.checkpoint, PROMPTS, args.max_new_tokens, args.dtype)
    theirs = vllm_completions(exported.output, PROMPTS, args.max_new_tokens, args.dtype)
    parted = []
    for prompt, a, b in zip(PROMPTS, mine, theirs, strict=True):
        where = parting(a, b)
        parted.append(where)
        verdict = "same" if where is None else f"part at character {where}"
        print(f"{prompt!r}: {verdict}\n  ours {a!r}\n  vllm {b!r}")
    import vllm

    summary = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "dtype": args.dtype,
        "prompts": len(PROMPTS),
        "same": sum(where is None for where in parted),
        "parted_at": parted,
        "wall_s": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["same"] == len(PROMPTS) else 1


if __name__ == "__main__":
    sys.exit(main())
