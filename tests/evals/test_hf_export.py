"""``factory export --format hf``: transformers, given the folder, computes our model.

Two real checkpoints: the evals' tiny run (the demo's preset, trained by 2 torchrun ranks with
FSDP2, so its weights are resharded on load) and a model with grouped-query attention (2 key/value
heads for 4 query heads) and a rotary base, norm epsilon and feed-forward width other than the
defaults, trained for 6 steps in one process without warm-up, so its attention is further from
uniform and its greedy completions are not all one token.
transformers loads each folder by itself (``local_files_only``): its logits must be ours, in
float32 tightly and in bfloat16 within bfloat16's tolerance, and its greedy ``generate`` must be
our ``evals.generate.generate``. A control shows the comparison can fail: the same folder with
the query and key rows left in our interleaved order is far outside the tolerance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evals.hf_export import FIELDS, LINEAGE_FILE, TRAINING_CONFIG_FILE, export_hf, hf_config, only
from lakehouse.errors import InputError
from tests.conftest import REPO, factory_here, run_factory
from tests.evals.conftest import TrainedRun, build_corpus_and_config
from tests.test_docs_keys import documented, section
from trainer.config import ModelConfig

CPU = torch.device("cpu")
FP32_TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
# torch.testing's relative tolerance for bfloat16, applied to the logits' scale: a bfloat16 value
# holds 8 significant bits, so the largest logits are off by about that much on either side.
BF16_RTOL = 1.6e-2
PROMPTS = ["def f3(x):\n    return", "the data engine streams", "lineage"]


@pytest.fixture(scope="module")
def gqa_run(tmp_path_factory) -> TrainedRun:
    """A checkpoint with n_kv_heads 2 < n_heads 4, trained for 6 steps in one plain process."""
    overrides = ["model.n_kv_heads=2", "model.rope_theta=500000.0", "model.norm_eps=1e-6", "model.hidden_dim=128"]
    return _train(tmp_path_factory, "export-gqa-home", overrides)


@pytest.fixture(scope="module")
def components_run(tmp_path_factory) -> TrainedRun:
    """A checkpoint with every exportable component away from the default (QK-norm, a sliding
    window of 24 positions and tied embeddings: a Qwen3ForCausalLM), trained as ``gqa_run``."""
    return _train(
        tmp_path_factory,
        "export-components-home",
        ["model.qk_norm=true", "model.sliding_window=24", "model.tie_embeddings=true"],
    )


def _train(tmp_path_factory, name: str, overrides: list[str]) -> TrainedRun:
    home = tmp_path_factory.mktemp(name)
    config = build_corpus_and_config(home, steps=6)
    run_dir = home / "runs" / "run"
    overrides = [f"run.dir='{run_dir}'", "optim.warmup_steps=0", *overrides]
    command = [sys.executable, "-m", "trainer.train", "--config", str(config)]
    for override in overrides:
        command += ["--set", override]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (checkpoint,) = sorted((run_dir / "checkpoints").iterdir())
    return TrainedRun(home, run_dir, checkpoint)


@pytest.fixture(params=[pytest.param("demo", marks=pytest.mark.engine), "gqa", "components"])  # demo: torchrun
def checkpoint(request) -> Path:
    name = {"demo": "trained_run", "gqa": "gqa_run", "components": "components_run"}[request.param]
    return request.getfixturevalue(name).checkpoint


def _hf_model(folder: Path, dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True).eval()


def _hf_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def _token_batch(loaded) -> torch.Tensor:
    """Two rows of real text as the trainer packs it, each the model's whole context."""
    encoder, length = loaded.tokenizer.load(), loaded.config.model.max_seq_len
    texts = [
        "def f12(x):\n    return x * 12 + 5\n" * 8,
        "the data engine streams pinned snapshots into training while every checkpoint keeps lineage. " * 8,
    ]
    rows = [encoder.encode(text, add_special_tokens=False).ids[:length] for text in texts]
    assert all(len(row) == length for row in rows)
    return torch.tensor(rows)


@pytest.mark.slow
def test_transformers_computes_our_logits_in_float32_and_bfloat16(checkpoint, tmp_path):
    from evals.checkpoint_model import load_checkpoint

    export_hf(checkpoint, tmp_path / "hf")
    loaded = load_checkpoint(checkpoint, CPU)
    tokens = _token_batch(loaded)
    theirs = _hf_model(tmp_path / "hf")
    with torch.no_grad():
        ours_32, theirs_32 = loaded.model(tokens), theirs(tokens).logits
    torch.testing.assert_close(theirs_32, ours_32, **FP32_TOLERANCE)
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["num_key_value_heads"] == loaded.config.model.kv_heads

    # The control: our rows in our order, i.e. the export without its reordering, is far off (38 times
    # the tolerance on the demo's run, whose 2 steps leave attention near uniform; 97 on the other).
    model = loaded.model
    with torch.no_grad():
        for ours, layer in zip(model.layers, theirs.model.layers, strict=True):
            layer.self_attn.q_proj.weight.copy_(ours.attention.wq.weight)
            layer.self_attn.k_proj.weight.copy_(ours.attention.wk.weight)
        unordered = theirs(tokens).logits
    assert (unordered - ours_32).abs().max() > 10 * FP32_TOLERANCE["atol"]

    theirs_16 = _hf_model(tmp_path / "hf", torch.bfloat16)
    with torch.no_grad():
        ours_16 = model.to(torch.bfloat16)(tokens).float()
        theirs_16 = theirs_16(tokens).logits.float()
    scale = ours_32.abs().max().item()
    torch.testing.assert_close(theirs_16, ours_16, rtol=BF16_RTOL, atol=BF16_RTOL * scale)


@pytest.mark.slow
def test_transformers_greedy_generate_is_ours(checkpoint, tmp_path):
    from evals.checkpoint_model import load_checkpoint
    from evals.generate import generate

    export_hf(checkpoint, tmp_path / "hf")
    loaded = load_checkpoint(checkpoint, CPU)
    model, tokenizer = _hf_model(tmp_path / "hf"), _hf_tokenizer(tmp_path / "hf")
    ours = generate(loaded.model, loaded.tokenizer, PROMPTS, samples=1, max_new_tokens=12, device=CPU)
    theirs = []
    for prompt in PROMPTS:
        encoded = tokenizer(prompt, return_tensors="pt")
        out = model.generate(**encoded, max_new_tokens=12, do_sample=False)
        theirs.append([tokenizer.decode(out[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True)])
    assert theirs == ours
    assert any(text[0] for text in ours)  # something was generated to compare


@pytest.mark.slow
def test_the_tokenizer_loads_offline_and_encodes_as_the_trainer(gqa_run, tmp_path):
    from evals.checkpoint_model import load_checkpoint

    export_hf(gqa_run.checkpoint, tmp_path / "hf")
    loaded = load_checkpoint(gqa_run.checkpoint, CPU)
    lineage = json.loads((tmp_path / "hf" / LINEAGE_FILE).read_text())
    tokenizer_bytes = (tmp_path / "hf" / "tokenizer.json").read_bytes()
    assert hashlib.sha256(tokenizer_bytes).hexdigest() == lineage["tokenizer"]["sha256"] == loaded.tokenizer.sha256

    tokenizer, encoder = _hf_tokenizer(tmp_path / "hf"), loaded.tokenizer.load()
    for text in [*PROMPTS, "x = {'é': 1}  # ünïcode\n\ttabs", ""]:
        ids = encoder.encode(text, add_special_tokens=False).ids
        assert tokenizer(text)["input_ids"] == ids  # nothing added: the trainer adds nothing either
        assert tokenizer.decode(ids) == encoder.decode(ids)
    assert tokenizer.eos_token_id == tokenizer.bos_token_id == loaded.tokenizer.eod_id
    assert tokenizer.pad_token == "<|pad|>" != tokenizer.eos_token
    assert tokenizer.model_max_length == loaded.config.model.max_seq_len


def _copy_checkpoint(source: Path, into: Path, edit=None) -> Path:
    """A copy of a checkpoint under ``into/run/checkpoints``, its lineage changed by ``edit``."""
    copy = into / "run" / "checkpoints" / source.name
    shutil.copytree(source, copy)
    if edit is not None:
        lineage = json.loads((copy / "lineage.json").read_text())
        edit(lineage)
        (copy / "lineage.json").write_text(json.dumps(lineage))
    return copy


@pytest.mark.slow
def test_the_folder_keeps_the_lineage_without_its_credentials(gqa_run, tmp_path):
    secrets = ["s3cr3t-pw", "tok-4567", "AKIAEXAMPLEKEY"]

    def plant(lineage: dict) -> None:
        lineage["manifest"]["catalog"]["uri"] = "postgresql://factory:s3cr3t-pw@db.internal/lake"
        lineage["components"][0]["runs"] = [
            {"job": "ingest", "inputs": [{"uri": "https://data.example/raw.jsonl?token=tok-4567"}]},
            {"job": "ingest", "params": {"source": "s3n://AKIAEXAMPLEKEY:s3cr3t-pw@bucket/raw"}},
        ]

    copy = _copy_checkpoint(gqa_run.checkpoint, tmp_path, plant)
    export_hf(copy, tmp_path / "hf")
    written = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
    assert not [(name, s) for name, data in written.items() for s in secrets if s.encode() in data]

    lineage = json.loads(written[LINEAGE_FILE])
    original = json.loads((gqa_run.checkpoint / "lineage.json").read_text())
    assert lineage["manifest"]["catalog"]["uri"] == "postgresql://factory:***@db.internal/lake"
    assert lineage["components"][0]["runs"][0]["inputs"][0]["uri"] == "https://data.example/raw.jsonl?token=***"
    assert lineage["manifest"]["fingerprint"] == original["manifest"]["fingerprint"]
    assert [c["snapshot_id"] for c in lineage["components"]] == [c["snapshot_id"] for c in original["components"]]
    assert (lineage["step"], lineage["loader_position"]) == (original["step"], original["loader_position"])
    assert json.loads(written[TRAINING_CONFIG_FILE]) == original["config"]


def _clear_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    return error


def _left_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.slow
def test_factory_export_writes_once_and_refuses_what_it_would_overwrite(gqa_run, tmp_path, capsys):
    out = tmp_path / "models" / "gqa"  # its parent is made too
    done = run_factory("export", str(gqa_run.run_dir), "--format", "hf", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"exported step 6 of {gqa_run.checkpoint}" in done.stdout  # a run folder: its newest checkpoint
    files = ["config.json", LINEAGE_FILE, TRAINING_CONFIG_FILE, "generation_config.json", "model.safetensors"]
    files += ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    assert _left_in(out) == files and _left_in(out.parent) == ["gqa"]
    first = {name: (out / name).read_bytes() for name in files}

    again = _clear_error(factory_here(capsys, "export", str(gqa_run.checkpoint), "--output", str(out)))
    assert "exists and is not empty" in again and "--force" in again

    (out / "notes.txt").write_text("mine")
    replaced = run_factory("export", str(gqa_run.checkpoint), "--output", str(out), "--force")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert _left_in(out) == files and _left_in(out.parent) == ["gqa"]  # replaced whole, nothing left beside
    assert {name: (out / name).read_bytes() for name in files} == first  # the same checkpoint, the same bytes

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("years of work")
    refused = _clear_error(factory_here(capsys, "export", str(gqa_run.checkpoint), "--output", str(foreign), "--force"))
    assert "not a folder factory export wrote" in refused
    assert _left_in(foreign) == ["thesis.tex"] and _left_in(tmp_path) == ["mine", "models"]
    below_a_file = _clear_error(
        factory_here(capsys, "export", str(gqa_run.checkpoint), "--output", str(foreign / "thesis.tex" / "x"))
    )
    assert "thesis.tex is a file, not a folder" in below_a_file and _left_in(foreign) == ["thesis.tex"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_factory("export", str(gqa_run.checkpoint), "--output", str(empty)).returncode == 0
    assert _left_in(empty) == files


@pytest.mark.slow
def test_a_missing_or_half_written_checkpoint_is_refused_and_nothing_written(gqa_run, tmp_path, capsys):
    out = tmp_path / "hf"
    missing = _clear_error(factory_here(capsys, "export", str(tmp_path / "nowhere"), "--output", str(out)))
    assert "is not a checkpoint" in missing

    interrupted = _copy_checkpoint(gqa_run.checkpoint, tmp_path / "a")
    (interrupted / "COMPLETE").unlink()  # a save that died before its marker
    assert "incomplete checkpoint" in _clear_error(
        factory_here(capsys, "export", str(interrupted), "--output", str(out))
    )

    damaged = _copy_checkpoint(gqa_run.checkpoint, tmp_path / "b")
    (damaged / "__0_0.distcp").write_bytes(b"")  # its weights lost after it was complete
    error = _clear_error(factory_here(capsys, "export", str(damaged), "--output", str(out)))
    assert f"{damaged} cannot be read: a file of it is missing or damaged (EOFError)" in error
    # A lineage edited by hand: a TypeError's traceback, where factory eval said what was wrong.
    edited = _copy_checkpoint(
        gqa_run.checkpoint, tmp_path / "c", lambda lineage: lineage["config"]["model"].update(dim="x")
    )
    assert "model.dim must be an integer, got 'x'" in _clear_error(
        factory_here(capsys, "export", str(edited), "--output", str(out))
    )
    assert _left_in(tmp_path) == ["a", "b", "c"]  # no folder, and no half-written one beside it

    # The weights, the lineage and the tokenizer are what an export needs: not the manifest the
    # run trained on, which another machine, or a cleaned-up run, may lack.
    moved = _copy_checkpoint(
        gqa_run.checkpoint, tmp_path / "d", lambda lineage: lineage["manifest"].update(path=str(tmp_path / "gone.json"))
    )
    done = run_factory("export", str(moved), "--output", str(out))
    assert done.returncode == 0 and (out / "model.safetensors").is_file(), done.stderr[-2000:]


@pytest.mark.slow
def test_a_model_setting_without_a_llama_equivalent_is_refused_by_name(gqa_run, tmp_path, capsys):
    """The refusals on real checkpoints: one whose lineage records a LayerNorm (``norm =
    "layernorm"``, which the exported architectures' RMSNorm cannot compute), through the command,
    refused before its weights are read; a checkpoint of a newer trainer, whose lineage has a field
    the table does not know; and the table as it could be, a field at a value its entry refuses."""
    layernorm = _copy_checkpoint(
        gqa_run.checkpoint, tmp_path / "a", lambda lineage: lineage["config"]["model"].update(norm="layernorm")
    )
    error = _clear_error(factory_here(capsys, "export", str(layernorm), "--output", str(tmp_path / "hf")))
    assert "model.norm = 'layernorm' has no equivalent" in error and "nothing was exported" in error
    newer = _copy_checkpoint(
        gqa_run.checkpoint, tmp_path / "b", lambda lineage: lineage["config"]["model"].update(mixture_of_experts=8)
    )
    error = _clear_error(factory_here(capsys, "export", str(newer), "--output", str(tmp_path / "hf")))
    assert "model.mixture_of_experts = 8: the Hugging Face export does not know this field" in error
    assert _left_in(tmp_path) == ["a", "b"]

    without_rope = {name: field for name, field in FIELDS.items() if name != "rope_theta"}
    with pytest.raises(InputError, match=r"model\.rope_theta = 500000\.0: the Hugging Face export does not know"):
        export_hf(gqa_run.checkpoint, tmp_path / "hf", fields=without_rope)
    no_gqa = {**FIELDS, "n_kv_heads": only(0, "this architecture has no grouped-query attention")}
    with pytest.raises(InputError, match=r"model\.n_kv_heads = 2 has no equivalent .*no grouped-query attention"):
        export_hf(gqa_run.checkpoint, tmp_path / "hf", fields=no_gqa)
    assert _left_in(tmp_path) == ["a", "b"]


@pytest.mark.slow
def test_a_full_disk_mid_export_leaves_nothing_half_written(gqa_run, tmp_path, capsys):
    from tests.factory_cli.test_errors import mounted_tmpfs

    with mounted_tmpfs(tmp_path / "small", "size=128k") as small:
        error = _clear_error(factory_here(capsys, "export", str(gqa_run.checkpoint), "--output", str(small / "hf")))
        assert "space" in error.lower()
        assert _left_in(small) == []


# The exported variants, and the Hugging Face class that must compute each.
EXPORTED = {
    "default": ({}, "LlamaForCausalLM"),
    "tied": ({"tie_embeddings": True}, "LlamaForCausalLM"),
    "sliding_window": ({"sliding_window": 5}, "MistralForCausalLM"),
    "qk_norm": ({"qk_norm": True}, "Qwen3ForCausalLM"),
    "qk_norm_sliding_window_tied": ({"qk_norm": True, "sliding_window": 5, "tie_embeddings": True}, "Qwen3ForCausalLM"),
}


@pytest.mark.parametrize("variant", EXPORTED)
def test_transformers_computes_each_exported_variant(variant, tmp_path):
    """The config and weights export_hf writes, for a model whose every weight (norms' scales
    included, which a wrong QK-norm order would then show) is random: transformers' class must
    compute our logits over 24 tokens, past the window."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from evals.hf_export import hf_state_dict
    from trainer.model import Transformer

    components, architecture = EXPORTED[variant]
    model = Transformer(ModelConfig(preset="tiny", n_kv_heads=2, vocab_size=97, max_seq_len=32, **components))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3 + (1 if param.ndim == 1 else 0))
    config = hf_config(model.cfg)
    assert config["architectures"] == [architecture]
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file(hf_state_dict(model), tmp_path / "model.safetensors", metadata={"format": "pt"})
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, local_files_only=True).eval()
    assert type(theirs).__name__ == architecture
    tokens = torch.randint(0, 97, (2, 24), generator=generator)
    with torch.no_grad():
        torch.testing.assert_close(theirs(tokens).logits, model(tokens), **FP32_TOLERANCE)
        if model.cfg.tie_embeddings:
            assert theirs.lm_head.weight.data_ptr() == theirs.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize(
    ("components", "refused"),
    [
        ({"norm": "layernorm"}, "model.norm = 'layernorm' has no equivalent"),
        ({"feed_forward": "gelu"}, "model.feed_forward = 'gelu' has no equivalent"),
        ({"feed_forward": "squared_relu"}, "model.feed_forward = 'squared_relu' has no equivalent"),
        ({"positions": "none"}, "model.positions = 'none' has no equivalent"),
    ],
)
def test_components_without_an_equivalent_are_refused_by_name(components, refused):
    with pytest.raises(InputError, match=refused):
        hf_config(ModelConfig(preset="tiny", vocab_size=97, max_seq_len=32, **components))


def test_every_model_field_has_an_entry_and_a_documented_row():
    """The table covers ModelConfig (a new field fails here until it says how config.json holds it),
    and docs/training.md's Export section has a row for each."""
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(FIELDS) == fields
    assert {f"model.{name}" for name in fields} <= documented(section("training.md", "## Export"))
    config = hf_config(ModelConfig(preset="1b", vocab_size=32000, max_seq_len=4096))
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (32, 8, 64)
