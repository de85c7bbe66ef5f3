"""``StreamingLoader``: this rank's share of a deterministic, resumable, mixed global stream.

How the global stream is defined (docs/architecture.md, "The stream"):

- The stream has S logical shards (``num_shards``, fixed for a run, recorded in the state).
  Each is its own deterministic sub-stream over its own slice of every component
  (``plan.py``), packed into ``seq_len + 1`` windows (``pack.py``).
- Global batch ``b`` holds ``B`` sequences; the mixing schedule (``mix.py``) decides how many
  come from each component (within one of ``B * weight``) and deals them to the shards, each
  supplying ``B / S`` sequences. Rows of the batch are shard-major, so rank ``r`` of ``w``
  owns rows ``[r*B/w, (r+1)*B/w)`` and serves shards ``[r*S/w, (r+1)*S/w)``.
- Nothing depends on the world size, the backend, unit sizes or timing: any ``w`` that divides
  S continues the same global batches from the same state, and a rank's work does not grow
  with ``w`` (it reads only its own shards' slices).

We chose fixed logical shards over a shared producer (actors handing out slices) because it
keeps every rank independent: no actor to fail over, no cross-rank traffic, and the state is a
few cursors per shard that seek in O(1).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lakehouse.errors import DataFileError, LoaderStateError
from lakehouse.faults import maybe_fail
from lakehouse.parquet import file_io_properties, missing_files
from mixtures.manifest import Manifest
from streaming_loader.config import LoaderConfig
from streaming_loader.metrics import WAITING_SINCE, LoaderMetrics, first_batch_progress
from streaming_loader.mix import MixSchedule, deal
from streaming_loader.pack import SubStream, Window
from streaming_loader.plan import StreamPlan
from streaming_loader.state import Cursor, check_state, make_state
from streaming_loader.tokenize import TokenizerSpec, load_tokenizer_spec

log = logging.getLogger("factory.loader")

IGNORE_INDEX = -100


class StreamingLoader:
    """Iterate for batches: ``input_ids``, ``labels``, ``position_ids`` (LongTensor [B/w, seq_len])
    and ``components`` (LongTensor [B/w], the index of each row's component)."""

    @classmethod
    def from_manifest(
        cls,
        manifest: str | Path | Manifest,
        tokenizer: str | Path | TokenizerSpec,
        seq_len: int,
        global_batch_size: int,
        dp_rank: int = 0,
        dp_world: int = 1,
        backend: str = "ray",
        **options: Any,
    ) -> StreamingLoader:
        """A loader over a pinned manifest; ``options`` are the other ``LoaderConfig`` fields."""
        config = LoaderConfig(
            seq_len=seq_len,
            global_batch_size=global_batch_size,
            dp_rank=dp_rank,
            dp_world=dp_world,
            backend=backend,
            **options,
        )
        if not isinstance(manifest, Manifest):
            manifest = Manifest.load(manifest)
        if not isinstance(tokenizer, TokenizerSpec):
            tokenizer = load_tokenizer_spec(tokenizer, config.eod_token)
        return cls(manifest, tokenizer, config)

    def __init__(self, manifest: Manifest, tokenizer: TokenizerSpec, config: LoaderConfig) -> None:
        self.manifest, self.tokenizer, self.config = manifest, tokenizer, config
        self.components = [c.name for c in manifest.components]
        _check_files(manifest)
        self.plan = StreamPlan.from_manifest(
            manifest,
            config.shards,
            config.shuffle_window,
            config.split,
            config.read_bytes,
            config.max_document_bytes,
            config.read_cache_bytes,
        )
        weights = [c.weight for c in self.plan.components]
        self.schedule = MixSchedule(weights, config.global_batch_size)
        self._backend = self._make_backend()
        self._batch = 0
        self._served_one = False  # the first batch this loader serves is awaited with progress lines
        self._deficits = self.schedule.initial_deficits()
        self._streams: dict[tuple[int, int], SubStream] = {}
        self._cursors = {s: {n: Cursor() for n in self.components} for s in config.rank_shards}
        self.metrics = LoaderMetrics(
            self.components, [w / sum(weights) for w in weights], config.log_interval_s, publish=config.split == "train"
        )
        log.info(
            "loader: %s (%s), %d component(s), seq_len %d, global batch %d, rank %d/%d serves logical shards "
            "%d-%d of %d, backend %s",
            manifest.name, manifest.fingerprint[:19], len(self.components), config.seq_len,
            config.global_batch_size, config.dp_rank, config.dp_world, config.rank_shards.start,
            config.rank_shards.stop - 1, config.shards, config.backend,
        )  # fmt: skip

    # --- iteration --------------------------------------------------------------------------

    def __iter__(self) -> StreamingLoader:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        if not self._served_one:
            # The first batch can take minutes (readers start, files open, tokenizers warm up):
            # say so while it comes, in log lines, never a redrawn bar.
            with first_batch_progress(self._backend.buffered):
                batch = self._next_batch()
            self._served_one = True
            return batch
        return self._next_batch()

    def _next_batch(self) -> dict[str, torch.Tensor]:
        began, waited = time.perf_counter(), self._waited()
        WAITING_SINCE.set(time.time())
        # A test holds the loader here (FACTORY_PAUSE_AT=loader-next-<batch>:<folder>) to see the
        # stalled-loader alert fire.
        maybe_fail(f"loader-next-{self._batch}")
        counts, deficits = self.schedule.counts(self._deficits)
        hands = deal(counts, self.config.shards, self.manifest.seed, self._batch)
        streams = [(c, self._stream(shard, c)) for shard in self.config.rank_shards for c in hands[shard]]
        for _, stream in streams:
            # Every sub-stream of the batch asks for its units before any is waited on, so the Ray
            # readers start them together (one pipeline) rather than one sub-stream after another.
            stream.open()
        rows = [(component, stream.next_window()) for component, stream in streams]
        batch = _collate(rows, self.config.seq_len)
        self._batch, self._deficits = self._batch + 1, deficits
        self.metrics.record(
            [c for c, _ in rows],
            [min(w.n_real, self.config.seq_len) for _, w in rows],
            self._waited() - waited,
            time.perf_counter() - began,
            self._backend.buffered(),
        )
        WAITING_SINCE.set(0)
        return batch

    # --- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """This rank's position: small JSON (cursors of its shards, the batch index, the schedule)."""
        cursors = {
            shard: {
                name: (self._streams[(shard, c)].cursor if (shard, c) in self._streams else self._cursors[shard][name])
                for c, name in enumerate(self.components)
            }
            for shard in self.config.rank_shards
        }
        return make_state(self._stream_definition(), self._batch, self._deficits, cursors)

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Seek to a saved position: this rank's state, or all ranks' states after a world-size change."""
        batch, deficits, cursors = check_state(
            state, self._stream_definition(), list(self.config.rank_shards), self.components
        )
        if not self.schedule.reachable(deficits):
            raise LoaderStateError(
                f"the state's schedule {deficits} is not one the mixing schedule can reach (its deficits sum to 0 "
                "and stay within a few sequences); resume from a state saved by state_dict()"
            )
        for shard, by_name in cursors.items():
            for component, name in enumerate(self.components):
                position, length = by_name[name].position, self.plan.slice_length(component, shard)
                if position >= max(length, 1):  # a sub-stream that has no rows stays at 0
                    raise LoaderStateError(
                        f"the state's shard {shard}, component {name!r}: position {position} is outside the "
                        f"shard's slice of {length} documents"
                    )
        self._close_streams()
        self._backend.reset()
        self._batch, self._deficits, self._cursors = batch, deficits, cursors

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        self._close_streams()
        self._backend.close()

    def __enter__(self) -> StreamingLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------

    def _stream_definition(self) -> dict[str, Any]:
        c = self.config
        return {
            "manifest": self.manifest.fingerprint,
            "tokenizer": self.tokenizer.identity,
            "seq_len": c.seq_len,
            "global_batch_size": c.global_batch_size,
            "num_shards": c.shards,
            "packing": c.packing,
            "shuffle_window": c.shuffle_window,
            "split": c.split,
            "max_document_bytes": c.max_document_bytes,
        }

    def _stream(self, shard: int, component: int) -> SubStream:
        key = (shard, component)
        stream = self._streams.get(key)
        if stream is None:
            cursor = self._cursors[shard][self.components[component]]
            stream = SubStream(
                self.plan, component, shard, cursor, self._backend.open, self.tokenizer.eod_id,
                self.config.seq_len + 1, self.config.packing,
            )  # fmt: skip
            self._streams[key] = stream
        return stream

    def _waited(self) -> float:
        return sum(stream.wait_s for stream in self._streams.values())

    def _close_streams(self) -> None:
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()

    def _make_backend(self):
        c = self.config
        if c.backend == "ray":
            from streaming_loader.ray_backend import RayBackend

            return RayBackend(
                self.plan, self.tokenizer, address=c.ray_address, units_ahead=c.ray_units_ahead, ranks=c.dp_world
            )
        from streaming_loader.local_backend import LocalBackend

        return LocalBackend(self.plan, self.tokenizer, c.local_prefetch)


def _check_files(manifest: Manifest) -> None:
    """Fail at construction, naming the snapshot and file, if any data file is gone."""
    for component in manifest.components:
        missing = missing_files([f.path for f in component.files], file_io_properties(manifest.catalog.get("name")))
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise DataFileError(
                f"component {component.name!r}: {len(missing)} data file(s) of snapshot {component.label} are "
                f"missing ({shown}); the snapshot was probably expired. Pin the mixture again from a live snapshot."
            )


def _collate(rows: list[tuple[int, Window]], seq_len: int) -> dict[str, torch.Tensor]:
    windows = np.stack([w.tokens for _, w in rows]).astype(np.int64)
    labels = windows[:, 1:].copy()
    positions = np.empty((len(rows), seq_len), dtype=np.int64)
    index = np.arange(seq_len + 1)
    for i, (_, window) in enumerate(rows):
        labels[i, max(window.n_real - 1, 0) :] = IGNORE_INDEX
        starts = np.zeros(seq_len + 1, dtype=bool)
        starts[0] = True
        starts[list(window.starts)] = True
        positions[i] = (index - np.maximum.accumulate(np.where(starts, index, 0)))[:seq_len]
    return {
        "input_ids": torch.from_numpy(np.ascontiguousarray(windows[:, :-1])),
        "labels": torch.from_numpy(labels),
        "position_ids": torch.from_numpy(positions),
        "components": torch.tensor([c for c, _ in rows], dtype=torch.long),
    }
