"""One unit of work, read and tokenized: what both backends compute, identically."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streaming_loader.plan import StreamPlan, Unit
from streaming_loader.read import read_unit
from streaming_loader.tokenize import TokenizerSpec, encode


@dataclass(frozen=True)
class UnitTokens:
    """A unit's documents in stream order: positions, and their tokens as flat ids plus offsets."""

    unit: Unit
    first: int
    """First position of the shard's slice the unit covers."""
    end: int
    """One past its last position."""
    positions: np.ndarray
    tokens: np.ndarray
    offsets: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.positions)


def tokenize_unit(plan: StreamPlan, tokenizer: TokenizerSpec, unit: Unit) -> UnitTokens:
    """Read ``unit``'s documents and tokenize them (the whole of a reader task's work)."""
    docs = read_unit(plan, unit)
    tokens, offsets = encode(tokenizer.load(), docs.texts, plan.max_document_bytes)
    first, end = plan.positions(unit)
    return UnitTokens(unit, first, end, docs.positions, tokens, offsets)


def empty_like(plan: StreamPlan, unit: Unit) -> UnitTokens:
    first, end = plan.positions(unit)
    return UnitTokens(unit, first, end, np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(1, np.int64))
