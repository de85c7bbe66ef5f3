"""MinHash signatures and LSH bands against their definitions."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from scipy.integrate import quad

from lakehouse.errors import InputError
from pipelines.minhash import MinHashConfig, band_hashes, estimated_similarity, optimal_bands, signatures
from pipelines.shingles import ShingleConfig, Shingled, shingle


def datasketch_optimal_param(threshold: float, num_perm: int, fn_weight: float) -> tuple[int, int]:
    """datasketch's ``_optimal_param``, with scipy's quadrature as it has it."""
    best, best_error = (0, 0), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = quad(lambda s, b=b, r=r: 1 - (1 - s**r) ** b, 0.0, threshold)[0]
            fn = quad(lambda s, b=b, r=r: 1 - (1 - (1 - s**r) ** b), threshold, 1.0)[0]
            error = (1 - fn_weight) * fp + fn_weight * fn
            if error < best_error:
                best, best_error = (b, r), error
    return best


@pytest.mark.parametrize(("threshold", "num_perm", "fn_weight"), [(0.8, 128, 0.5), (0.7, 64, 0.5), (0.8, 128, 0.8)])
def test_bands_and_rows_are_chosen_as_datasketch_does(threshold, num_perm, fn_weight):
    assert optimal_bands(threshold, num_perm, fn_weight) == datasketch_optimal_param(threshold, num_perm, fn_weight)
    assert MinHashConfig(threshold=threshold, num_perm=num_perm, fn_weight=fn_weight).band_rows == optimal_bands(
        threshold, num_perm, fn_weight
    )
    assert MinHashConfig(bands=4, rows=3).band_rows == (4, 3)


def random_sets(rng: random.Random, n: int, size: int) -> Shingled:
    docs, hashes = [], []
    for d in range(n):
        values = sorted(rng.sample(range(2**32), rng.randint(1, size)))
        docs += [d] * len(values)
        hashes += values
    return Shingled(n, np.array(docs, dtype=np.int64), np.array(hashes, dtype=np.uint32), [b""] * n)


def test_signatures_follow_the_definition():
    cfg = MinHashConfig(num_perm=16)
    sets = random_sets(random.Random(1), 20, 50)
    sets = Shingled(21, sets.doc, sets.hashes, [b""] * 21)  # document 20 has no shingles
    got = signatures(sets, cfg)
    a, b = (x.tolist() for x in cfg.permutations)
    for d in range(20):
        values = sets.hashes[sets.doc == d].tolist()
        want = [min(((ak * v + bk) % 2**64) >> 32 for v in values) for ak, bk in zip(a, b, strict=True)]
        assert got[d].tolist() == want
    assert (got[20] == 2**32 - 1).all()


def test_signature_agreement_estimates_jaccard():
    rng = random.Random(2)
    left, right, truth = [], [], []
    for _ in range(200):
        common = rng.sample(range(2**32), rng.randint(50, 400))
        a = set(common + rng.sample(range(2**32), rng.randint(0, 200)))
        b = set(common + rng.sample(range(2**32), rng.randint(0, 200)))
        left.append(sorted(a))
        right.append(sorted(b))
        truth.append(len(a & b) / len(a | b))
    cfg = MinHashConfig()

    def sig(sets):
        doc = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
        return signatures(Shingled(len(sets), doc, np.concatenate(sets).astype(np.uint32), []), cfg)

    error = np.abs(estimated_similarity(sig(left), sig(right)) - np.array(truth))
    assert error.mean() < 0.04 and error.max() < 0.2  # std of the estimate is at most 0.5/sqrt(128) ≈ 0.044


def test_same_text_same_signature_in_any_batch():
    cfg = MinHashConfig()
    text = "the same document wherever it appears, in whichever batch it lands, " * 5
    alone = signatures(shingle(pa.array([text]), ShingleConfig()), cfg)[0]
    batch = signatures(shingle(pa.array(["other words entirely here and there now", text]), ShingleConfig()), cfg)
    assert (batch[1] == alone).all()


def test_band_hashes_change_only_where_the_signature_does():
    sigs = np.random.default_rng(3).integers(0, 2**32, size=(2, 128), dtype=np.uint64).astype(np.uint32)
    sigs[1] = sigs[0]
    sigs[1, 25] += 1  # entry 25 lies in band 2 of 10-row bands
    bands = band_hashes(sigs, 12, 10)
    assert bands.dtype == np.int64 and bands.shape == (2, 12)
    assert [i for i in range(12) if bands[0, i] != bands[1, i]] == [2]
    assert len(set(bands[0].tolist())) == 12


def test_hash_functions_depend_on_the_seed_alone():
    a, b = MinHashConfig(seed=1).permutations
    assert (a % 2 == 1).all() and len(set(a.tolist())) == 128
    # Golden values (a[0] is splitmix64(1), the published first output): signatures stored by one version must stay comparable with the next.
    assert int(a[0]) == 0x910A2DEC89025CC1 and int(b[0]) == 0x3D285F4226BFD385
    assert (MinHashConfig(seed=2).permutations[0] != a).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.0}, "between 0 and 1"),
        ({"num_perm": 1}, "between 2 and 1024"),
        ({"bands": 4}, "both --bands and --rows"),
        ({"bands": 20, "rows": 10}, "at most num_perm"),
        ({"fn_weight": 0.0}, "false-negative weight"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(InputError, match=message):
        MinHashConfig(**kwargs)
