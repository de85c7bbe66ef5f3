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
        # A value of the wrong type is named, not guessed at ("yes" would have turned compile on).
        ("train.compile='yes'", "train.compile must be true or false, got 'yes'"),
        ("train.steps=abc", "train.steps must be an integer, got 'abc'"),
        ("data.seq_len=1.5", "data.seq_len must be an integer"),
        ("optim.weight_decay='0.1'", "optim.weight_decay must be a finite number"),
        # TOML has inf and nan: an lr of inf passed "> 0" and failed in a rank as NaN probabilities.
        ("optim.lr=inf", "optim.lr must be a finite number, got inf"),
        ("optim.betas=[0.9, nan]", "optim.betas must be a list of 2 values"),
        ("eval.manifest=5", "eval.manifest must be a string"),
        ("optim.betas=[0.9, true]", "optim.betas must be a list of 2 values"),
        ("model.vocab_size=-5", "model.vocab_size must be >= 0"),
        ("model.rope_theta=-1.0", "rope_theta must be > 0"),
        # "" wrote checkpoints/ and metrics.jsonl into the folder the command ran in.
        ("run.dir=''", r"run\.dir must name the run's folder .*got ''"),
        ("run.dir='  '", r"run\.dir must name the run's folder"),
        ("optim.weight_decay=-0.1", r"optim\.weight_decay must be >= 0 \(0: no decay\), got -0\.1"),
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


def test_a_world_the_stream_cannot_be_dealt_to_is_refused_before_any_rank_starts():
    # 256 sequences: 16 shards by default, which 32 ranks cannot share; 64 shards they can.
    wide = {"data": {**BASE["data"], "global_batch_size": 256}}
    with pytest.raises(ConfigError, match=r"ranks 32 must divide the default data\.num_shards .*, 16"):
        load_config(None, raw=wide).check_world(32)
    load_config(None, ["data.num_shards=64"], raw=wide).check_world(32)
    with pytest.raises(ConfigError, match=r"data\.num_shards 3 must divide data\.global_batch_size 8"):
        load_config(None, ["data.num_shards=3"], raw=BASE).check_world(1)


def test_missing_data_section_and_file(tmp_path):
    with pytest.raises(ConfigError, match=r"\[data\]"):
        load_config(None, raw={"train": {"steps": 3}})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_override_values_are_parsed_as_toml():
    assert parse_override("optim.lr=1e-4") == ("optim", "lr", 1e-4)
    assert parse_override("run.dir=runs/x") == ("run", "dir", "runs/x")
    for unclosed in ('"runs/a', "'runs/a", "[1, 2", "{a = 1"):  # taken as text before, quote and all
        with pytest.raises(ConfigError, match="opens as a TOML value but is not one"):
            parse_override(f"run.dir={unclosed}")
    with pytest.raises(ConfigError):
        parse_override("steps=3")


def test_unquoted_text_is_taken_as_it_is_unless_toml_reads_it_as_another_type():
    cfg = load_config(None, ["run.dir=/tmp/x", "mlflow.experiment=my run", "eval.manifest='2024'"], raw=BASE)
    assert (cfg.run.dir, cfg.mlflow.experiment, cfg.eval.manifest) == ("/tmp/x", "my run", "2024")
    # A string key given text that TOML reads as a number, a boolean or a date: refused, saying to quote it.
    for override, kind in [("mlflow.experiment=2024", "a number"), ("run.dir=true", "a boolean"),
                           ("mlflow.experiment=2024-01-01", "a date or time"), ("run.dir=[1]", "an array")]:  # fmt: skip
        given = override.partition("=")[2]
        with pytest.raises(ConfigError) as refused:
            load_config(None, [override], raw=BASE)
        assert str(refused.value) == (
            f"{override.partition('=')[0]} must be a string, got {given}: --set reads VALUE as TOML, where {given} "
            f"is {kind}; put text in double quotes, as in --set 'SECTION.NAME=\"text\"'"
        )
    # In a file, TOML's own rule: the type check's message.
    with pytest.raises(ConfigError, match=r"^mlflow\.experiment must be a string, got 2024$"):
        load_config(None, raw={**BASE, "mlflow": {"experiment": 2024}})


def test_schedule_warms_up_then_decays_to_the_floor():
    cfg = load_config(None, ["optim.warmup_steps=4", "optim.min_lr_ratio=0.1"], raw=BASE)
    f = warmup_cosine(cfg.optim, total_steps=20)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(12) == pytest.approx(0.55)
    assert f(20) == pytest.approx(0.1) and f(30) == pytest.approx(0.1)


def test_a_missing_manifest_or_tokenizer_is_refused_before_torchrun_starts(tmp_path):
    from tests.conftest import run_factory

    config = tmp_path / "train.toml"
    config.write_text(f'[data]\nmanifest = "{tmp_path / "none.json"}"\ntokenizer = "{tmp_path / "tok.json"}"\n')
    done = run_factory("train", "--config", str(config), "--nproc", "2")
    assert done.returncode == 2 and done.stderr.startswith("error: cannot read manifest"), done.stderr
    assert "rank" not in done.stderr  # no rank was started to find it


def test_a_set_without_a_value_is_shown_as_given_not_masked(tmp_path, capsys):
    """Every error the CLI prints is redacted, which masks the value after a "key=": the usage
    the message shows must not read like a credential."""
    from factory_cli.main import main

    config = tmp_path / "train.toml"
    config.write_text('[data]\nmanifest = "m.json"\ntokenizer = "t.json"\n')
    assert main(["train", "--config", str(config), "--set", "train.steps"]) == 2
    err = capsys.readouterr().err
    assert "error: --set takes SECTION.NAME=VALUE (e.g. train.steps=20), got 'train.steps'" in err, err


def test_the_usage_in_other_set_and_token_messages_survives_redaction(tmp_path):
    from tokenizers import Tokenizer, models

    from experiments.sweep_spec import check_overrides
    from lakehouse.errors import TokenizerError
    from lakehouse.redact import redact
    from streaming_loader.tokenize import load_tokenizer_spec

    messages = []
    for overrides in ("train.steps=2", ["train.steps"]):
        with pytest.raises(ConfigError, match=r"SECTION\.NAME=VALUE") as refused:
            check_overrides(overrides, "sweep.toml")
        messages.append(str(refused.value))
    tokenizer = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(tokenizer))
    with pytest.raises(TokenizerError, match="no end-of-document token") as refused:
        load_tokenizer_spec(tokenizer)
    messages.append(str(refused.value))
    assert [redact(m) for m in messages] == messages


def test_the_component_names_a_config_takes_are_the_registered_classes():
    # The config checks names without importing torch (trainer/components/names.py); the model
    # builds from the registries: the two must name the same components, in the same order.
    from trainer.components import feedforward, names, norms, positions

    assert tuple(norms.NORMS) == names.NORM_NAMES
    assert tuple(feedforward.FEED_FORWARDS) == names.FEED_FORWARD_NAMES == tuple(names.HIDDEN_PER_DIM)
    assert tuple(positions.POSITIONS) == names.POSITION_NAMES
    with pytest.raises(RuntimeError, match="must name exactly"):
        names.registry(("rmsnorm", "layernorm"), {"rmsnorm": object})
