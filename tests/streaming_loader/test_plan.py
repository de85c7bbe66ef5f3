"""The plan: which row sits at which position of each logical shard, by arithmetic alone."""

from __future__ import annotations

import itertools

import pytest

from lakehouse.errors import LoaderConfigError
from streaming_loader.plan import ComponentPlan, StreamPlan


def plan(counts=(10, 0, 7, 13), shards=3, window=4, read_bytes=1, weight=1.0, first_read_bytes=1) -> StreamPlan:
    component = ComponentPlan(
        index=0,
        name="c",
        label="component 'c'",
        weight=weight,
        paths=tuple(f"f{i}" for i in range(len(counts))),
        counts=tuple(counts),
        row_groups=tuple((n,) for n in counts),
        filter=None,
        schema={},
        heldout_fraction=0.0,
        heldout_salt="",
        bytes_per_row=1.0,
    )
    return StreamPlan(
        seed=3,
        num_shards=shards,
        shuffle_window=window,
        split="train",
        components=(component,),
        read_bytes=read_bytes,
        first_read_bytes=first_read_bytes,
    )


def rows_of(p: StreamPlan, shard: int, epoch: int) -> list[tuple[int, int]]:
    """(file, row) of every position of a shard's slice in one epoch, in stream order."""
    found = []
    for unit in itertools.takewhile(lambda u: u.epoch == epoch, p.units_from(0, shard, epoch, 0)):
        segments, wanted = p.rows(unit)
        rows = [(s.file, r) for s in segments for r in range(s.start, s.stop)]
        found.extend(rows[i] for i in wanted)
    assert len(found) == p.slice_length(0, shard)
    return found


def test_shards_partition_every_epoch_and_epochs_reorder_files():
    p = plan()
    everything = {(f, r) for f, n in enumerate(p.components[0].counts) for r in range(n)}
    orders = []
    for epoch in range(4):
        per_shard = [rows_of(p, s, epoch) for s in range(3)]
        seen = [row for rows in per_shard for row in rows]
        assert sorted(seen) == sorted(everything)  # each row exactly once per epoch
        orders.append(tuple(p.file_order(0, epoch)))
    assert len(set(orders)) > 1
    assert rows_of(p, 1, 2) == rows_of(plan(), 1, 2)  # a pure function of the seed


def test_documents_are_shuffled_only_within_their_window():
    p = plan(counts=(40,), shards=1, window=8)
    rows = [r for _, r in rows_of(p, 0, 0)]
    assert rows != sorted(rows)
    for block in range(5):  # the 8 rows of each aligned block stay in that block
        assert sorted(rows[block * 8 : block * 8 + 8]) == list(range(block * 8, block * 8 + 8))


def test_units_ramp_up_in_the_first_block_then_are_whole_blocks_forever():
    p = plan(counts=(30,), shards=1, window=4, read_bytes=8, first_read_bytes=1)
    units = list(itertools.islice(p.units_from(0, 0, epoch=5, position=9), 6))
    assert [(u.epoch, u.first, u.count) for u in units] == [
        (5, 9, 1),
        (5, 10, 2),
        (5, 12, 8),
        (5, 20, 8),
        (5, 28, 2),
        (6, 0, 8),
    ]
    for read_bytes in (1, 3, 100):  # however the work is cut, the stream's order is the same
        assert rows_of(plan(read_bytes=read_bytes, first_read_bytes=1), 2, 1) == rows_of(plan(), 2, 1)


def test_a_component_smaller_than_the_shard_count_is_refused_unless_unused():
    with pytest.raises(LoaderConfigError, match="fewer than num_shards=4"):
        plan(counts=(3,), shards=4)
    assert plan(counts=(3,), shards=4, weight=0.0).num_shards == 4
    with pytest.raises(LoaderConfigError, match="has no records: a component with a weight above 0 needs documents"):
        plan(counts=(0,), shards=1)


def test_a_ramp_unit_reads_only_the_files_that_hold_its_rows():
    def tiny(first_read_bytes: int, counts=(1,) * 32) -> StreamPlan:
        return plan(counts=counts, shards=1, window=16, read_bytes=16, first_read_bytes=first_read_bytes)

    units = list(itertools.islice(tiny(2).units_from(0, 0, epoch=0, position=0), 5))
    assert [u.count for u in units] == [2, 4, 8, 2, 16]  # the ramp, then a whole block
    opened = [len(tiny(2).rows(u)[0]) for u in units]
    assert opened == [2, 4, 8, 2, 16]  # one-row files: a file per document, not the block's 16
    for counts in ((1,) * 32, (3, 1, 20, 8), (32,)):  # the same stream, ramp or no ramp
        assert rows_of(tiny(2, counts), 0, 0) == rows_of(tiny(16, counts), 0, 0)
