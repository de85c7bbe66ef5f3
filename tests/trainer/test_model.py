"""The model on its own: shapes, causality, seeded initialisation, size of the presets."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig
from trainer.model import Transformer


def tiny(**kw) -> Transformer:
    model = Transformer(ModelConfig(preset="tiny", vocab_size=97, max_seq_len=32, **kw))
    model.init_weights(seed=3)
    return model


def test_logits_have_the_vocabulary_shape():
    tokens = torch.randint(0, 97, (2, 16))
    assert tiny()(tokens).shape == (2, 16, 97)


def test_attention_is_causal():
    model = tiny()
    a = torch.randint(0, 97, (1, 16))
    b = a.clone()
    b[0, 10:] = (b[0, 10:] + 1) % 97  # change only the future of position 9
    with torch.no_grad():
        la, lb = model(a), model(b)
    assert torch.equal(la[0, :10], lb[0, :10])
    assert not torch.equal(la[0, 10:], lb[0, 10:])


def test_rotary_embeddings_depend_only_on_relative_position():
    model = tiny()
    doc = torch.randint(0, 97, (1, 8))
    with torch.no_grad():
        at_zero = model(doc)
        at_five = model(doc, position_ids=torch.arange(5, 13).unsqueeze(0))
        reversed_positions = model(doc, position_ids=torch.arange(7, -1, -1).unsqueeze(0))
    assert torch.allclose(at_zero, at_five, atol=1e-5)  # a shift changes nothing: positions are relative
    assert not torch.allclose(at_zero, reversed_positions, atol=1e-3)  # but the positions are used


def test_initialisation_is_seeded_and_grouped_query_attention_works():
    a, b = tiny(), tiny()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    gqa = Transformer(ModelConfig(preset="tiny", n_kv_heads=2, vocab_size=97, max_seq_len=32))
    assert gqa(torch.randint(0, 97, (1, 8))).shape == (1, 8, 97)


def test_1b_preset_is_about_a_billion_parameters():
    cfg = ModelConfig(preset="1b", vocab_size=32768, max_seq_len=2048)
    with torch.device("meta"):
        model = Transformer(cfg)
    assert 0.9e9 < model.num_params() < 1.3e9


@pytest.mark.slow  # torch.compile takes ~20 s on 2 cores
def test_compiled_blocks_give_the_eager_logits_and_gradients():
    from torch._dynamo.utils import counters

    from trainer.parallel import apply_compile

    counters.clear()
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    eager, compiled = tiny(), tiny()
    apply_compile(compiled)
    assert all(hasattr(block, "_orig_mod") for block in compiled.layers)  # each block compiled on its own
    losses = []
    for model in (eager, compiled):
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten())
        loss.backward()
        losses.append((logits.detach(), loss.item(), model.tok_embeddings.weight.grad.clone()))
    assert counters["stats"]["unique_graphs"] >= 1  # dynamo captured graphs: not a silent eager fallback
    (l0, loss0, g0), (l1, loss1, g1) = losses
    assert torch.allclose(l0, l1, rtol=1e-4, atol=1e-5)
    assert abs(loss0 - loss1) < 1e-5
    assert torch.allclose(g0, g1, rtol=1e-4, atol=1e-6)
