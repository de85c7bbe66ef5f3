"""Config parsing and validation: plain functions."""

from __future__ import annotations

import pytest

from lakehouse.errors import ConfigError
from trainer.config import load_config, parse_override
from trainer.schedule import warmup_cosine

BASE = {"data": {"manifest": "m.json", "tokenizer": "t.json", "seq_len": 64, "global_batch_size": 8}}


def test_presets_fill_model_dimensions_and_fields_override():
    cfg = load_config(None, ["model.n_layers=3", "train.steps=7"], raw=BASE)
    assert (cfg.model.dim, cfg.model.n_layers, cfg.model.n_heads) == (64, 3, 4)
    assert cfg.model.hidden_dim % 64 == 0 and cfg.model.max_seq_len == 64
    assert cfg.train.steps == 7
    big = load_config(None, ["model.preset='1b'"], raw=BASE)
    assert (big.model.dim, big.model.kv_heads, big.model.hidden_dim) == (2048, 8, 8192)


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.preset='huge'", "model.preset"),
        ("model.dim=65", "divide by n_heads"),
        ("data.backend='spark'", "data.backend"),
        ("data.num_shards=-1", "data.num_shards"),
        ("train.steps=0", "train.steps"),
        ("optim.betas=[0.9]", "betas"),
        ("eval.batches=0", "eval.batches"),
        ("checkpoint.keep=0", "checkpoint.keep"),
        ("train.colour='red'", "unknown key"),
        ("nosuch.key=1", "unknown config section"),
        ("model.max_seq_len=16", "seq_len must be <="),
    ],
)
def test_bad_values_are_refused_early(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override], raw=BASE)


def test_world_size_must_divide_the_batch():
    cfg = load_config(None, ["train.micro_batch_size=3"], raw=BASE)
    with pytest.raises(ConfigError, match="divide by the number of ranks"):
        cfg.check_world(3)
    with pytest.raises(ConfigError, match="micro_batch_size"):
        cfg.check_world(2)


def test_missing_data_section_and_file(tmp_path):
    with pytest.raises(ConfigError, match=r"\[data\]"):
        load_config(None, raw={"train": {"steps": 3}})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_override_values_are_parsed_as_toml():
    assert parse_override("optim.lr=1e-4") == ("optim", "lr", 1e-4)
    assert parse_override("run.dir=runs/x") == ("run", "dir", "runs/x")
    with pytest.raises(ConfigError):
        parse_override("steps=3")


def test_schedule_warms_up_then_decays_to_the_floor():
    cfg = load_config(None, ["optim.warmup_steps=4", "optim.min_lr_ratio=0.1"], raw=BASE)
    f = warmup_cosine(cfg.optim, total_steps=20)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(12) == pytest.approx(0.55)
    assert f(20) == pytest.approx(0.1) and f(30) == pytest.approx(0.1)
