"""Scoring a tool's clusters against the exact ground truth (``pipelines.similarity.exact_clusters``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pipelines.similarity import Agreement, agreement


def score(ids: Sequence[str], predicted: Mapping[str, object], truth: np.ndarray) -> Agreement:
    """Pairwise agreement of a tool's clusters (id → cluster label; absent: alone) with the truth."""
    labels = np.array([f"c:{predicted[i]}" if i in predicted else f"d:{i}" for i in ids])
    return agreement(labels, truth)
