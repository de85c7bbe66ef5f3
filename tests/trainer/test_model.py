"""The model on its own: shapes, causality, seeded initialisation, size of the presets, each swappable
component, and the FLOPs per token MFU is computed from."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.variants import COMPONENTS
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


# Every component away from its default at once but the GELU (the squared ReLU's kin): a 5-token
# window, whose mask is made inside the compiled block, NoPE, whose positions are None.
ALL_SWAPPED = {"norm": "layernorm", "feed_forward": "squared_relu", "qk_norm": True, "tie_embeddings": True}
ALL_SWAPPED |= {"positions": "none", "sliding_window": 5}


@pytest.mark.slow  # torch.compile takes ~20 s on 2 cores
@pytest.mark.parametrize("components", [{}, ALL_SWAPPED], ids=["default", "all_swapped"])
def test_compiled_blocks_give_the_eager_logits_and_gradients(components):
    from torch._dynamo.utils import counters

    from trainer.parallel import apply_compile

    counters.clear()
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    eager, compiled = tiny(**components), tiny(**components)
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


# -- the swappable components (trainer/components/) ------------------------------------------------

# The default model's weights as trainer/model.py made them before the components could be
# swapped (main at 1377264, tiny preset, vocabulary 97, 2 key/value heads): its checkpoints must load.
TODAYS_WEIGHTS = [("tok_embeddings.weight", (97, 64))]
for _i in range(2):
    _layer = f"layers.{_i}."
    TODAYS_WEIGHTS += [(f"{_layer}attention_norm.weight", (64,)), (f"{_layer}attention.wq.weight", (64, 64))]
    TODAYS_WEIGHTS += [(f"{_layer}attention.wk.weight", (32, 64)), (f"{_layer}attention.wv.weight", (32, 64))]
    TODAYS_WEIGHTS += [(f"{_layer}attention.wo.weight", (64, 64)), (f"{_layer}ffn_norm.weight", (64,))]
    TODAYS_WEIGHTS += [(f"{_layer}feed_forward.w{n}.weight", shape) for n, shape in ((1, (192, 64)), (2, (64, 192)))]
    TODAYS_WEIGHTS += [(f"{_layer}feed_forward.w3.weight", (192, 64))]
TODAYS_WEIGHTS += [("norm.weight", (64,)), ("output.weight", (97, 64))]


def _todays_forward(weights: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """The forward of trainer/model.py before the components (RMSNorm, rotary, SwiGLU, causal
    attention), copied here as functions of the weights: the default model must compute it bit for bit."""
    import torch.nn.functional as F

    def rms(x, w):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w

    def rope(x, freqs):
        pairs = x.float().reshape(*x.shape[:-1], -1, 2)
        real, imag = pairs[..., 0], pairs[..., 1]
        cos, sin = freqs[..., 0].unsqueeze(2), freqs[..., 1].unsqueeze(2)
        return torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1).flatten(3).type_as(x)

    batch, seq = tokens.shape
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    angles = torch.outer(torch.arange(32, dtype=torch.float32), inv_freq)
    freqs = torch.stack((angles.cos(), angles.sin()), dim=-1)[:seq].unsqueeze(0)
    h = F.embedding(tokens, weights["tok_embeddings.weight"])
    for i in range(2):
        w = {k.removeprefix(f"layers.{i}."): v for k, v in weights.items() if k.startswith(f"layers.{i}.")}
        x = rms(h, w["attention_norm.weight"])
        q = F.linear(x, w["attention.wq.weight"]).view(batch, seq, 4, 16)
        k = F.linear(x, w["attention.wk.weight"]).view(batch, seq, 2, 16)
        v = F.linear(x, w["attention.wv.weight"]).view(batch, seq, 2, 16)
        q, k, v = (t.transpose(1, 2) for t in (rope(q, freqs), rope(k, freqs), v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        h = h + F.linear(out.transpose(1, 2).reshape(batch, seq, -1), w["attention.wo.weight"])
        x = rms(h, w["ffn_norm.weight"])
        gated = F.silu(F.linear(x, w["feed_forward.w1.weight"])) * F.linear(x, w["feed_forward.w3.weight"])
        h = h + F.linear(gated, w["feed_forward.w2.weight"])
    return F.linear(rms(h, weights["norm.weight"]), weights["output.weight"])


def test_the_default_model_is_the_one_before_the_components_bit_for_bit():
    model = tiny(n_kv_heads=2)
    weights = model.state_dict()
    assert [(name, tuple(w.shape)) for name, w in weights.items()] == TODAYS_WEIGHTS
    # The initialisation, drawn in the same order from the same generator.
    gen = torch.Generator().manual_seed(3)
    for name, shape in TODAYS_WEIGHTS:
        if "norm" in name:
            assert torch.equal(weights[name], torch.ones(shape)), name
        else:
            scale = 0.02 / (2 * 2) ** 0.5 if name.endswith(("wo.weight", "w2.weight")) else 0.02
            assert torch.equal(weights[name], torch.randn(shape, generator=gen) * scale), name
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(model(tokens), _todays_forward(weights, tokens))


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_component_builds_a_causal_model_with_its_weights(component):
    model = tiny(**COMPONENTS[component])
    default = tiny()
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 97
    with torch.no_grad():
        logits, other = model(tokens), model(changed)
        assert logits.shape == (2, 16, 97) and logits.isfinite().all()
        assert torch.equal(logits[:, :10], other[:, :10]) and not torch.equal(logits[:, 10:], other[:, 10:])
        assert not torch.allclose(logits, default(tokens), atol=1e-4)  # another model than the default
    extra = set(model.state_dict()) - set(default.state_dict())
    expected = {
        "layernorm": {f"{n}.bias" for n in ("norm", "layers.0.attention_norm", "layers.0.ffn_norm")},
        "qk_norm": {"layers.0.attention.q_norm.weight", "layers.0.attention.k_norm.weight"},
    }.get(component, set())
    assert expected <= extra and all(name.startswith(("norm.", "layers.")) for name in extra)


def test_layernorm_centres_and_rmsnorm_does_not():
    from trainer.components.norms import LayerNorm, RMSNorm

    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(LayerNorm(8, 1e-5)(x + 5), LayerNorm(8, 1e-5)(x), atol=1e-4)
    assert not torch.allclose(RMSNorm(8, 1e-5)(x + 5), RMSNorm(8, 1e-5)(x), atol=1e-2)


def test_feed_forwards_compute_their_formulas_at_equal_width():
    import torch.nn.functional as F

    from trainer.components.feedforward import GELU, SquaredReLU

    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(0))
    gelu, relu2 = GELU(64, 256), SquaredReLU(64, 256)
    with torch.no_grad():
        assert torch.equal(gelu(x), gelu.w2(F.gelu(gelu.w1(x))))
        assert torch.equal(relu2(x), relu2.w2(F.relu(relu2.w1(x)) ** 2))
    # Two matrices instead of SwiGLU's three: the default width is 4·dim, about SwiGLU's 8·dim² weights.
    assert ModelConfig(preset="tiny", vocab_size=97, feed_forward="gelu").hidden_dim == 256


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys():
    tokens = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(0))
    for qk_norm in (True, False):
        model = tiny(qk_norm=qk_norm)
        with torch.no_grad():
            before = model(tokens)
            for layer in model.layers:
                layer.attention.wq.weight.mul_(30.0)
                layer.attention.wk.weight.mul_(30.0)
            same = torch.allclose(model(tokens), before, atol=1e-4)
        assert same == qk_norm


def test_tied_embeddings_are_one_matrix():
    model, default = tiny(tie_embeddings=True), tiny()
    assert model.output.weight is model.tok_embeddings.weight
    assert model.num_params() == default.num_params() - 97 * 64
    assert {"tok_embeddings.weight", "output.weight"} <= set(model.state_dict())


def test_nope_ignores_positions_and_a_sliding_window_forgets_what_left_it():
    doc = torch.randint(0, 97, (1, 16), generator=torch.Generator().manual_seed(0))
    nope = tiny(positions="none")
    with torch.no_grad():
        assert torch.equal(nope(doc), nope(doc, position_ids=torch.arange(15, -1, -1).unsqueeze(0)))
    # Two layers of a 4-token window: position p sees back to p - 6, so token 0 reaches positions 0..6 only.
    windowed = tiny(sliding_window=4)
    changed = doc.clone()
    changed[0, 0] = (changed[0, 0] + 1) % 97
    with torch.no_grad():
        a, b = windowed(doc), windowed(changed)
    assert not torch.equal(a[0, 6], b[0, 6])
    assert torch.equal(a[0, 7:], b[0, 7:])
    with torch.no_grad():  # a window as long as the sequence is full attention, on the same kernel path
        assert torch.equal(tiny(sliding_window=16)(doc), tiny()(doc))


@pytest.mark.parametrize("component", ["default", *COMPONENTS])
def test_flops_per_token_is_what_a_forward_and_backward_count(component):
    """FlopCounterMode counts the matrix products of a real forward and backward; attention on
    the math kernel, whose products it sees. It scores every query against every key, the masked
    ones included, so a window's count is scaled to the keys a query may see (the
    ``flops_per_token`` convention: a kernel that skips masked blocks does not compute them)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny(**COMPONENTS.get(component, {}))
    batch, seq = 2, 32
    tokens = torch.randint(0, 97, (batch, seq), generator=torch.Generator().manual_seed(0))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens).sum().backward()
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert set(counts) == {"aten.mm", "aten.bmm"}  # the projections, and attention's scores and values
    keys = min(seq, model.cfg.sliding_window or seq)
    counted = (counts["aten.mm"] + counts["aten.bmm"] * keys / seq) / (batch * seq)
    assert model.flops_per_token(seq) == counted
    if component == "tied":  # the output layer still multiplies, though its weights are the embeddings'
        assert model.flops_per_token(seq) == tiny().flops_per_token(seq)


def test_components_that_do_not_exist_are_refused_by_name():
    from lakehouse.errors import ConfigError

    for key, value, message in [
        ("norm", "batchnorm", "model.norm must be one of rmsnorm, layernorm; got 'batchnorm'"),
        ("feed_forward", "relu", "model.feed_forward must be one of swiglu, gelu, squared_relu"),
        ("positions", "alibi", "model.positions must be one of rope, none"),
        ("qk_norm", "yes", "model.qk_norm must be true or false"),
        ("sliding_window", -1, "model.sliding_window must be a whole number"),
    ]:
        with pytest.raises(ConfigError, match=message):
            ModelConfig(preset="tiny", **{key: value})
