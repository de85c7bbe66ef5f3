"""Completions from a checkpoint's model with a KV cache: greedy, or sampled (temperature, top-p).

``generate`` completes many prompts, ``samples`` times each, several prompts to a batch
(docs/architecture.md, "Evals", generation):

- A batch holds whole prompts, all of a prompt's samples; prompts are taken in order of token
  length, so a batch's rows are about as long. The prompts are left-padded to the longest, the
  padding masked out of attention and each row's positions counted from its own first token
  (``trainer/kv_cache.py``). The prompts are one forward that fills the cache; each new token is
  then one position's forward over the cached keys and values, and a row that has finished leaves
  the cache.
- A row ends at the end-of-document token (not part of its text) or once its decoded text holds
  a stop string; the text is cut where the first stop string starts.
- Exact: ``complete_by_recomputing``, the code before the cache (kept as the reference for the
  tests and ``benchmarks/generate``), runs the model over the last ``max_seq_len`` tokens at every
  step, positions from 0 in each window. While a row's context fits the model's rotary table
  that is what the cache computes. Once prompt plus generated tokens outgrow it, the window slides
  and every position in it shifts each step, which no cache can hold: that row leaves the cache
  and each of its later steps runs the model over its window, as the reference does (a prompt
  longer than the table never enters it). Greedy output is the reference's, token for token: the
  cache's matrix products have other shapes than the window's, so logits may differ in their last
  bits, which could only matter on an exact tie; the tests compare token ids.
- Sampling: each prompt has its own generator, seeded with its seed, and each step draws one
  token for every sample of the prompt at once, finished samples included, as the reference
  does. ``torch.multinomial`` with one draw per row takes one exponential variate per entry of
  the ``[samples, vocab]`` probabilities, whatever their values, so the same seeds give the same
  output, batch size and the other prompts of the batch notwithstanding; and with ``top_p=1`` the
  reference's output for the same prompt and seed (tested). Top-p keeps the fewest most likely
  tokens whose probability reaches ``top_p``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from streaming_loader.tokenize import TokenizerSpec
from trainer.kv_cache import KVCache, left_padded
from trainer.model import Transformer


@dataclass
class _Row:
    context: list[int]  # the prompt and the tokens chosen for it: what the next step conditions on
    generated: list[int] = field(default_factory=list)  # the completion's tokens, without end-of-document
    finished: bool = False


@dataclass
class _Prompt:
    rows: list[_Row]  # its samples
    generator: torch.Generator

    @property
    def done(self) -> bool:
        return all(row.finished for row in self.rows)


@dataclass(frozen=True)
class _Settings:
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: Sequence[str]
    device: torch.device


@dataclass(frozen=True)
class Sampled:
    """One completion: its text, and the tokens drawn for it (what a policy gradient scores)."""

    text: str  # cut before the first stop string; without the end-of-document token
    tokens: list[int]  # every token drawn, the one holding the stop string and end-of-document included


def prompt_tokens(encoder, prompt: str, eod_id: int) -> list[int]:
    """The token ids a prompt is generated from (an empty prompt: the end-of-document token)."""
    return encoder.encode(prompt, add_special_tokens=False).ids or [eod_id]


def generate(
    model: Transformer,
    tokenizer: TokenizerSpec,
    prompts: Sequence[str],
    *,
    samples: int,
    max_new_tokens: int,
    device: torch.device,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seeds: int | Sequence[int] = 0,
    stop: Sequence[str] = (),
    batch_rows: int = 16,
) -> list[list[str]]:
    """``samples`` completions of each prompt, ``[prompt][sample]`` in the prompts' order, each cut
    before the first of ``stop`` (or the end-of-document token).

    Greedy at ``temperature <= 0``. ``seeds``: one per prompt, or one for all. ``batch_rows``:
    rows (samples) per forward, at least one prompt's."""
    sampled = generate_tokens(
        model,
        tokenizer,
        prompts,
        samples=samples,
        max_new_tokens=max_new_tokens,
        device=device,
        temperature=temperature,
        top_p=top_p,
        seeds=seeds,
        stop=stop,
        batch_rows=batch_rows,
    )
    return [[completion.text for completion in row] for row in sampled]


@torch.no_grad()
def generate_tokens(
    model: Transformer,
    tokenizer: TokenizerSpec,
    prompts: Sequence[str],
    *,
    samples: int,
    max_new_tokens: int,
    device: torch.device,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seeds: int | Sequence[int] = 0,
    stop: Sequence[str] = (),
    batch_rows: int = 16,
) -> list[list[Sampled]]:
    """``generate``, each completion with the tokens drawn for it (``Sampled``)."""
    if samples < 1 or not 0 < top_p <= 1:
        raise ValueError(f"samples must be >= 1 and top_p in (0, 1], got {samples} and {top_p}")
    if max_new_tokens < 1 or math.isnan(temperature):
        raise ValueError(
            f"max_new_tokens must be >= 1 and temperature a number, got {max_new_tokens} and {temperature}"
        )
    seeds = [seeds] * len(prompts) if isinstance(seeds, int) else list(seeds)
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    encoder = tokenizer.load()
    prompt_ids = [prompt_tokens(encoder, p, tokenizer.eod_id) for p in prompts]
    settings = _Settings(max_new_tokens, temperature, top_p, tuple(stop), device)
    order = sorted(range(len(prompts)), key=lambda i: len(prompt_ids[i]))
    per_batch = max(1, batch_rows // samples)
    completions: list[list[Sampled]] = [[] for _ in prompts]
    for first in range(0, len(order), per_batch):
        batch = order[first : first + per_batch]
        group = [
            _Prompt([_Row(list(prompt_ids[i])) for _ in range(samples)], torch.Generator().manual_seed(seeds[i]))
            for i in batch
        ]
        _generate_batch(model, group, settings, encoder, tokenizer.eod_id)
        for i, prompt in zip(batch, group, strict=True):
            completions[i] = [
                Sampled(_cut_text(encoder.decode(row.generated), stop), row.context[len(prompt_ids[i]) :])
                for row in prompt.rows
            ]
    return completions


def _generate_batch(model: Transformer, prompts: list[_Prompt], settings: _Settings, encoder, eod_id: int) -> None:
    limit, samples = model.cfg.max_seq_len, len(prompts[0].rows)
    rows = [row for prompt in prompts for row in prompt.rows]
    cached = [i for i, row in enumerate(rows) if len(row.context) <= limit]  # row indices, in cache order
    cache: KVCache | None = None
    for step in range(settings.max_new_tokens):
        if all(prompt.done for prompt in prompts):
            break
        # A finished row's logits stay 0: its draw is made and thrown away, as the reference's is.
        logits = torch.zeros(len(rows), model.cfg.vocab_size)
        if cached:
            cache = cache or _new_cache(model, [rows[i].context for i in cached], settings)
            new = [rows[i].context if step == 0 else rows[i].context[-1:] for i in cached]
            logits[cached] = _logits(model, cache, new, settings.device)
        windowed = [i for i, row in enumerate(rows) if not row.finished and len(row.context) > limit]
        if windowed:
            window = torch.tensor([rows[i].context[-limit:] for i in windowed], device=settings.device)
            logits[windowed] = model(window)[:, -1, :].float().cpu()
        for k, prompt in enumerate(prompts):
            if prompt.done:
                continue
            chosen = _choose(logits[k * samples : (k + 1) * samples], settings, prompt.generator)
            for row, token in zip(prompt.rows, chosen.tolist(), strict=True):
                if not row.finished:
                    _append(row, token, eod_id, settings.stop, encoder)
        staying = [n for n, i in enumerate(cached) if not rows[i].finished and len(rows[i].context) <= limit]
        if cache is not None and len(staying) < len(cached):
            cached = [cached[n] for n in staying]
            if cached:
                cache.keep(staying)


def _new_cache(model: Transformer, contexts: list[list[int]], settings: _Settings) -> KVCache:
    """A cache for these prompts, left-padded to the longest, and every position they can still use."""
    width, shortest = max(map(len, contexts)), min(map(len, contexts))
    # A row stays in the cache while its context fits the rotary table; the shortest stays longest.
    room = max(0, min(settings.max_new_tokens - 1, model.cfg.max_seq_len - shortest))
    dtype = model.output.weight.dtype
    return KVCache(model.cfg, len(contexts), width + room, device=settings.device, dtype=dtype)


def _logits(model: Transformer, cache: KVCache, new: list[list[int]], device: torch.device) -> torch.Tensor:
    """The next token's logits of each cached row, given its new tokens: its prompt at the first
    step, then the token chosen for it at the step before. Left-padded to the longest."""
    tokens, valid = left_padded(new)
    positions = cache.extend(valid.to(device))
    return model(tokens.to(device), positions, cache)[:, -1, :].float().cpu()


def _choose(logits: torch.Tensor, settings: _Settings, generator: torch.Generator) -> torch.Tensor:
    if settings.temperature <= 0:
        return logits.argmax(dim=-1)
    probabilities = _tempered(logits, settings.temperature)
    if settings.top_p < 1:
        probabilities = _nucleus(probabilities, settings.top_p)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(1)


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """The probabilities at ``temperature`` > 0. The largest logit is made 0 before dividing: a tiny
    temperature then sends the others to -inf (probability 0), where the unshifted logits would
    overflow to inf and softmax give NaN. A temperature below the dtype's smallest normal number
    is taken as that number: it would round to 0 in the logits' dtype, and 0/0 is NaN."""
    temperature = max(temperature, torch.finfo(logits.dtype).tiny)
    return torch.softmax((logits - logits.max(dim=-1, keepdim=True).values) / temperature, dim=-1)


def _nucleus(probabilities: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probabilities`` with all but the fewest most likely tokens reaching ``top_p`` set to 0."""
    ordered, order = probabilities.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # the mass of the more likely tokens: 0 for the first, always kept
    ordered[before >= top_p] = 0
    return torch.zeros_like(probabilities).scatter(-1, order, ordered)


def _append(row: _Row, token: int, eod_id: int, stop: Sequence[str], encoder) -> None:
    row.context.append(token)
    if token == eod_id:
        row.finished = True
        return
    row.generated.append(token)
    if stop and _cut(encoder.decode(row.generated), stop) is not None:
        row.finished = True


def _cut_text(text: str, stop: Sequence[str]) -> str:
    cut = _cut(text, stop)
    return text if cut is None else text[:cut]


@torch.no_grad()
def complete_by_recomputing(
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
    """The reference ``generate`` is held to: the window recomputed at every step, no cache.

    ``samples`` completions of ``prompt``, each cut before the first of ``stop`` (or the
    end-of-document token). The code evals ran before the cache, kept for the tests and the
    benchmark: its cost per token grows with the context, up to ``max_seq_len``."""
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
            chosen = torch.multinomial(_tempered(logits, temperature), 1, generator=generator).squeeze(1)
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
