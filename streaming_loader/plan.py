"""Where every document of the stream comes from: pure arithmetic over the manifest.

The stream has ``num_shards`` logical shards (S). In epoch ``e`` of component ``c`` the
component's files are put in a seeded order and their rows concatenated; shard ``s`` owns the
contiguous slice ``[s*N//S, (s+1)*N//S)`` of that concatenation (N rows in all). Inside its
slice, documents are shuffled within aligned blocks of ``shuffle_window`` rows. A document's
*position* is its index in that shuffled order, so a cursor ``(epoch, position, token)`` names
one token of the sub-stream and the rows around it are found by arithmetic, without reading
anything before it.

A *unit* is a run of whole blocks that one task reads and tokenizes. Its size only decides how
the work is cut, never what the stream contains.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mixtures.manifest import ComponentManifest, Manifest
from pipelines.exceptions import LoaderConfigError
from streaming_loader import seeds

SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class ComponentPlan:
    """What the readers need to know about one component (picklable, shipped to Ray workers)."""

    index: int
    name: str
    label: str
    weight: float
    paths: tuple[str, ...]
    counts: tuple[int, ...]
    row_groups: tuple[tuple[int, ...], ...]
    filter: str | None
    schema: dict[str, Any]
    heldout_fraction: float
    heldout_salt: str
    bytes_per_row: float

    @property
    def n_rows(self) -> int:
        return sum(self.counts)

    @classmethod
    def from_manifest(cls, index: int, component: ComponentManifest, salt: str, split: str) -> ComponentPlan:
        rows = component.record_count
        # The held-out stream mixes only the components that hold documents out, by their weights.
        weight = component.weight if split == "train" or component.heldout_fraction > 0 else 0.0
        return cls(
            index=index,
            name=component.name,
            label=f"component {component.name!r} ({component.label})",
            weight=weight,
            paths=tuple(f.path for f in component.files),
            counts=tuple(f.record_count for f in component.files),
            row_groups=tuple(f.row_groups for f in component.files),
            filter=component.filter,
            schema=component.schema,
            heldout_fraction=component.heldout_fraction,
            heldout_salt=salt,
            bytes_per_row=sum(f.text_bytes for f in component.files) / rows if rows else 0.0,
        )


@dataclass(frozen=True)
class Unit:
    """Blocks ``[block, block + n_blocks)`` of shard ``shard``'s slice of ``component`` in ``epoch``."""

    component: int
    shard: int
    epoch: int
    block: int
    n_blocks: int


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of the file at ``file`` (an index into the component's files)."""

    file: int
    start: int
    stop: int


@dataclass(frozen=True)
class StreamPlan:
    """Everything that decides which document sits at which position of every sub-stream."""

    seed: int
    num_shards: int
    shuffle_window: int
    split: str
    components: tuple[ComponentPlan, ...]
    read_bytes: int = 8 << 20
    """Target text bytes per unit (how the reading work is cut; no effect on the stream)."""
    _blocks_per_unit: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise LoaderConfigError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        for c in self.components:
            if c.weight > 0 and c.n_rows < self.num_shards:
                raise LoaderConfigError(
                    f"{c.label} has {c.n_rows} records, fewer than num_shards={self.num_shards}: every logical "
                    "shard needs documents of every component; use a smaller num_shards or global_batch_size"
                )
        per_block = [max(c.bytes_per_row, 1.0) * self.shuffle_window for c in self.components]
        object.__setattr__(self, "_blocks_per_unit", tuple(max(1, math.floor(self.read_bytes / b)) for b in per_block))

    @classmethod
    def from_manifest(
        cls, manifest: Manifest, num_shards: int, shuffle_window: int, split: str, read_bytes: int = 8 << 20
    ) -> StreamPlan:
        salt = manifest.heldout.get("salt", "")
        components = tuple(ComponentPlan.from_manifest(i, c, salt, split) for i, c in enumerate(manifest.components))
        if not any(c.weight > 0 for c in components):
            raise LoaderConfigError(f"no component of {manifest.name!r} has a held-out split (heldout_fraction)")
        return cls(manifest.seed, num_shards, shuffle_window, split, components, read_bytes)

    def unit_output_bytes(self, component: int) -> int:
        """Rough size of one unit's tokens in memory (int32 ids, ~3 bytes of text per token)."""
        c = self.components[component]
        return int(c.bytes_per_row * self.shuffle_window * self._blocks_per_unit[component] * 4 / 3) + 1

    # --- the slice of a shard -------------------------------------------------------------

    def slice_of(self, component: int, shard: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of the epoch's concatenation that ``shard`` owns (same every epoch)."""
        n = self.components[component].n_rows
        return shard * n // self.num_shards, (shard + 1) * n // self.num_shards

    def slice_length(self, component: int, shard: int) -> int:
        start, stop = self.slice_of(component, shard)
        return stop - start

    def n_blocks(self, component: int, shard: int) -> int:
        return -(-self.slice_length(component, shard) // self.shuffle_window)

    # --- orders -----------------------------------------------------------------------------

    def file_order(self, component: int, epoch: int) -> np.ndarray:
        """The files of ``component`` in the order epoch ``epoch`` reads them."""
        key = seeds.derive_key(self.seed, "file-order", component, epoch)
        return seeds.permutation(key, len(self.components[component].paths))

    def block_order(self, unit: Unit, block: int, n: int) -> np.ndarray:
        """The shuffled order of the ``n`` rows of one block (indices into the block's rows)."""
        key = seeds.derive_key(self.seed, "block", unit.component, unit.shard, unit.epoch, block)
        return seeds.permutation(key, n)

    # --- units ------------------------------------------------------------------------------

    def units_from(self, component: int, shard: int, epoch: int, position: int):
        """Units of the sub-stream, in order, starting with the one holding ``position`` (endless)."""
        per_unit = self._blocks_per_unit[component]
        n_blocks = self.n_blocks(component, shard)
        block = position // self.shuffle_window
        while True:
            while block < n_blocks:
                take = min(per_unit, n_blocks - block)
                yield Unit(component, shard, epoch, block, take)
                block += take
            epoch, block = epoch + 1, 0

    def positions(self, unit: Unit) -> tuple[int, int]:
        """Positions ``[first, end)`` of the shard's slice that ``unit`` covers."""
        length = self.slice_length(unit.component, unit.shard)
        first = unit.block * self.shuffle_window
        return first, min((unit.block + unit.n_blocks) * self.shuffle_window, length)

    def segments(self, unit: Unit) -> list[Segment]:
        """The file rows a unit covers, in the epoch's concatenation order."""
        start, _ = self.slice_of(unit.component, unit.shard)
        first, end = self.positions(unit)
        return self.rows_to_segments(unit.component, unit.epoch, start + first, start + end)

    def rows_to_segments(self, component: int, epoch: int, begin: int, end: int) -> list[Segment]:
        counts = self.components[component].counts
        order = self.file_order(component, epoch)
        bounds = np.concatenate([[0], np.cumsum([counts[i] for i in order])])
        found = []
        i = bisect.bisect_right(bounds.tolist(), begin) - 1
        while begin < end:
            file_start, file_stop = int(bounds[i]), int(bounds[i + 1])
            stop = min(end, file_stop)
            if stop > begin:
                found.append(Segment(int(order[i]), begin - file_start, stop - file_start))
            begin = stop
            i += 1
        return found

    def shuffle(self, unit: Unit) -> np.ndarray:
        """For each position of the unit in shuffled order, the index of its row among the unit's rows."""
        first, end = self.positions(unit)
        pieces = []
        for offset in range(0, end - first, self.shuffle_window):
            n = min(self.shuffle_window, end - first - offset)
            block = unit.block + offset // self.shuffle_window
            pieces.append(offset + self.block_order(unit, block, n))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
