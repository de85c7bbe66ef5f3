"""Reading a unit: the documents do not depend on how many rows are decoded at a time."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mixtures.manifest import Manifest
from streaming_loader import read
from streaming_loader.plan import StreamPlan


@pytest.mark.parametrize("which", ["manifest", "filtered"])
def test_a_unit_reads_the_same_documents_whatever_the_decoding_batch(mixture, monkeypatch, which):
    plan = StreamPlan.from_manifest(Manifest.load(getattr(mixture, which)), 4, 8, "train", read_bytes=1500)
    units = [
        unit
        for component, shard in itertools.product(range(len(plan.components)), range(plan.num_shards))
        for unit in itertools.islice(plan.units_from(component, shard, 0, 0), 6)
    ]
    read_with = {}
    for rows in (1, 7, 4096):
        monkeypatch.setattr(read, "READ_BATCH_ROWS", rows)
        read_with[rows] = [read.read_unit(plan, unit) for unit in units]
    for docs in itertools.chain(read_with[1], read_with[7]):
        assert docs.positions.dtype == np.int64
    for a, b, c in zip(read_with[1], read_with[7], read_with[4096], strict=True):
        assert a.texts == b.texts == c.texts
        assert np.array_equal(a.positions, b.positions) and np.array_equal(b.positions, c.positions)
    assert sum(len(d.texts) for d in read_with[1]) > 50  # the units held documents
