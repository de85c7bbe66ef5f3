"""Exact Jaccard similarity of shingle sets: for pairs (``--verify``), for all pairs (the ground
truth the dedup job is measured against), and how well a clustering agrees with another.

Sets come as ``Shingled`` (flat arrays sorted by document then hash), and every function works
on whole arrays, so checking a million candidate pairs costs a few sorts, not a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipelines.shingles import ShingleConfig, Shingled, ranks_within, shingle

# Shingle entries gathered per step when verifying many pairs: bounds the memory of jaccard_join.
_GATHER_ENTRIES = 1 << 24


def pair_jaccard(left: Shingled, right: Shingled) -> np.ndarray:
    """Exact Jaccard similarity of document ``i`` of ``left`` and document ``i`` of ``right``, for every i."""
    if left.n_docs != right.n_docs:
        raise ValueError(f"pair_jaccard needs as many left as right documents ({left.n_docs} != {right.n_docs})")
    inter = _intersections(left.doc, left.hashes, right.doc, right.hashes, left.n_docs)
    union = left.counts() + right.counts() - inter
    return np.divide(inter, union, out=np.zeros(left.n_docs), where=union > 0)


def _intersections(ldoc, lhash, rdoc, rhash, n: int) -> np.ndarray:
    """|L_i ∩ R_i| for each i, given sets unique within each document."""
    lkey = (ldoc.astype(np.int64) << 32) | lhash.astype(np.int64)
    rkey = (rdoc.astype(np.int64) << 32) | rhash.astype(np.int64)
    both = np.intersect1d(lkey, rkey, assume_unique=True)
    return np.bincount(both >> 32, minlength=n)


def jaccard_join(shingled: Shingled, threshold: float, eligible: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Every pair of documents (i < j) whose exact Jaccard similarity is at least ``threshold``.

    Exact, not sampled: prefix filtering (Chaudhuri et al. 2006; Bayardo et al.'s All-Pairs)
    finds every candidate, and each candidate is checked against its full sets. With the
    shingles of each document ordered rarest first, two documents with J ≥ t share a shingle
    among the first ``|x| - ceil(t·|x|) + 1`` of each. ``eligible`` (a boolean mask) restricts
    the join to some documents. Returns arrays (i, j, jaccard).
    """
    counts = shingled.counts()
    if eligible is None:
        eligible = counts > 0
    eligible = eligible & (counts > 0)
    keep = eligible[shingled.doc]
    doc, hashes = shingled.doc[keep], shingled.hashes[keep]
    rank = _rarity_rank(hashes)
    order = np.lexsort((rank, doc))  # each document's shingles, rarest first
    doc, rank = doc[order], rank[order]
    sizes = counts * eligible
    starts = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    prefix = sizes - np.ceil(threshold * sizes - 1e-9).astype(np.int64) + 1
    in_prefix = (np.arange(len(doc)) - starts[doc]) < prefix[doc]
    left, right = _pairs_sharing(rank[in_prefix], doc[in_prefix])
    small, large = np.minimum(sizes[left], sizes[right]), np.maximum(sizes[left], sizes[right])
    plausible = small >= threshold * large - 1e-9  # J ≤ |small| / |large|
    left, right = left[plausible], right[plausible]
    similarity = jaccard_of_pairs(shingled, left, right)
    hit = similarity >= threshold
    return left[hit], right[hit], similarity[hit]


def _rarity_rank(hashes: np.ndarray) -> np.ndarray:
    """Rank of each entry's hash in the global order (frequency, hash): rare shingles first."""
    values = hashes.astype(np.int64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    boundary = np.ones(len(values), dtype=bool)
    boundary[1:] = sorted_values[1:] != sorted_values[:-1]
    group = np.cumsum(boundary) - 1
    frequency = np.bincount(group)
    distinct = sorted_values[boundary]
    group_rank = np.empty(len(distinct), dtype=np.int64)
    group_rank[np.lexsort((distinct, frequency))] = np.arange(len(distinct))
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = group_rank[group]
    return rank


def _pairs_sharing(token: np.ndarray, doc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs (i < j) of documents that share a token."""
    key = (token << 32) | doc
    key.sort()
    token, doc = key >> 32, key & 0xFFFFFFFF
    run_start = np.ones(len(token), dtype=bool)
    run_start[1:] = token[1:] != token[:-1]
    starts = np.flatnonzero(run_start)
    ends = np.append(starts[1:], len(token))
    run_end = np.repeat(ends, ends - starts)
    later = run_end - np.arange(len(token)) - 1  # members after each entry in its token's run
    first = np.repeat(np.arange(len(token)), later)
    offset = ranks_within(later)
    second = first + 1 + offset
    pair = (doc[first] << 32) | doc[second]  # doc ascending within a run, so first < second
    pair = _sorted_unique(pair)
    return pair >> 32, pair & 0xFFFFFFFF


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    values = np.sort(values.astype(np.int64))
    fresh = np.ones(len(values), dtype=bool)
    fresh[1:] = values[1:] != values[:-1]
    return values[fresh]


def jaccard_of_pairs(shingled: Shingled, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Exact Jaccard of each pair (left[k], right[k]) of documents of ``shingled``."""
    counts, starts = shingled.counts(), shingled.starts()
    out = np.zeros(len(left))
    done = 0
    while done < len(left):
        # Take as many pairs as fit in the gather budget (at least one).
        need = np.cumsum(counts[left[done:]] + counts[right[done:]])
        stop = done + max(1, int(np.searchsorted(need, _GATHER_ENTRIES, side="right")))
        lsel, rsel = left[done:stop], right[done:stop]
        ldoc, lhash = _gather(shingled, starts, counts, lsel)
        rdoc, rhash = _gather(shingled, starts, counts, rsel)
        inter = _intersections(ldoc, lhash, rdoc, rhash, len(lsel))
        out[done:stop] = inter / (counts[lsel] + counts[rsel] - inter)
        done = stop
    return out


def _gather(shingled: Shingled, starts, counts, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shingles of ``docs`` as a new flat set numbered 0..len(docs)-1."""
    sizes = counts[docs]
    new_doc = np.repeat(np.arange(len(docs)), sizes)
    within = ranks_within(sizes)
    return new_doc, shingled.hashes[starts[docs][new_doc] + within]


@dataclass(frozen=True)
class Agreement:
    """How the pairs that a clustering puts together compare with a reference clustering's."""

    predicted_pairs: int
    true_pairs: int
    common_pairs: int

    @property
    def precision(self) -> float:
        return self.common_pairs / self.predicted_pairs if self.predicted_pairs else 1.0

    @property
    def recall(self) -> float:
        return self.common_pairs / self.true_pairs if self.true_pairs else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def __str__(self) -> str:
        return (
            f"precision {self.precision:.4f}, recall {self.recall:.4f}, F1 {self.f1:.4f} "
            f"({self.common_pairs} of {self.predicted_pairs} predicted and {self.true_pairs} true pairs)"
        )


def agreement(predicted: np.ndarray, truth: np.ndarray) -> Agreement:
    """Pairwise agreement of two labelings of the same documents (equal label = same cluster)."""
    if len(predicted) != len(truth):
        raise ValueError("both labelings must cover the same documents")
    p, t = _dense(np.asarray(predicted)), _dense(np.asarray(truth))
    return Agreement(_same_pairs(p), _same_pairs(t), _same_pairs((p << 32) | t))


def _dense(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..k-1 (int64)."""
    order = np.argsort(labels, kind="stable")
    fresh = np.ones(len(labels), dtype=bool)
    fresh[1:] = labels[order][1:] != labels[order][:-1]
    dense = np.empty(len(labels), dtype=np.int64)
    dense[order] = np.cumsum(fresh) - 1
    return dense


def _same_pairs(labels: np.ndarray) -> int:
    sizes = np.bincount(_dense(labels)).astype(np.int64)
    return int((sizes * (sizes - 1) // 2).sum())


def components(n: int, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Connected component label (its smallest member) of each of ``n`` nodes, given edges."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(left), dtype=np.int8), (left, right)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    smallest = np.full(label.max() + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(smallest, label, np.arange(n))
    return smallest[label]


def exact_clusters(texts: Sequence[str], shingles: ShingleConfig, threshold: float) -> np.ndarray:
    """The clusters dedup should find, by brute force: per document, the smallest index in its cluster.

    Two documents are duplicates when their normalised texts are equal, or when both have at
    least ``min_shingles`` shingles and the exact Jaccard similarity of their shingle sets
    reaches the threshold; clusters are the connected components of that relation.
    """
    shingled = shingle(pa.array(list(texts), type=pa.large_string()), shingles)
    left, right, _ = jaccard_join(shingled, threshold, shingled.counts() >= shingles.min_shingles)
    first_with_key: dict[bytes, int] = {}
    same_text = [(first_with_key.setdefault(key, i), i) for i, key in enumerate(shingled.exact)]
    exact_left = np.array([a for a, _ in same_text], dtype=np.int64)
    exact_right = np.array([b for _, b in same_text], dtype=np.int64)
    return components(len(texts), np.concatenate([left, exact_left]), np.concatenate([right, exact_right]))
