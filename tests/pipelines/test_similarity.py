"""Exact Jaccard, the exact all-pairs join and clustering agreement, against brute force."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from pipelines.shingles import Shingled
from pipelines.similarity import agreement, components, jaccard_join, pair_jaccard


def as_shingled(sets: list[set[int]]) -> Shingled:
    doc = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    hashes = np.array([h for s in sets for h in sorted(s)], dtype=np.uint32)
    return Shingled(len(sets), doc.astype(np.int64), hashes, [b""] * len(sets))


def near_duplicate_sets(seed: int, groups: int = 60) -> list[set[int]]:
    """Groups of sets that overlap by varying amounts, plus unrelated ones."""
    rng = random.Random(seed)
    sets = []
    for _ in range(groups):
        base = set(rng.sample(range(5000), rng.randint(5, 80)))
        sets.append(base)
        for _ in range(rng.randint(0, 3)):
            variant = set(base)
            for _ in range(rng.randint(0, len(base) // 3)):
                variant.discard(rng.choice(sorted(variant)))
                variant.add(rng.randrange(5000))
            sets.append(variant)
    sets.append(set())
    return sets


def brute_force(sets: list[set[int]], threshold: float) -> dict[tuple[int, int], float]:
    found = {}
    for i, j in itertools.combinations(range(len(sets)), 2):
        union = len(sets[i] | sets[j])
        if union and len(sets[i] & sets[j]) / union >= threshold:
            found[(i, j)] = len(sets[i] & sets[j]) / union
    return found


def test_pair_jaccard_is_exact():
    sets = near_duplicate_sets(1)
    rng = random.Random(2)
    pairs = [(rng.randrange(len(sets)), rng.randrange(len(sets))) for _ in range(300)]
    left, right = as_shingled([sets[i] for i, _ in pairs]), as_shingled([sets[j] for _, j in pairs])
    want = [len(sets[i] & sets[j]) / len(sets[i] | sets[j]) if sets[i] | sets[j] else 0.0 for i, j in pairs]
    assert pair_jaccard(left, right).tolist() == pytest.approx(want)


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.95])
def test_jaccard_join_finds_exactly_the_pairs_brute_force_finds(threshold):
    sets = near_duplicate_sets(3)
    i, j, sim = jaccard_join(as_shingled(sets), threshold)
    want = brute_force(sets, threshold)
    assert len(want) > 5
    assert dict(zip(zip(i.tolist(), j.tolist(), strict=True), sim.tolist(), strict=True)) == pytest.approx(want)


def test_jaccard_join_leaves_out_ineligible_documents():
    sets = near_duplicate_sets(4)
    eligible = np.array([len(s) >= 30 for s in sets])
    i, j, _ = jaccard_join(as_shingled(sets), 0.7, eligible)
    want = {p for p in brute_force(sets, 0.7) if eligible[p[0]] and eligible[p[1]]}
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == want


def test_agreement_counts_pairs():
    truth = np.array([0, 0, 0, 1, 1, 2])
    assert agreement(truth, truth).f1 == 1.0
    split = agreement(np.array([0, 0, 5, 1, 1, 2]), truth)  # one of the three-member cluster split off
    assert (split.predicted_pairs, split.true_pairs, split.common_pairs) == (2, 4, 2)
    assert split.precision == 1.0 and split.recall == 0.5
    merged = agreement(np.array([0, 0, 0, 0, 0, 2]), truth)
    assert merged.precision == pytest.approx(4 / 10) and merged.recall == 1.0


def test_components_label_nodes_with_their_smallest_member():
    labels = components(7, np.array([5, 1, 3]), np.array([1, 3, 6]))
    assert labels.tolist() == [0, 1, 2, 1, 4, 1, 1]
