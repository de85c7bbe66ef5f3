"""A checkpoint as a Hugging Face model folder (docs/training.md, "Export"; docs/architecture.md, "Export").

The folder is what ``LlamaForCausalLM`` (``MistralForCausalLM`` for a sliding window,
``Qwen3ForCausalLM`` for QK-norm) and ``AutoTokenizer.from_pretrained`` load, and what vLLM and
SGLang serve: ``config.json``, ``generation_config.json``, ``model.safetensors``, the run's
``tokenizer.json`` byte for byte with ``tokenizer_config.json`` and ``special_tokens_map.json``,
and beside them ``factory-lineage.json`` and ``factory-training-config.json``, so the folder still
says which data made it.

Faithful or refused: ``FIELDS`` says, for every field of ``ModelConfig``, how ``config.json``
expresses it. A field missing from the table, or at a value its entry does not accept, is refused
with its name: transformers would otherwise run a model other than the one trained. The weights
are renamed to transformers' names; the query and key rows are reordered within each head,
because our rotary embedding rotates interleaved pairs (``x[..., 0::2]``, ``x[..., 1::2]``) and
transformers' Llama rotates halves (``rotate_half``), as Meta's checkpoints are converted by
transformers' ``convert_llama_weights_to_hf.py``.

The folder is written under a temporary name beside it and renamed into place once whole: a
failed export leaves no half-written folder at its name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from evals.checkpoint_model import load_checkpoint, resolve_checkpoint
from lakehouse.errors import InputError
from lakehouse.local_files import sync_file, sync_folders
from lakehouse.redact import redact_json
from streaming_loader.tokenize import TokenizerSpec
from trainer.config import ModelConfig, load_sections
from trainer.lineage import read_lineage
from trainer.model import Transformer

LINEAGE_FILE = "factory-lineage.json"
TRAINING_CONFIG_FILE = "factory-training-config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class Field:
    """How one ``ModelConfig`` field is said in the ``config.json`` of a Llama, Mistral or Qwen3 model."""

    keys: Callable[[Any, ModelConfig], dict[str, Any]]  # the config.json keys for the field's value
    accepts: Callable[[Any], bool] = lambda _value: True  # the values that have an equivalent
    otherwise: str = ""  # why the others have none


def same(key: str) -> Field:
    """The field's value as ``config.json``'s ``key``."""
    return Field(lambda value, _model: {key: value})


def only(value: Any, because: str) -> Field:
    """A field that ``LlamaForCausalLM`` can only be at ``value``; nothing to write when it is."""
    return Field(lambda _value, _model: {}, lambda given: given == value, because)


def _sliding_window(value: int, model: ModelConfig) -> dict[str, Any]:
    if not value:
        return {}
    if model.qk_norm:  # Qwen3 slides only from layer max_window_layers on: 0, every layer
        return {"sliding_window": value, "use_sliding_window": True, "max_window_layers": 0}
    return {"sliding_window": value, **MISTRAL}


# Every field of ModelConfig, and how config.json says it. A field that the model learns to swap
# gets its entry here: `same` where the config has a key for it, `only` where the architectures
# know one value of it, a Field of its own otherwise.
FIELDS: dict[str, Field] = {
    "preset": Field(lambda _value, _model: {}),  # a name for defaults, already resolved into the fields below
    "dim": same("hidden_size"),
    "n_layers": same("num_hidden_layers"),
    "n_heads": Field(lambda value, model: {"num_attention_heads": value, "head_dim": model.dim // value}),
    "n_kv_heads": Field(lambda _value, model: {"num_key_value_heads": model.kv_heads}),  # 0 means n_heads
    "hidden_dim": same("intermediate_size"),
    "vocab_size": same("vocab_size"),
    "max_seq_len": same("max_position_embeddings"),
    "norm_eps": same("rms_norm_eps"),
    # rope_parameters is transformers 5's key; rope_theta the one of the readers before it
    # (transformers 4, and vLLM and SGLang on it), which 5 still reads.
    "rope_theta": Field(
        lambda value, _model: {"rope_parameters": {"rope_type": "default", "rope_theta": value}, "rope_theta": value}
    ),
    "norm": only("rmsnorm", "its norms are RMSNorm"),
    "feed_forward": only("swiglu", "its feed-forward is SwiGLU, gated"),
    # Qwen3's q_norm and k_norm: an RMSNorm over each head's queries and keys before the rotation, as ours.
    "qk_norm": Field(lambda value, _model: QWEN3 if value else {}),
    "tie_embeddings": same("tie_word_embeddings"),
    "positions": only("rope", "it rotates every query and key: no model without positions"),
    # Mistral's (and Qwen3's) sliding_window: a query sees the last sliding_window keys, itself included, as ours.
    "sliding_window": Field(_sliding_window),
}

# What the model is whatever its config: RMSNorm, SwiGLU (silu), no biases; a Llama unless the
# fields above say a Mistral (a sliding window) or a Qwen3 (QK-norm), which are Llama with those.
ARCHITECTURE: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "pretraining_tp": 1,
    "initializer_range": 0.02,
    "use_cache": True,
}


MISTRAL: dict[str, Any] = {"architectures": ["MistralForCausalLM"], "model_type": "mistral"}
QWEN3: dict[str, Any] = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}


@dataclass(frozen=True)
class Exported:
    output: Path
    checkpoint: Path
    step: int
    parameters: int
    files: list[str]


def refuse_unknown_fields(section: Mapping[str, Any], fields: Mapping[str, Field] = FIELDS) -> None:
    """Refuse a ``[model]`` section (as a checkpoint's lineage recorded it) with a field the table
    does not know: checked before the model is built, so a checkpoint of a newer trainer is refused
    with its field's name rather than as a config this version cannot read."""
    for name, value in section.items():
        if name not in fields:
            raise InputError(_unknown(name, value))


def hf_config(model: ModelConfig, fields: Mapping[str, Field] = FIELDS) -> dict[str, Any]:
    """``config.json`` of a Llama (Mistral, Qwen3) computing what ``Transformer(model)`` computes;
    ``InputError`` naming the first field it cannot express."""
    config = dict(ARCHITECTURE)
    for each in dataclasses.fields(model):
        value = getattr(model, each.name)
        entry = fields.get(each.name)
        if entry is None:
            raise InputError(_unknown(each.name, value))
        if not entry.accepts(value):
            raise InputError(
                f"model.{each.name} = {value!r} has no equivalent in a Hugging Face LlamaForCausalLM, nor in "
                "MistralForCausalLM or Qwen3ForCausalLM "
                f"({entry.otherwise}): transformers, vLLM and SGLang would run another model than the one "
                "trained; nothing was exported"
            )
        config.update(entry.keys(value, model))
    return config


def _unknown(name: str, value: Any) -> str:
    return (
        f"model.{name} = {value!r}: the Hugging Face export does not know this field of the model, so it cannot "
        "tell whether LlamaForCausalLM computes the same model; nothing was exported. Export with the factory "
        f"version that trained the checkpoint, or teach evals/hf_export.py FIELDS how config.json says {name}"
    )


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """Our weights under transformers' Llama names, query and key rows in ``rotate_half`` order.
    Tied embeddings are written once: transformers ties ``lm_head`` to them (``tie_word_embeddings``)."""
    cfg = model.cfg
    ours = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    hf = {
        "model.embed_tokens.weight": ours.pop("tok_embeddings.weight"),
        "model.norm.weight": ours.pop("norm.weight"),
    }
    output = ours.pop("output.weight")
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = output
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        hf[dst + "self_attn.q_proj.weight"] = _halves_order(ours.pop(src + "attention.wq.weight"), cfg.n_heads)
        hf[dst + "self_attn.k_proj.weight"] = _halves_order(ours.pop(src + "attention.wk.weight"), cfg.kv_heads)
        hf[dst + "self_attn.v_proj.weight"] = ours.pop(src + "attention.wv.weight")
        hf[dst + "self_attn.o_proj.weight"] = ours.pop(src + "attention.wo.weight")
        hf[dst + "mlp.gate_proj.weight"] = ours.pop(src + "feed_forward.w1.weight")
        hf[dst + "mlp.up_proj.weight"] = ours.pop(src + "feed_forward.w3.weight")
        hf[dst + "mlp.down_proj.weight"] = ours.pop(src + "feed_forward.w2.weight")
        hf[dst + "input_layernorm.weight"] = ours.pop(src + "attention_norm.weight")
        hf[dst + "post_attention_layernorm.weight"] = ours.pop(src + "ffn_norm.weight")
        if cfg.qk_norm:  # a scale per element of a head, reordered as the rows are
            hf[dst + "self_attn.q_norm.weight"] = _halves_order_scale(ours.pop(src + "attention.q_norm.weight"))
            hf[dst + "self_attn.k_norm.weight"] = _halves_order_scale(ours.pop(src + "attention.k_norm.weight"))
    if ours:  # a weight the model gained without the export learning it: never dropped silently
        raise RuntimeError(f"the Hugging Face export has no name for the weights {sorted(ours)}")
    return {name: tensor.contiguous() for name, tensor in hf.items()}


def _halves_order(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of a query or key projection reordered within each head from interleaved rotary pairs
    (0, 1), (2, 3)… to transformers' halves (0, d/2), (1, d/2 + 1)…: even rows first, then odd.
    Queries and keys get the same order, so their dot products, and attention, are unchanged."""
    rows, columns = weight.shape
    return weight.view(heads, rows // heads // 2, 2, columns).transpose(1, 2).reshape(rows, columns)


def _halves_order_scale(scale: torch.Tensor) -> torch.Tensor:
    """A head's scale ``[head_dim]`` (QK-norm's) in the order ``_halves_order`` gives its rows."""
    return _halves_order(scale[:, None], 1)[:, 0]


def tokenizer_files(tokenizer: TokenizerSpec, max_seq_len: int) -> dict[str, dict[str, Any]]:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` for transformers' fast tokenizer
    over the run's ``tokenizer.json``.

    The trainer knows one special token, the end of a document, which separates the documents it
    packs: it is the end of sequence, and the beginning too (every document but a sequence's first
    follows one), as in GPT-2. Nothing is added to an encoded text, as the trainer adds nothing.
    Padding is the tokenizer's own pad token where it has one (``factory tokenizer train`` makes
    ``<|pad|>``), else the end of document."""
    pad = tokenizer.metadata.get("pad_token")
    if not pad or tokenizer.load().token_to_id(pad) is None:
        pad = tokenizer.eod_token
    special = {"bos_token": tokenizer.eod_token, "eos_token": tokenizer.eod_token, "pad_token": pad}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_seq_len,
    }
    return {"tokenizer_config.json": config, "special_tokens_map.json": special}


def special_token_ids(tokenizer: TokenizerSpec, special: Mapping[str, str]) -> dict[str, int]:
    encoder = tokenizer.load()
    return {f"{role}_id": encoder.token_to_id(special[role]) for role in ("bos_token", "eos_token", "pad_token")}


def export_hf(
    checkpoint: str | Path, output: str | Path, force: bool = False, fields: Mapping[str, Field] = FIELDS
) -> Exported:
    """Write the Hugging Face folder of ``checkpoint`` (a ``checkpoints/step-N`` folder, or a run
    folder: its newest) at ``output``, which must not exist, be empty, or with ``force`` be an
    earlier export (replaced whole)."""
    output = Path(os.path.abspath(output))
    _check_output(output, force)
    path = resolve_checkpoint(checkpoint)
    recorded = read_lineage(path, with_config=True)["config"].get("model", {})
    refuse_unknown_fields(recorded, fields)
    # Checked as `factory train` checks a config (a lineage edited by hand may hold "x" for a
    # number), then refused before the weights are read when a setting has no Hugging Face form.
    model = load_sections(None, [], {"model": recorded}, {"model": ModelConfig})["model"]
    hf_config(model, fields)
    loaded = load_checkpoint(path, torch.device("cpu"), check_manifest=False)
    config = hf_config(loaded.config.model, fields)
    tokenizer_json = loaded.tokenizer.text.encode("utf-8")
    if hashlib.sha256(tokenizer_json).hexdigest() != loaded.tokenizer.sha256:  # read as text, with replacements
        raise InputError(f"{loaded.lineage['tokenizer']['path']} is not UTF-8 text; it cannot be a tokenizer.json")
    tokenizer_configs = tokenizer_files(loaded.tokenizer, loaded.config.model.max_seq_len)
    ids = special_token_ids(loaded.tokenizer, tokenizer_configs["special_tokens_map.json"])
    config.update(ids, dtype="float32", torch_dtype="float32")  # the weights as trained; torch_dtype: transformers 4
    # The trainer masks the catalog it records, but a lineage also repeats what pipeline runs
    # recorded of their inputs and parameters, and a folder meant to be published gets no second chance.
    lineage = redact_json(loaded.lineage)
    documents = {
        "config.json": config,
        "generation_config.json": {**ids, "do_sample": False},
        **tokenizer_configs,
        LINEAGE_FILE: lineage,
        TRAINING_CONFIG_FILE: lineage["config"],
    }
    weights = hf_state_dict(loaded.model)

    def write(folder: Path) -> None:
        from safetensors.torch import save

        # The bytes are written here rather than by safetensors' save_file, which reports a full disk
        # as an error of its own instead of an OSError (the CLI says what an OSError means). "format":
        # "pt" is what transformers' loader asks a safetensors file's metadata for.
        (folder / WEIGHTS_FILE).write_bytes(save(weights, metadata={"format": "pt"}))
        (folder / "tokenizer.json").write_bytes(tokenizer_json)
        for name, document in documents.items():
            (folder / name).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")

    files = _publish_folder(output, force, write)
    return Exported(output, path, loaded.step, loaded.model.num_params(), files)


def _check_output(output: Path, force: bool) -> None:
    if output.is_file():
        raise InputError(f"--output {output} is a file; give a folder to write the model into")
    above = next(p for p in output.parents if p.exists())  # the folders below it are made for the export
    if not above.is_dir():
        raise InputError(f"--output {output}: {above} is a file, not a folder; give a folder to write the model into")
    if not output.is_dir() or not any(output.iterdir()):
        return
    if not force:
        raise InputError(
            f"--output {output} exists and is not empty; give a new or empty folder, or --force to replace "
            "an earlier export there"
        )
    if not (output / LINEAGE_FILE).is_file():
        raise InputError(
            f"--output {output} is not empty and not a folder factory export wrote (no {LINEAGE_FILE}): "
            "not replaced, even with --force; give another folder"
        )


def _publish_folder(output: Path, force: bool, write: Callable[[Path], None]) -> list[str]:
    """Run ``write`` into a new folder beside ``output``, sync it, and rename it to ``output``."""
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
    replaced = None
    try:
        write(staging)
        files = sorted(p.name for p in staging.iterdir())
        for name in files:
            os.chmod(staging / name, 0o644)  # safetensors and mkdtemp make theirs private; an export is to share
            sync_file(staging / name)
        os.chmod(staging, 0o755)
        if output.is_dir() and any(output.iterdir()):
            _check_output(output, force)  # again: it may have been filled since the first look
            replaced = output.with_name(f".{output.name}.replaced-{os.getpid()}")
            os.rename(output, replaced)
        os.replace(staging, output)  # onto nothing, or onto an empty folder: POSIX renames both
        sync_folders(output / files[0])
    except BaseException:
        if replaced is not None and not output.exists():
            os.rename(replaced, output)  # the earlier export back where it was
            replaced = None
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    return files
