"""Scoring text by the model's likelihood, in bits per UTF-8 byte: a measure that moves long before
pass@k leaves 0, and that compares models with other tokenizers (a byte is a byte in every one).

- ``continuation_bits``: the bits a model spends on a continuation given its prompt (HumanEval's
  canonical solutions given their prompts: ``suites/humaneval_bpb.py``).
- ``token_bytes``: the UTF-8 bytes each token id stands for, to turn the held-out loss per token
  into bits per byte (``suites/heldout.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from streaming_loader.tokenize import TokenizerSpec
from trainer.model import Transformer


@dataclass(frozen=True)
class Scored:
    bits: float  # -log2 p of the scored tokens, summed
    bytes: int  # UTF-8 bytes of the text those tokens cover
    tokens: int

    @property
    def bits_per_byte(self) -> float:
        return self.bits / self.bytes if self.bytes else math.nan


@dataclass(frozen=True)
class _Window:
    pair: int  # which (prompt, continuation)
    tokens: list[int]  # the model's input
    first: int  # the input position whose logits predict the window's first scored token
    targets: list[int]  # the scored tokens, each predicted by the position before it


def token_bytes(spec: TokenizerSpec) -> np.ndarray:
    """UTF-8 bytes of each token id's text, indexed by id; 0 for special tokens (end-of-document, padding).

    Exact for byte-level BPE (the factory's own tokenizers, GPT-2's and its kind): each character of
    a vocabulary entry stands for one byte. Other tokenizers count each token's text decoded alone,
    which miscounts tokens that hold part of a character or a leading-space marker."""
    from tokenizers import decoders

    tokenizer = spec.load()
    added = tokenizer.get_added_tokens_decoder()
    byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
    sizes = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    for token, token_id in tokenizer.get_vocab(with_added_tokens=True).items():
        if token_id in added:
            sizes[token_id] = 0 if added[token_id].special else len(added[token_id].content.encode("utf-8"))
        elif byte_level:
            sizes[token_id] = len(token)
        else:
            sizes[token_id] = len(tokenizer.decode([token_id]).encode("utf-8"))
    return sizes


@torch.no_grad()
def continuation_bits(
    model: Transformer,
    tokenizer: TokenizerSpec,
    pairs: Sequence[tuple[str, str]],
    device: torch.device,
    batch_rows: int = 16,
) -> list[Scored]:
    """The bits ``model`` spends on each continuation given its prompt, and the bytes they cover.

    ``prompt + continuation`` is tokenized as one text, as the model met such texts in training,
    rather than each part alone: a token may straddle the boundary (byte-level BPE joins the
    prompt's last newline to the indentation that follows), and splitting it there would score a
    tokenization the model never saw. The scored tokens are those from the first that ends past
    the prompt, and the bytes are those of the text they cover: the continuation, plus the few
    bytes of the prompt a straddling token holds. The text is preceded by the end-of-document
    token, as every document but the stream's first is in training.

    Texts longer than the model's context are scored in windows of ``max_seq_len`` tokens: the
    first from the start, each later one moved on by half a context, so every token is predicted
    from at least half a context (or everything before it). Windows of several texts share a
    batch, right-padded (causal attention: padding after a position cannot change it)."""
    encoder = tokenizer.load()
    limit = model.cfg.max_seq_len
    windows, covered = [], []
    for n, (prompt, continuation) in enumerate(pairs):
        encoding = encoder.encode(prompt + continuation, add_special_tokens=False)
        first = next((i for i, (_, end) in enumerate(encoding.offsets) if end > len(prompt)), len(encoding.ids))
        start = encoding.offsets[first][0] if first < len(encoding.ids) else len(prompt + continuation)
        covered.append((len((prompt + continuation)[start:].encode("utf-8")), len(encoding.ids) - first))
        windows += _windows(n, [tokenizer.eod_id, *encoding.ids], first + 1, limit)
    bits = [0.0] * len(pairs)
    windows.sort(key=lambda w: len(w.tokens))  # rows of a batch about as long
    for at in range(0, len(windows), batch_rows):
        batch = windows[at : at + batch_rows]
        width = max(len(w.tokens) for w in batch)
        tokens = torch.tensor([w.tokens + [tokenizer.eod_id] * (width - len(w.tokens)) for w in batch], device=device)
        logits = model(tokens)
        for row, window in enumerate(batch):
            scoring = logits[row, window.first : window.first + len(window.targets)].double().cpu()
            log_probs = F.log_softmax(scoring, dim=-1)
            chosen = log_probs.gather(1, torch.tensor(window.targets).unsqueeze(1))
            bits[window.pair] -= chosen.sum().item() / math.log(2)
    return [Scored(b, nbytes, ntokens) for b, (nbytes, ntokens) in zip(bits, covered, strict=True)]


def _windows(pair: int, sequence: list[int], first_target: int, limit: int) -> list[_Window]:
    """The windows that score ``sequence[first_target:]``, each token predicted once (``continuation_bits``)."""
    stride = max(1, limit // 2)
    windows, scored_to, end = [], first_target, min(len(sequence) - 1, limit)
    while scored_to < len(sequence):
        start = max(0, end - limit)
        # The inputs are sequence[start:end]; position p predicts sequence[start + p + 1].
        if end + 1 > scored_to:
            targets = sequence[scored_to : end + 1]
            windows.append(_Window(pair, sequence[start:end], scored_to - 1 - start, targets))
            scored_to = end + 1
        end = min(len(sequence) - 1, end + stride)
    return windows
