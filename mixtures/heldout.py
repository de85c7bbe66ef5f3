"""The held-out split: a fixed hash of ``doc_id``, so a document's side never changes.

The split depends only on the document id, the salt recorded in the manifest and the
component's fraction, never on the seed, the mixture or the snapshot: a document held out for
evaluation stays held out when the mixture is re-weighted or the table grows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

METHOD = "blake2b-64"
SALT = "factory-heldout-v1"
_SCALE = float(2**64)


def heldout_mask(doc_ids: Sequence[str], fraction: float, salt: str = SALT) -> np.ndarray:
    """True for each document of the held-out split (``fraction`` of ids, by hash)."""
    if fraction <= 0:
        return np.zeros(len(doc_ids), dtype=bool)
    key = salt.encode()
    threshold = int(fraction * _SCALE)
    return np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(d.encode(), digest_size=8, key=key).digest(), "big") < threshold
            for d in doc_ids
        ),
        dtype=bool,
        count=len(doc_ids),
    )
