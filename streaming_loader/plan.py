"""Where every document of the stream comes from: pure arithmetic over the manifest.

The stream has ``num_shards`` logical shards (S). In epoch ``e`` of component ``c`` the
component's files are put in a seeded order and their rows concatenated; shard ``s`` owns the
contiguous slice ``[s*N//S, (s+1)*N//S)`` of that concatenation (N rows in all). Inside its
slice, documents are shuffled within aligned blocks of ``shuffle_window`` rows. A document's
*position* is its index in that shuffled order, so a cursor ``(epoch, position, token)`` names
one token of the sub-stream and the rows around it are found by arithmetic, without reading
anything before it.

A *unit* is a run of consecutive positions that one task reads and tokenizes. Units only cut
the work, never change what the stream contains: they are whole blocks (so each block is read
once), except in the block where a sub-stream starts, whose units start small and double, so
the first batch comes quickly however many sub-streams a rank serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lakehouse.errors import LoaderConfigError
from mixtures.manifest import ComponentManifest, Manifest, no_records
from streaming_loader import seeds

SPLITS = ("train", "heldout")
# A sub-stream's first unit: a window of 2,049 tokens is about 8 KB of text, so 16 KiB (at least one
# document) serves the first batch; at 64 KiB a rank of 16 sub-streams tokenized four times what its
# first batch needed before it could have it (0.8 of 1.2 CPU-s on the loader benchmark).
FIRST_READ_BYTES = 16 << 10


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
    """Positions ``[first, first + count)`` of shard ``shard``'s slice of ``component`` in ``epoch``."""

    component: int
    shard: int
    epoch: int
    first: int
    count: int


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
    read_bytes: int = 1 << 20
    """Text bytes a unit grows to (how the reading work is cut; no effect on the stream)."""
    first_read_bytes: int = FIRST_READ_BYTES
    """Text bytes of a sub-stream's first unit."""
    catalog: str = ""
    """The name of the catalog the manifest was pinned in: readers open the data files with the
    FileIO properties their own pyiceberg configuration gives it (``file_io_properties``)."""
    max_document_bytes: int | None = None
    """Documents longer than this are tokenized in pieces of at most this many bytes (None: whole)."""
    block_cache_bytes: int = 0
    """Decoded blocks a reader process keeps for the block's next units (read.py; 0: none)."""
    _epochs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """A cache of ``_epoch_files`` (no part of the plan: not compared, emptied when it grows)."""

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise LoaderConfigError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        for c in self.components:
            if c.weight > 0 and c.n_rows == 0:
                raise LoaderConfigError(no_records(c.label))
            if c.weight > 0 and c.n_rows < self.num_shards:
                raise LoaderConfigError(
                    f"{c.label} has {c.n_rows} records, fewer than num_shards={self.num_shards}: every logical "
                    "shard needs documents of every component; use a smaller num_shards or global_batch_size"
                )

    @classmethod
    def from_manifest(
        cls,
        manifest: Manifest,
        num_shards: int,
        shuffle_window: int,
        split: str,
        read_bytes: int = 1 << 20,
        max_document_bytes: int | None = None,
        block_cache_bytes: int = 0,
    ) -> StreamPlan:
        salt = manifest.heldout.get("salt", "")
        components = tuple(ComponentPlan.from_manifest(i, c, salt, split) for i, c in enumerate(manifest.components))
        if not any(c.weight > 0 for c in components):
            raise LoaderConfigError(f"no component of {manifest.name!r} has a held-out split (heldout_fraction)")
        return cls(
            manifest.seed,
            num_shards,
            shuffle_window,
            split,
            components,
            read_bytes,
            min(FIRST_READ_BYTES, read_bytes),
            manifest.catalog.get("name", ""),
            max_document_bytes,
            block_cache_bytes,
        )

    # --- the slice of a shard -------------------------------------------------------------

    def slice_of(self, component: int, shard: int) -> tuple[int, int]:
        """Rows ``[start, stop)`` of the epoch's concatenation that ``shard`` owns (same every epoch)."""
        n = self.components[component].n_rows
        return shard * n // self.num_shards, (shard + 1) * n // self.num_shards

    def slice_length(self, component: int, shard: int) -> int:
        start, stop = self.slice_of(component, shard)
        return stop - start

    # --- orders -----------------------------------------------------------------------------

    def file_order(self, component: int, epoch: int) -> np.ndarray:
        """The files of ``component`` in the order epoch ``epoch`` reads them."""
        key = seeds.derive_key(self.seed, "file-order", component, epoch)
        return seeds.permutation(key, len(self.components[component].paths))

    def block_order(self, component: int, shard: int, epoch: int, block: int, n: int) -> np.ndarray:
        """The shuffled order of the ``n`` rows of one block (indices into the block's rows)."""
        key = seeds.derive_key(self.seed, "block", component, shard, epoch, block)
        return seeds.permutation(key, n)

    # --- units ------------------------------------------------------------------------------

    def units_from(self, component: int, shard: int, epoch: int, position: int) -> Iterator[Unit]:
        """Units of the sub-stream, in order, from ``position`` on (endless, epoch after epoch).

        A reader reads whole shuffle blocks, so units are whole blocks (as many as fit in
        ``read_bytes``, at least one) and each block is read once; only the block a sub-stream
        starts in is cut into small units that double from ``first_read_bytes``, so the first
        batch does not wait for whole blocks of every sub-stream.
        """
        length, window = self.slice_length(component, shard), self.shuffle_window
        per_row = max(self.components[component].bytes_per_row, 1.0)
        size = max(1, int(self.first_read_bytes / per_row))
        blocks = max(1, int(self.read_bytes / (per_row * window)))
        # A block larger than read_bytes is cut too: readers decode it once and keep it while its
        # units are read (read.py), so a unit, and what read-ahead tokenizes, stays near read_bytes.
        rows_per_read = max(1, int(self.read_bytes / per_row))
        while True:
            while position < length:
                block_end = min((position // window + 1) * window, length)
                if position % window or size < block_end - position:
                    count = min(size, rows_per_read, block_end - position)  # the ramp, inside the first block
                    size *= 2
                elif rows_per_read < window:
                    count = min(rows_per_read, block_end - position)
                else:
                    count = min(blocks * window, length - position)
                yield Unit(component, shard, epoch, position, count)
                position += count
            epoch, position = epoch + 1, 0

    def _epoch_files(self, component: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The epoch's file order and the row where each file starts in it (and the end), computed
        once per component and epoch: a unit then costs O(log files), not O(files), so a snapshot
        of many small files does not slow every unit down."""
        key = (component, epoch)
        found = self._epochs.get(key)
        if found is None:
            counts = np.asarray(self.components[component].counts, dtype=np.int64)
            order = self.file_order(component, epoch)
            found = order, np.concatenate([[0], np.cumsum(counts[order])]).astype(np.int64)
            if len(self._epochs) >= 2 * len(self.components):  # keep the epochs in use: a few per component
                self._epochs.clear()
            self._epochs[key] = found
        return found

    def positions(self, unit: Unit) -> tuple[int, int]:
        """Positions ``[first, end)`` of the shard's slice that ``unit`` covers."""
        return unit.first, unit.first + unit.count

    def rows(self, unit: Unit, whole_blocks: bool = False) -> tuple[list[Segment], np.ndarray]:
        """What a reader reads for ``unit`` (file segments, in the epoch's order), and for each of the
        unit's positions the index of its row among the rows of those segments.

        A unit of whole blocks reads its blocks. A unit of the ramp holds some of a block's rows,
        scattered by the shuffle: it reads only the files that hold one of them, from the first to
        the last such row of each, so a sub-stream's first unit over a snapshot of one-document
        files opens as many files as it has documents, not a whole block's. With ``whole_blocks`` the
        unit reads its blocks whole, and ``wanted`` indexes their rows."""
        start, stop = self.slice_of(unit.component, unit.shard)
        window = self.shuffle_window
        first_block, last_block = unit.first // window, (unit.first + unit.count - 1) // window
        begin, end = first_block * window, min((last_block + 1) * window, stop - start)
        orders = [
            offset + self.block_order(unit.component, unit.shard, unit.epoch, block, min(window, end - begin - offset))
            for block, offset in zip(range(first_block, last_block + 1), range(0, end - begin, window), strict=True)
        ]
        shuffled = np.concatenate(orders)  # shuffled position begin + i holds row shuffled[i]
        wanted = shuffled[unit.first - begin : unit.first - begin + unit.count]
        segments = self.rows_to_segments(unit.component, unit.epoch, start + begin, start + end)
        if unit.count == end - begin or whole_blocks:
            return segments, wanted
        return _only_wanted(segments, wanted)

    def rows_to_segments(self, component: int, epoch: int, begin: int, end: int) -> list[Segment]:
        """Rows ``[begin, end)`` of an epoch's concatenation, as pieces of files."""
        order, bounds = self._epoch_files(component, epoch)
        found = []
        i = int(np.searchsorted(bounds, begin, side="right")) - 1
        while begin < end:
            file_start, file_stop = int(bounds[i]), int(bounds[i + 1])
            stop = min(end, file_stop)
            if stop > begin:
                found.append(Segment(int(order[i]), begin - file_start, stop - file_start))
            begin = stop
            i += 1
        return found


def _only_wanted(segments: list[Segment], wanted: np.ndarray) -> tuple[list[Segment], np.ndarray]:
    """``segments`` cut to the rows from the first to the last of ``wanted`` in each (those with none
    dropped), and ``wanted`` renumbered to index the rows of the cut segments."""
    starts = np.cumsum([0] + [s.stop - s.start for s in segments])  # each segment's first row among all
    which = np.searchsorted(starts, wanted, side="right") - 1
    cut, shift, at = [], np.zeros(len(segments), dtype=np.int64), 0
    for k in np.unique(which):
        inside = wanted[which == k] - starts[k]
        low, high = int(inside.min()), int(inside.max()) + 1
        segment = segments[k]
        cut.append(Segment(segment.file, segment.start + low, segment.start + high))
        shift[k] = at - starts[k] - low
        at += high - low
    return cut, wanted + shift[which]
