"""Packing one sub-stream (a logical shard's share of one component) into fixed windows.

Documents follow each other in stream order, each ending with the end-of-document token. With
``concat`` packing a window takes the next ``seq_len + 1`` tokens wherever documents start or
end; with ``pad`` a document that does not fit in what is left of a window starts the next one
(the rest is padding), and only a document longer than a whole window is split. A window that
ends mid-document is followed by one that starts with its last token (it was only a label),
so every token of a document is trained on as the successor of the one before it.

Packing is sequential by nature (where a window ends decides where the next starts), so it
runs in the consuming process, where the order is known; readers only read and tokenize.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from lakehouse.errors import LoaderConfigError, LoaderStateError
from streaming_loader.plan import StreamPlan
from streaming_loader.state import Cursor
from streaming_loader.units import UnitTokens

# open(component, shard, epoch, position) -> the sub-stream's units from the one holding position
OpenUnits = Callable[[int, int, int, int], Iterator[UnitTokens]]


@dataclass(frozen=True)
class Window:
    tokens: np.ndarray
    """``seq_len + 1`` token ids (padding, if any, is the end-of-document id)."""
    starts: tuple[int, ...]
    """Indices in the window where a document begins."""
    n_real: int
    """Tokens before the padding."""


class SubStream:
    def __init__(
        self, plan: StreamPlan, component: int, shard: int, cursor: Cursor, open_units: OpenUnits, eod_id: int,
        length: int, packing: str,
    ) -> None:  # fmt: skip
        self.plan, self.component, self.shard = plan, component, shard
        self._start = cursor
        self._open = open_units
        self._eod = np.array([eod_id], dtype=np.int32)
        self._length, self._pad = length, packing == "pad"
        self._slice_length = plan.slice_length(component, shard)
        self._units: Iterator[UnitTokens] | None = None
        self._unit: UnitTokens | None = None
        self._doc = 0
        self._tok = cursor.token
        self._epoch = cursor.epoch
        self._epoch_docs = 0
        self._epoch_whole = cursor.position == 0 and cursor.token == 0
        self.wait_s = 0.0
        """Seconds spent waiting for readers."""

    @property
    def cursor(self) -> Cursor:
        """The next token this sub-stream delivers."""
        unit = self._unit
        if unit is None:
            return self._start
        if self._doc < unit.n_docs:
            return Cursor(unit.unit.epoch, int(unit.positions[self._doc]), self._tok)
        if unit.end >= self._slice_length:
            return Cursor(unit.unit.epoch + 1, 0, 0)
        return Cursor(unit.unit.epoch, unit.end, 0)

    def next_window(self) -> Window:
        length, pieces, starts, filled = self._length, [], [], 0
        while filled < length:
            doc = self._document()
            total = len(doc) + 1  # the separator is the document's last token
            remaining, space = total - self._tok, length - filled
            if self._pad and self._tok == 0 and remaining > space and filled > 0:
                break
            take = min(remaining, space)
            if self._tok == 0:
                starts.append(filled)
            end = self._tok + take
            if end <= len(doc):
                pieces.append(doc[self._tok : end])
            else:
                pieces.extend((doc[self._tok :], self._eod))
            filled += take
            self._tok = end
            if end == total:
                self._doc, self._tok = self._doc + 1, 0
        if filled == length and self._tok > 0:
            self._tok -= 1  # ended mid-document: the next window starts with this one's last token
        tokens = np.concatenate(pieces)
        if filled < length:
            tokens = np.concatenate([tokens, np.full(length - filled, self._eod[0], dtype=np.int32)])
        return Window(tokens, tuple(starts), filled)

    def open(self) -> None:
        """Ask the readers for this sub-stream's units now, before anything waits on them."""
        if self._units is None:
            self._units = self._open(self.component, self.shard, self._start.epoch, self._start.position)

    def close(self) -> None:
        if self._units is not None and hasattr(self._units, "close"):
            self._units.close()
        self._units = None

    def _document(self) -> np.ndarray:
        """The current document's tokens, moving to the next unit (and epoch) when needed."""
        unit = self._unit
        while unit is None or self._doc >= unit.n_docs:
            unit = self._next_unit()
        start, stop = unit.offsets[self._doc], unit.offsets[self._doc + 1]
        return unit.tokens[start:stop]

    def _next_unit(self) -> UnitTokens:
        first = self._unit is None
        self.open()
        began = time.perf_counter()
        unit = next(self._units)
        self.wait_s += time.perf_counter() - began
        if unit.unit.epoch != self._epoch:
            self._end_epoch()
            self._epoch, self._epoch_docs, self._epoch_whole = unit.unit.epoch, 0, True
        self._epoch_docs += unit.n_docs
        self._unit, self._doc = unit, 0
        if first:
            self._seek(unit)
        return unit

    def _seek(self, unit: UnitTokens) -> None:
        """Skip to the cursor we resumed from inside the first unit."""
        start = self._start
        self._doc = int(np.searchsorted(unit.positions, start.position))
        if start.token:
            label = f"{self.plan.components[self.component].label}, shard {self.shard}"
            if self._doc >= unit.n_docs or unit.positions[self._doc] != start.position:
                raise LoaderStateError(
                    f"{label}: the state points inside document {start.position} of epoch {start.epoch}, which the "
                    "data does not hold"
                )
            length = int(unit.offsets[self._doc + 1] - unit.offsets[self._doc])
            if start.token > length:  # the separator, token `length`, is the last one a cursor can name
                raise LoaderStateError(
                    f"{label}: the state points at token {start.token} of document {start.position} of epoch "
                    f"{start.epoch}, which has {length} tokens and a separator"
                )
            self._tok = start.token
        else:
            self._tok = 0

    def _end_epoch(self) -> None:
        if self._epoch_whole and self._epoch_docs == 0:
            component = self.plan.components[self.component]
            raise LoaderConfigError(
                f"{component.label}: logical shard {self.shard} found no documents in a whole epoch "
                f"({self._slice_length} rows, after the row filter and held-out split); the component is too "
                f"small or too filtered for num_shards={self.plan.num_shards}"
            )
