"""Packing one sub-stream: windows, the separator, padding, and cursors that resume exactly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lakehouse.errors import LoaderConfigError
from streaming_loader.pack import SubStream
from streaming_loader.state import Cursor
from streaming_loader.units import UnitTokens
from tests.streaming_loader.test_plan import plan

EOD = 0
PLAN = plan(counts=(23,), shards=1, window=4, read_bytes=8)


def doc(epoch: int, position: int) -> np.ndarray:
    """A made-up document: its length varies (0 to 12 tokens), positions divisible by 7 are filtered out."""
    n = (position * 5 + epoch) % 13
    return np.arange(1, n + 1, dtype=np.int32) + 1000 * position + 100_000 * epoch


def open_units(component, shard, epoch, position):
    for unit in PLAN.units_from(component, shard, epoch, position):
        first, end = PLAN.positions(unit)
        positions = np.array([p for p in range(first, end) if p % 7], dtype=np.int64)
        docs = [doc(unit.epoch, int(p)) for p in positions]
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
        tokens = np.concatenate(docs) if docs else np.zeros(0, np.int32)
        yield UnitTokens(unit, first, end, positions, tokens.astype(np.int32), offsets)


def stream(cursor: Cursor | None = None, packing="concat", length=9) -> SubStream:
    return SubStream(PLAN, 0, 0, cursor or Cursor(), open_units, EOD, length, packing)


def expected_tokens(epochs: int) -> np.ndarray:
    parts = [np.append(doc(e, p), EOD) for e in range(epochs) for p in range(23) if p % 7]
    return np.concatenate(parts)


def joined(windows) -> np.ndarray:
    """The token stream the windows cover: a window after one that ended mid-document repeats its last token."""
    parts = [windows[0].tokens[: windows[0].n_real]]
    for before, w in itertools.pairwise(windows):
        overlap = before.n_real == len(before.tokens) and before.tokens[-1] != EOD
        parts.append(w.tokens[int(overlap) : w.n_real])
    return np.concatenate(parts)


def test_concat_windows_are_the_documents_and_separators_in_order():
    s = stream()
    windows = [s.next_window() for _ in range(40)]
    assert all(w.n_real == 9 and len(w.tokens) == 9 for w in windows)
    flat = joined(windows)
    assert np.array_equal(flat, expected_tokens(5)[: len(flat)])  # crosses epochs, files in order
    for w in windows:  # a document starts at every window index that follows a separator
        assert set(w.starts) == {i for i in range(1, 9) if w.tokens[i - 1] == EOD} | ({0} & set(w.starts))


def test_pad_windows_never_start_mid_document_unless_it_is_too_long():
    s, split, windows = stream(packing="pad", length=9), 0, []
    for _ in range(60):
        before = s.cursor
        w = s.next_window()
        windows.append(w)
        if before.token:  # only a document longer than a window continues into the next one
            split += 1
            assert len(doc(before.epoch, before.position)) + 1 > 9
        else:
            assert w.starts[0] == 0
        assert np.all(w.tokens[w.n_real :] == EOD)
        if w.n_real < 9:  # padding only when the next document would not fit
            nxt = s.cursor
            assert nxt.token == 0 and len(doc(nxt.epoch, nxt.position)) + 1 > 9 - w.n_real
    assert split > 0
    assert np.array_equal(joined(windows), expected_tokens(6)[: len(joined(windows))])


@pytest.mark.parametrize("packing", ["concat", "pad"])
def test_a_cursor_resumes_exactly_where_the_stream_was(packing):
    whole = stream(packing=packing)
    reference = [whole.next_window().tokens for _ in range(50)]
    for k in (0, 1, 2, 5, 13, 24, 37):
        first = stream(packing=packing)
        for _ in range(k):
            first.next_window()
        resumed = stream(first.cursor, packing=packing)
        again = [resumed.next_window().tokens for _ in range(50 - k)]
        assert all(np.array_equal(a, b) for a, b in zip(again, reference[k:], strict=True)), (packing, k)


def test_the_cursor_after_a_slice_ends_is_the_next_epoch():
    s = stream(length=len(expected_tokens(1)))  # one window holds exactly one epoch
    s.next_window()
    assert s.cursor == Cursor(1, 0, 0)


def test_a_sub_stream_without_documents_fails_instead_of_spinning():
    def nothing(component, shard, epoch, position):
        for unit in PLAN.units_from(component, shard, epoch, position):
            first, end = PLAN.positions(unit)
            yield UnitTokens(unit, first, end, np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(1, np.int64))

    empty = SubStream(PLAN, 0, 0, Cursor(), nothing, EOD, 9, "concat")
    with pytest.raises(LoaderConfigError, match="no documents in a whole epoch"):
        empty.next_window()
