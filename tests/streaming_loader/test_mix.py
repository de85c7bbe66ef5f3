"""The mixing schedule: every batch within one sequence of its target, shares converging."""

from __future__ import annotations

import random

import pytest

from streaming_loader.mix import MixSchedule, deal


@pytest.mark.parametrize("case", range(12))
def test_every_batch_is_within_one_sequence_and_shares_converge(case):
    rng = random.Random(case)
    k = rng.randrange(1, 6)
    weights = [rng.choice([0.0, rng.random(), rng.randrange(1, 9)]) for _ in range(k - 1)] + [rng.random() + 0.01]
    batch = rng.choice([1, 2, 3, 8, 16, 30, 256])
    schedule = MixSchedule(weights, batch)
    target = [batch * w / sum(weights) for w in weights]
    deficits, totals = schedule.initial_deficits(), [0] * k
    for b in range(1, 400):
        counts, deficits = schedule.counts(deficits)
        assert sum(counts) == batch
        assert all(abs(n - t) < 1 for n, t in zip(counts, target, strict=True))
        assert all(n == 0 for n, w in zip(counts, weights, strict=True) if w == 0)
        totals = [a + n for a, n in zip(totals, counts, strict=True)]
        # The running totals never drift from the target by a whole sequence or more.
        assert all(abs(a - b * t) < 1 for a, t in zip(totals, target, strict=True)), (weights, batch, b)


def test_the_schedule_rotates_the_extra_sequences():
    schedule = MixSchedule([1, 1, 1], 8)  # 8/3 each: two get 3 and one gets 2, in turn
    deficits, seen = schedule.initial_deficits(), []
    for _ in range(3):
        counts, deficits = schedule.counts(deficits)
        seen.append(tuple(counts))
    assert sorted(sum(c[i] for c in seen) for i in range(3)) == [8, 8, 8]


def test_dealing_gives_every_shard_its_share_and_moves_the_start():
    hands = deal([5, 3], num_shards=4, seed=1, batch=0)
    assert [len(h) for h in hands] == [2, 2, 2, 2]
    assert sorted(c for h in hands for c in h) == [0] * 5 + [1] * 3
    starts = {tuple(map(tuple, deal([5, 3], 4, 1, b))) for b in range(20)}
    assert len(starts) > 1
    assert deal([5, 3], 4, 1, 7) == deal([5, 3], 4, 1, 7)
