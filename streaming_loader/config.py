"""The loader's settings, validated before anything starts (a bad setting must fail at step 0)."""

from __future__ import annotations

from dataclasses import dataclass

from lakehouse.errors import LoaderConfigError
from streaming_loader.plan import SPLITS

BACKENDS = ("ray", "local")
PACKINGS = ("concat", "pad")
# The default number of logical shards is the largest divisor of the global batch size up to
# this: enough to resume on up to this many data-parallel ranks, few enough that one rank's
# readers (shards x components sub-streams) stay light. Set num_shards for larger worlds.
DEFAULT_MAX_SHARDS = 16
# Far above any model's context; a window of seq_len + 1 tokens is gathered whole before the first
# batch, so an absurd value (1e12) filled memory instead of failing here.
MAX_SEQ_LEN = 1 << 22


def default_shards(global_batch_size: int) -> int:
    """The number of logical shards a stream has when ``num_shards`` is not given."""
    return max(d for d in range(1, min(DEFAULT_MAX_SHARDS, global_batch_size) + 1) if global_batch_size % d == 0)


@dataclass(frozen=True)
class LoaderConfig:
    seq_len: int
    """Tokens per training sequence; the loader packs windows of ``seq_len + 1`` tokens."""
    global_batch_size: int
    """Sequences per global batch, over all data-parallel ranks."""
    dp_rank: int = 0
    """This rank's index among the data-parallel ranks."""
    dp_world: int = 1
    """Number of data-parallel ranks; must divide ``num_shards``."""
    backend: str = "ray"
    """``ray``: Ray actors on every node read and tokenize; ``local``: this process's threads do. Same stream."""
    num_shards: int | None = None
    """Logical shards S (part of the stream's definition; any ``dp_world`` dividing it can resume).
    Default: the largest divisor of ``global_batch_size`` not above 16."""
    packing: str = "concat"
    """``concat``: documents run on across windows; ``pad``: a window never starts mid-document
    unless the document alone is longer than a window (the rest is padding, labels -100)."""
    shuffle_window: int = 1024
    """Documents are shuffled within aligned blocks of this many rows of a shard's slice."""
    split: str = "train"
    """``train``: documents outside the held-out split; ``heldout``: only those in it (for evals)."""
    eod_token: str | None = None
    """End-of-document token; default: the one the tokenizer records, else a well-known one."""
    read_bytes: int = 256 << 10
    """Text bytes a unit of reading grows to (a sub-stream's first units are smaller; no effect on the stream)."""
    max_document_bytes: int = 1 << 20
    """A document longer than this (UTF-8 bytes) is tokenized in pieces of at most this size, cut at a
    line end where there is one: what tokenizing one document may hold stays bounded (docs/loader.md,
    "Memory"). The ids near a cut may differ from the whole document's; part of the stream's definition."""
    read_cache_bytes: int = 256 << 20
    """Decoded blocks each reading process keeps (local: this process; ray: each reader actor): a block
    bigger than ``read_bytes`` is decoded once for all its units rather than once for each (0: never kept)."""
    ray_address: str | None = None
    """Ray cluster to join when Ray is not yet initialised; None starts a local one (or uses RAY_ADDRESS)."""
    ray_units_ahead: int = 1
    """Units each sub-stream may have queued or in flight ahead of its packer (ray backend's backpressure).
    One is enough to keep the readers busy: a unit consumed is replaced at once, so a rank always has
    as many reads queued as it has sub-streams."""
    local_prefetch: int = 1
    """Units each sub-stream tokenizes ahead in a background thread (local backend; 0: none)."""
    log_interval_s: float = 30.0
    """Seconds between progress log lines (0: never)."""

    def __post_init__(self) -> None:
        for name in (
            "seq_len",
            "global_batch_size",
            "dp_world",
            "shuffle_window",
            "read_bytes",
            "ray_units_ahead",
            "max_document_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LoaderConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.seq_len > MAX_SEQ_LEN:
            raise LoaderConfigError(f"seq_len must be at most {MAX_SEQ_LEN:,} tokens, got {self.seq_len:,}")
        if self.max_document_bytes < 4:  # a piece must hold the widest UTF-8 character, or no cut advances
            raise LoaderConfigError(f"max_document_bytes must be at least 4, got {self.max_document_bytes}")
        if isinstance(self.dp_rank, bool) or not isinstance(self.dp_rank, int) or not 0 <= self.dp_rank < self.dp_world:
            raise LoaderConfigError(f"dp_rank must be in [0, {self.dp_world}), got {self.dp_rank!r}")
        if self.backend not in BACKENDS:
            raise LoaderConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.packing not in PACKINGS:
            raise LoaderConfigError(f"packing must be one of {', '.join(PACKINGS)}, got {self.packing!r}")
        if self.split not in SPLITS:
            raise LoaderConfigError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.eod_token is not None and (not isinstance(self.eod_token, str) or not self.eod_token):
            raise LoaderConfigError(
                f"eod_token must be a token of the tokenizer, or None for its own; got {self.eod_token!r}"
            )
        interval = self.log_interval_s
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not 0 <= interval < float("inf"):
            raise LoaderConfigError(
                f"log_interval_s must be a number of seconds ≥ 0 (0: no log lines), got {interval!r}"
            )
        for name in ("read_cache_bytes", "local_prefetch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LoaderConfigError(f"{name} must be an integer ≥ 0, got {value!r}")
        if self.global_batch_size % self.dp_world:
            raise LoaderConfigError(
                f"dp_world={self.dp_world} does not divide global_batch_size={self.global_batch_size}"
            )
        shards = self.shards
        if self.global_batch_size % shards:
            raise LoaderConfigError(f"num_shards={shards} must divide global_batch_size={self.global_batch_size}")
        if shards % self.dp_world:
            raise LoaderConfigError(
                f"dp_world={self.dp_world} does not divide num_shards={shards}: pass num_shards= a multiple of "
                f"{self.dp_world} that divides global_batch_size={self.global_batch_size}, and keep it for the "
                "whole run (it is part of the stream's definition)"
            )

    @property
    def shards(self) -> int:
        """The number of logical shards S, defaulted from the global batch size."""
        if self.num_shards is not None:
            if isinstance(self.num_shards, bool) or not isinstance(self.num_shards, int) or self.num_shards < 1:
                raise LoaderConfigError(f"num_shards must be a positive integer, got {self.num_shards!r}")
            return self.num_shards
        return default_shards(self.global_batch_size)

    @property
    def rank_shards(self) -> range:
        """The logical shards this rank serves (its rows of every global batch are theirs)."""
        per_rank = self.shards // self.dp_world
        return range(self.dp_rank * per_rank, (self.dp_rank + 1) * per_rank)
