"""The training config: TOML sections into validated dataclasses, every field documented here.

    [run]        dir, seed, metrics_port, metrics_host
    [data]       manifest, tokenizer, seq_len, global_batch_size, backend, num_shards
    [model]      preset or dimensions
    [train]      steps, micro_batch_size, grad_clip, compile, dtype
    [optim]      lr, betas, weight_decay, warmup_steps, min_lr_ratio
    [eval]       every, batches, manifest
    [checkpoint] every, keep
    [mlflow]     enabled, tracking_uri, experiment

``--set section.key=value`` overrides a field: the value parsed as TOML, else taken as text
(``run.dir=runs/a``); text that TOML reads as another type (``mlflow.experiment=2024``) must be
quoted (``mlflow.experiment="2024"``), and a string key given one unquoted is refused saying so.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lakehouse.config_keys import refuse_unknown_keys, refuse_wrong_types
from lakehouse.errors import ConfigError
from lakehouse.redact import redact
from streaming_loader.config import default_shards
from trainer.components.names import FEED_FORWARD_NAMES, HIDDEN_PER_DIM, NORM_NAMES, POSITION_NAMES


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass
class ModelConfig:
    preset: str = "tiny"  # tiny (~1.2M params, 8k vocabulary; CPU) · small (~20M) · 1b (GPU); fields override
    dim: int = 0  # model width; 0 takes the preset's
    n_layers: int = 0  # transformer blocks
    n_heads: int = 0  # attention heads
    n_kv_heads: int = 0  # key/value heads (grouped-query attention); 0 = n_heads
    hidden_dim: int = 0  # feed-forward hidden width; 0 = 8/3 · dim (swiglu) or 4 · dim (the others), rounded up to 64
    vocab_size: int = 0  # 0 = the tokenizer's vocabulary size (set at start-up)
    max_seq_len: int = 0  # longest sequence the rotary table covers; 0 = data.seq_len
    norm_eps: float = 1e-5  # the norms' epsilon
    rope_theta: float = 10000.0  # rotary base
    # The swappable components (trainer/components/); the defaults are the model before them.
    norm: str = "rmsnorm"  # rmsnorm · layernorm
    feed_forward: str = "swiglu"  # swiglu · gelu · squared_relu
    qk_norm: bool = False  # normalise each head's queries and keys (with model.norm) before attention
    tie_embeddings: bool = False  # the output layer is the input embeddings' matrix
    positions: str = "rope"  # rope (rotary) · none (NoPE)
    sliding_window: int = 0  # a query attends to the last W positions, itself included; 0 = all before it

    PRESETS: ClassVar[dict[str, dict[str, int]]] = {
        "tiny": {"dim": 64, "n_layers": 2, "n_heads": 4},
        "small": {"dim": 384, "n_layers": 6, "n_heads": 6},
        "1b": {"dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "hidden_dim": 8192},
    }

    def __post_init__(self) -> None:
        _check(self.preset in self.PRESETS, f"model.preset must be one of {sorted(self.PRESETS)}, got {self.preset!r}")
        for key, value in self.PRESETS[self.preset].items():
            if not getattr(self, key):
                setattr(self, key, value)
        _check(self.dim > 0 and self.n_layers > 0 and self.n_heads > 0, "model dim, n_layers, n_heads must be > 0")
        _check(self.dim % self.n_heads == 0, f"model.dim {self.dim} must divide by n_heads {self.n_heads}")
        _check(
            (self.dim // self.n_heads) % 2 == 0, "model head size (dim / n_heads) must be even for rotary embeddings"
        )
        _check(self.kv_heads > 0 and self.n_heads % self.kv_heads == 0, "model.n_heads must divide by n_kv_heads")
        for key in ("hidden_dim", "vocab_size", "max_seq_len", "n_kv_heads"):
            _check(getattr(self, key) >= 0, f"model.{key} must be >= 0 (0: {key}'s default), got {getattr(self, key)}")
        _check(self.norm_eps > 0 and self.rope_theta > 0, "model.norm_eps and model.rope_theta must be > 0")
        self._check_components()
        if not self.hidden_dim:
            self.hidden_dim = 64 * -(-int(HIDDEN_PER_DIM[self.feed_forward] * self.dim) // 64)

    def _check_components(self) -> None:
        for key, names in (("norm", NORM_NAMES), ("feed_forward", FEED_FORWARD_NAMES), ("positions", POSITION_NAMES)):
            value = getattr(self, key)
            _check(value in names, f"model.{key} must be one of {', '.join(names)}; got {value!r}")
        for key in ("qk_norm", "tie_embeddings"):
            _check(
                isinstance(getattr(self, key), bool), f"model.{key} must be true or false, got {getattr(self, key)!r}"
            )
        _check(
            isinstance(self.sliding_window, int) and self.sliding_window >= 0,
            f"model.sliding_window must be a whole number of positions >= 0 (0: no window), got {self.sliding_window!r}",
        )

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads


@dataclass
class RunConfig:
    dir: str = "runs/default"  # run directory: checkpoints/, metrics.jsonl, config.resolved.json
    seed: int = 0  # model initialisation seed (the data order is the manifest's seed)
    metrics_port: int = 0  # serve Prometheus metrics on this port + the local rank; 0 = off
    metrics_host: str = "127.0.0.1"  # address the metrics server binds ("0.0.0.0" for a remote Prometheus)

    def __post_init__(self) -> None:
        _check(0 <= self.metrics_port < 65536, "run.metrics_port must be a port number (0 = no metrics server)")
        # "" is the current folder to pathlib: checkpoints/ and metrics.jsonl would land wherever the command ran.
        _check(
            bool(self.dir.strip()),
            f'run.dir must name the run\'s folder (e.g. "runs/my-run"), got {self.dir!r}',
        )

    def check_local_ranks(self, nproc: int) -> None:
        """Each of a machine's ``nproc`` ranks serves metrics on ``metrics_port`` + its local rank:
        the last one must be a port too (refused before torchrun starts, not on that rank)."""
        last = self.metrics_port + nproc - 1
        _check(
            not self.metrics_port or last < 65536,
            f"run.metrics_port {self.metrics_port} + local rank up to {nproc - 1} reaches {last}, past the last "
            f"port 65535: set run.metrics_port to at most {65536 - nproc} for {nproc} ranks a machine",
        )


@dataclass
class DataConfig:
    manifest: str = ""  # pinned mixture manifest (factory mix pin)
    tokenizer: str = ""  # HF tokenizer.json
    seq_len: int = 256  # tokens per training sequence
    global_batch_size: int = 8  # sequences per optimizer step across all ranks
    backend: str = "local"  # loader backend: local (in process) or ray
    num_shards: int = 0  # logical shards of the stream; 0 = the loader's default (from the global batch)

    def __post_init__(self) -> None:
        _check(self.num_shards >= 0, "data.num_shards must be >= 0 (0: the loader's default)")
        _check(bool(self.manifest), "data.manifest is required (a manifest from `factory mix pin`)")
        _check(bool(self.tokenizer), "data.tokenizer is required (a tokenizer.json)")
        _check(self.seq_len > 0 and self.global_batch_size > 0, "data.seq_len and data.global_batch_size must be > 0")
        _check(self.backend in ("local", "ray"), f"data.backend must be local or ray, got {self.backend!r}")


@dataclass
class TrainConfig:
    steps: int = 100  # optimizer steps in the whole run
    micro_batch_size: int = 0  # sequences per forward pass per rank; 0 = the rank's whole share (no accumulation)
    grad_clip: float = 1.0  # clip the global gradient norm to this; 0 = no clipping
    compile: bool = False  # torch.compile each block
    dtype: str = "auto"  # compute dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16

    def __post_init__(self) -> None:
        _check(self.steps > 0, "train.steps must be > 0")
        _check(self.micro_batch_size >= 0, "train.micro_batch_size must be >= 0")
        _check(self.grad_clip >= 0, "train.grad_clip must be >= 0")
        _check(self.dtype in ("auto", "float32", "bfloat16"), "train.dtype must be auto, float32 or bfloat16")


@dataclass
class OptimConfig:
    lr: float = 3e-3  # peak learning rate (AdamW)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW betas
    weight_decay: float = 0.1  # AdamW decoupled weight decay
    warmup_steps: int = 10  # linear warm-up from 0 to lr
    min_lr_ratio: float = 0.1  # cosine decay floor as a fraction of lr

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        _check(self.lr > 0, "optim.lr must be > 0")
        _check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "optim.betas must be two values in [0, 1)")
        _check(self.warmup_steps >= 0 and 0 <= self.min_lr_ratio <= 1, "optim warm-up >= 0 and min_lr_ratio in [0, 1]")
        # A negative decay grows every weight each step (AdamW takes it as given) until the loss diverges.
        _check(self.weight_decay >= 0, f"optim.weight_decay must be >= 0 (0: no decay), got {self.weight_decay}")


@dataclass
class EvalConfig:
    every: int = 0  # evaluate held-out loss every N steps (and at the last step); 0 = never
    batches: int = 2  # global batches of held-out data per evaluation (each mixes the components by weight)
    manifest: str = ""  # manifest whose held-out split is evaluated; "" = data.manifest. Runs on other
    # mixtures of the same snapshots (sweeps) name one here so all evaluate the same held-out batches.

    def __post_init__(self) -> None:
        _check(self.every >= 0 and self.batches > 0, "eval.every must be >= 0 and eval.batches > 0")


@dataclass
class CheckpointConfig:
    every: int = 0  # save every N steps (and at the last step); 0 = only at the end
    keep: int = 3  # newest complete checkpoints kept; older ones are removed

    def __post_init__(self) -> None:
        _check(self.every >= 0 and self.keep > 0, "checkpoint.every must be >= 0 and checkpoint.keep > 0")


def _tracking_by_default() -> bool:
    # An operator's switch for machines where no run should be tracked unless its config says so
    # (CI, a test suite): it changes the default only, so a config's explicit value still wins.
    return os.environ.get("FACTORY_MLFLOW", "on") != "off"


@dataclass
class MlflowConfig:
    # log the run to MLflow (rank 0, trainer/tracking.py); false = off; default true, false when FACTORY_MLFLOW=off
    enabled: bool = field(default_factory=_tracking_by_default)
    tracking_uri: str = ""  # "" = $MLFLOW_TRACKING_URI, else SQLite at $FACTORY_HOME/mlflow/mlflow.db
    experiment: str = ""  # "" = factory/<factory>/<run> for a factory definition's run, else factory/train

    def __post_init__(self) -> None:
        _check(isinstance(self.enabled, bool), f"mlflow.enabled must be true or false, got {self.enabled!r}")
        _check(
            redact(self.tracking_uri) == self.tracking_uri,
            "mlflow.tracking_uri must not hold a credential (it is written to config.resolved.json and lineage): "
            "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN, instead",
        )


@dataclass
class Config:
    data: DataConfig
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)

    def __post_init__(self) -> None:
        if not self.model.max_seq_len:
            self.model.max_seq_len = self.data.seq_len
        _check(self.data.seq_len <= self.model.max_seq_len, "data.seq_len must be <= model.max_seq_len")

    def check_world(self, world: int) -> None:
        """Reject settings that would hang or mis-shard only once ranks are known (fail fast)."""
        gbs = self.data.global_batch_size
        _check(gbs % world == 0, f"data.global_batch_size {gbs} must divide by the number of ranks {world}")
        micro = self.train.micro_batch_size
        _check(
            not micro or (gbs // world) % micro == 0,
            f"each rank's {gbs // world} sequences must divide by train.micro_batch_size {micro}",
        )
        # The loader's own rules on shards, here so that a bad world is refused before torchrun starts.
        shards = self.data.num_shards or default_shards(gbs)
        named = "data.num_shards" if self.data.num_shards else "the default data.num_shards (from the global batch)"
        _check(gbs % shards == 0, f"data.num_shards {shards} must divide data.global_batch_size {gbs}")
        _check(
            shards % world == 0,
            f"the number of ranks {world} must divide {named}, {shards}: set data.num_shards to a multiple of "
            f"{world} that divides {gbs}, and keep it for the whole run (it is part of the stream's definition)",
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SECTION_TYPES = {
    "data": DataConfig,
    "run": RunConfig,
    "model": ModelConfig,
    "train": TrainConfig,
    "optim": OptimConfig,
    "eval": EvalConfig,
    "checkpoint": CheckpointConfig,
    "mlflow": MlflowConfig,
}


def parse_override(text: str) -> tuple[str, str, Any]:
    """``"train.steps=20"`` → ``("train", "steps", 20)``."""
    key, sep, raw = text.partition("=")
    section, dot, name = key.strip().partition(".")
    # SECTION.NAME, not section.key: the redactor (lakehouse/redact.py) masks the value after a "key=".
    _check(
        bool(sep and dot and section and name), f"--set takes SECTION.NAME=VALUE (e.g. train.steps=20), got {text!r}"
    )
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as exc:
        # Text that opens as a TOML string, array or table was meant as one: taken as it is, an
        # unclosed quote would end up in the value (run.dir='"runs/a' names a folder `"runs`).
        _check(
            not raw.strip().startswith(('"', "'", "[", "{")),
            f"--set {key.strip()}: {raw.strip()!r} opens as a TOML value but is not one ({exc}); close its quotes "
            "or brackets",
        )
        value = raw
    return section, name, value


def _refuse_other_toml(value: Any, text: str, section: str, cls: type | None, name: str) -> None:
    """Refuse a ``--set`` value for a string key that TOML reads as something else
    (``mlflow.experiment=2024``: a number), saying to quote it: the type check alone would say
    "must be a string, got 2024" of what the user typed as text. Unquoted text that TOML cannot
    read (``run.dir=/tmp/x``) is taken as it is and never reaches here."""
    if cls is None or isinstance(value, str) or name not in {f.name for f in dataclasses.fields(cls)}:
        return
    if typing.get_type_hints(cls).get(name) is not str:
        return
    given = text.partition("=")[2].strip()
    kind = (
        "a boolean" if isinstance(value, bool)
        else "a number" if isinstance(value, (int, float))
        else "an array" if isinstance(value, list)
        else "a table" if isinstance(value, dict)
        else "a date or time"
    )  # fmt: skip
    # SECTION.NAME=, not the key's own name: the redactor masks the value after a "token=".
    raise ConfigError(
        f"{section}.{name} must be a string, got {given}: --set reads VALUE as TOML, where {given} is {kind}; "
        "put text in double quotes, as in --set 'SECTION.NAME=\"text\"'"
    )


def load_config(path: str | Path | None, overrides: list[str] = (), raw: dict | None = None) -> Config:
    """A validated config from a TOML file (or ``raw`` dict) and ``--set`` overrides."""
    sections = load_sections(path, overrides, raw, _SECTION_TYPES)
    _check("data" in sections, "the config needs a [data] section with manifest and tokenizer")
    return Config(**sections)


def load_sections(
    path: str | Path | None,
    overrides: list[str],
    raw: dict | None,
    types: dict[str, type],
    defaults: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Each section of a TOML file (or ``raw`` dict), with ``--set`` overrides, as its dataclass in
    ``types``; unknown sections and keys refused. ``defaults``: values a section takes unless set."""
    if raw is None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    raw = {section: dict(values) for section, values in raw.items()}
    for text in overrides:
        section, name, value = parse_override(text)
        _refuse_other_toml(value, text, section, types.get(section), name)
        raw.setdefault(section, {})[name] = value
    sections = {}
    for section, values in raw.items():
        cls = types.get(section)
        _check(cls is not None, f"unknown config section [{section}]; known: {', '.join(types)}")
        known = {f.name for f in dataclasses.fields(cls)}
        refuse_unknown_keys(values, known, f"[{section}]")
        refuse_wrong_types(values, cls, section)
        sections[section] = cls(**{**(defaults or {}).get(section, {}), **values})
    return sections
