"""Completions from a checkpoint's model: greedy, or sampled at a temperature, token by token.

No KV cache: the models evaluated here are small, and recomputing the window each step keeps
this a few lines over the trainer's own ``Transformer.forward``. A prompt longer than the model's
rotary table keeps its last ``max_seq_len`` tokens as context.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from streaming_loader.tokenize import TokenizerSpec


@torch.no_grad()
def complete(
    model: nn.Module,
    tokenizer: TokenizerSpec,
    prompt: str,
    *,
    samples: int,
    max_new_tokens: int,
    max_seq_len: int,
    device: torch.device,
    temperature: float = 0.0,
    seed: int = 0,
    stop: Sequence[str] = (),
) -> list[str]:
    """``samples`` completions of ``prompt``, each cut before the first of ``stop`` (or the end-of-document token)."""
    encoder = tokenizer.load()
    prompt_ids = encoder.encode(prompt, add_special_tokens=False).ids or [tokenizer.eod_id]
    context = torch.tensor([prompt_ids] * samples, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    generated: list[list[int]] = [[] for _ in range(samples)]
    finished = [False] * samples
    for _ in range(max_new_tokens):
        logits = model(context[:, -max_seq_len:].to(device))[:, -1, :].float().cpu()
        if temperature <= 0:
            chosen = logits.argmax(dim=-1)
        else:
            chosen = torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze(1)
        context = torch.cat([context, chosen.unsqueeze(1)], dim=1)
        for row, token in enumerate(chosen.tolist()):
            if finished[row]:
                continue
            if token == tokenizer.eod_id:
                finished[row] = True
                continue
            generated[row].append(token)
            if stop and _cut(encoder.decode(generated[row]), stop) is not None:
                finished[row] = True
        if all(finished):
            break
    texts = [encoder.decode(ids) for ids in generated]
    return [text[: _cut(text, stop)] if _cut(text, stop) is not None else text for text in texts]


def _cut(text: str, stop: Sequence[str]) -> int | None:
    """Where the first stop sequence starts in ``text``, if any does."""
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(found) if found else None
