"""Real checkpoints made without training, for the playground's tests: a tiny model with seeded
random weights, or one whose weights were set so that greedy decoding writes a chosen text.

Both are saved as the trainer saves them (DCP, ``lineage.json``, ``COMPLETE``) and loaded by
``evals/checkpoint_model.py``'s safe reader; generation runs the real model with ``evals/generate.py``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from streaming_loader.tokenize import TokenizerSpec, load_tokenizer_spec
from trainer.config import ModelConfig
from trainer.model import Transformer

MAX_SEQ_LEN = 64


def seeded_model(tokenizer: TokenizerSpec, seed: int) -> Transformer:
    model = Transformer(ModelConfig(preset="tiny", vocab_size=tokenizer.vocab_size, max_seq_len=MAX_SEQ_LEN))
    model.init_weights(seed)
    return model


@torch.no_grad()
def writing_model(tokenizer: TokenizerSpec, prompt: str, text: str) -> Transformer:
    """A model that, after ``prompt``, greedily writes ``text`` and then the end-of-document token.

    The blocks' output projections are zero, so each position's state is its token's embedding
    alone; the embeddings of the prompt's last token and of the text's tokens are distinct unit
    vectors, and the output layer maps each of them to the token that must follow it. So the
    text's tokens must be distinct from each other and from the prompt's last token."""
    encoder = tokenizer.load()
    last = encoder.encode(prompt, add_special_tokens=False).ids[-1]
    chain = encoder.encode(text, add_special_tokens=False).ids
    if len({last, *chain}) != len(chain) + 1 or tokenizer.eod_id in chain:
        raise ValueError(f"{text!r} after {prompt!r} repeats a token: pick another text")
    model = seeded_model(tokenizer, seed=0)
    for block in model.layers:
        block.attention.wo.weight.zero_()
        block.feed_forward.w2.weight.zero_()
    model.output.weight.zero_()
    states = [last, *chain]
    following = [*chain, tokenizer.eod_id]
    for k, (token, successor) in enumerate(zip(states, following, strict=True)):
        model.tok_embeddings.weight[token] = torch.nn.functional.one_hot(torch.tensor(k), model.cfg.dim).float()
        model.output.weight[successor, k] = 10.0
    return model


def save_checkpoint(run_dir: Path, step: int, model: Transformer, manifest: Path, tokenizer: Path) -> Path:
    """``model`` as ``run_dir``'s complete checkpoint at ``step``, with the lineage a run writes."""
    folder = run_dir / "checkpoints" / f"step-{step}"
    with warnings.catch_warnings():  # DCP saving in one process says it assumes so
        warnings.simplefilter("ignore", UserWarning)
        dcp.save({"model": model.state_dict()}, checkpoint_id=str(folder), no_dist=True)
    pinned = json.loads(manifest.read_text())
    spec = load_tokenizer_spec(tokenizer)
    cfg = model.cfg
    lineage = {
        "checkpoint": str(folder),
        "step": step,
        "code_version": "test",
        "config": {
            "data": {"manifest": str(manifest), "tokenizer": str(tokenizer), "seq_len": 32, "backend": "local"},
            "model": {"preset": cfg.preset, "vocab_size": cfg.vocab_size, "max_seq_len": cfg.max_seq_len},
        },
        "manifest": {"path": str(manifest), "name": pinned["name"], "fingerprint": pinned["fingerprint"]},
        "tokenizer": {"path": str(tokenizer), "sha256": spec.sha256},
        "loader_position": {"next_global_batch": step, "sequences": 0, "tokens": 0},
        "components": [
            {"name": c["name"], "weight": c["weight"], "table": c["table"], "snapshot_id": c["snapshot_id"], "runs": []}
            for c in pinned["components"]
        ],
    }
    (folder / "lineage.json").write_text(json.dumps(lineage))
    (folder / "COMPLETE").write_text(json.dumps({"step": step, "world_size": 1}))
    return folder
