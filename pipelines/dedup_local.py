"""Dedup's decisions on the driver, from the collisions: the plan for inputs that fit one machine.

The features pass (``dedup_stages.document_features`` in Spark tasks) gives each document an
exact key and LSH band hashes. Only the groups that several documents share (exact groups and
band buckets of two or more) can make duplicates, and those are few: on 200 MB of Python source
about a tenth of the documents. Collected to the driver, candidates, clusters and kept
documents are plain Python over thousands of keys, where the same steps as Spark jobs (windows,
joins, large-star/small-star rounds) cost some twenty jobs of scheduling. The rules are the
distributed plan's (``dedup.py``), step for step, so both give the same tables:

- a document stands for its exact group by the group's smallest key (its representative);
- a bucket's distinct representatives give all their pairs when there are at most
  ``PAIRS_BUCKET_LIMIT``, else each is paired with the ``BUCKET_ANCHORS`` smallest;
- verified pairs join exact groups into clusters (connected components);
- a cluster keeps its reference document if it has one, else its longest text, then its
  smallest key; ``cluster_id`` is its smallest input ``doc_id``.

Keys are the job's internal ``_key``: the side (``REFERENCE`` sorts before ``INPUT``), then the
``doc_id``. Python orders strings by code point, which for UTF-8 is Spark's byte order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Internal document key: the side ("0" reference, "1" input) then doc_id. Reference documents
# sort first, so a cluster's smallest key tells whether it holds published data; input and
# reference may share doc_ids (the same record, already published).
REFERENCE, INPUT = "0", "1"
# LSH buckets up to this size give all their pairs as candidates; in a larger one each member is
# paired with the bucket's BUCKET_ANCHORS smallest members (as NeMo Curator's anchor documents).
PAIRS_BUCKET_LIMIT = 32
BUCKET_ANCHORS = 4


@dataclass(frozen=True)
class Collisions:
    """What the features pass found shared: exact groups and LSH buckets of two or more documents."""

    exact_groups: list[list[str]]  # keys of documents with the same normalised text
    buckets: list[list[str]]  # keys of documents sharing one band hash (any documents with bands)
    length: dict[str, int]  # UTF-8 bytes of the text of every key above

    def representatives(self) -> dict[str, str]:
        """Key → its exact group's smallest key, for the keys of exact groups (others stand for themselves)."""
        rep = {}
        for group in self.exact_groups:
            smallest = min(group)
            rep.update(dict.fromkeys(group, smallest))
        return rep


def collisions_of(features: pa.Table) -> Collisions:
    """The exact groups and LSH buckets of two or more documents in the features pass's rows
    (``dedup_stages.FEATURE_FIELDS``), grouped by pyarrow on the driver."""
    keys = features.column("_key").to_pylist()
    lengths = features.column("_length").to_numpy()
    rows = pa.array(np.arange(features.num_rows))
    exact = _shared(pa.table({"_exact": features.column("_exact"), "row": rows}), ["_exact"])
    bands = features.column("_bands").combine_chunks()
    flat = pc.list_flatten(bands)
    width = len(flat) // max(1, len(bands) - bands.null_count)  # every present list has one hash per band
    band = pa.array(np.arange(len(flat)) % max(1, width))
    shared = _shared(pa.table({"band": band, "hash": flat, "row": pc.list_parent_indices(bands)}), ["band", "hash"])
    members = {i for group in exact + shared for i in group}
    return Collisions(
        exact_groups=[[keys[i] for i in group] for group in exact],
        buckets=[[keys[i] for i in group] for group in shared],
        length={keys[i]: int(lengths[i]) for i in members},
    )


def _shared(rows: pa.Table, by: list[str]) -> list[list[int]]:
    """The ``row`` lists of the groups of ``by`` that hold two or more rows."""
    grouped = rows.group_by(by, use_threads=False).aggregate([("row", "list")])
    lists = grouped.column("row_list")
    return lists.filter(pc.greater(pc.list_value_length(lists), 1)).to_pylist()


def feature_counts(features: pa.Table) -> dict[str, int]:
    """What stage 1 reports: documents and bytes, all and input only, and short input documents."""
    is_input = pc.starts_with(features.column("_key"), INPUT)
    lengths = features.column("_length")
    return {
        "all": features.num_rows,
        "bytes": pc.sum(lengths).as_py() or 0,
        "inputs": pc.sum(is_input).as_py() or 0,
        "input_bytes": pc.sum(pc.if_else(is_input, lengths, 0)).as_py() or 0,
        "short": pc.sum(pc.and_(is_input, pc.is_null(features.column("_bands")))).as_py() or 0,
    }


def candidate_pairs(buckets: Iterable[list[str]], rep: dict[str, str]) -> list[tuple[str, str]]:
    """Distinct pairs (a < b) of representatives that share a bucket, sorted; as ``dedup._candidates``."""
    pairs: set[tuple[str, str]] = set()
    for bucket in buckets:
        members = sorted({rep.get(key, key) for key in bucket})
        anchors = members if len(members) <= PAIRS_BUCKET_LIMIT else members[:BUCKET_ANCHORS]
        for i, a in enumerate(anchors):
            for b in members[i + 1 :]:
                # Pairs within the --against snapshot cannot change what happens to an input document.
                if not (a.startswith(REFERENCE) and b.startswith(REFERENCE)):
                    pairs.add((a, b))
    return sorted(pairs)


def components(edges: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Node → the smallest node connected to it, for every node of ``edges`` (union-find)."""
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        root = node
        while parent[root] != root:
            root = parent[root]
        while parent[node] != root:  # path compression keeps later finds short
            parent[node], node = root, parent[node]
        return root

    for a, b in edges:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:  # the smaller root stays root, so a root is its component's minimum
            parent[max(ra, rb)] = min(ra, rb)
    return {node: find(node) for node in parent}


@dataclass(frozen=True)
class Decision:
    """The clusters-table row of one input document that is in a cluster of two or more documents."""

    key: str
    cluster_id: str
    kept: bool
    cluster_size: int
    duplicate_of: str | None
    against: bool
    match: str | None  # "exact", "near", or None when kept
    rep: str  # its exact group's representative, and the kept document's: their similarity is reported
    keeper_rep: str

    @property
    def doc_id(self) -> str:
        return self.key[1:]


def decide(collisions: Collisions, rep: dict[str, str], edges: Iterable[tuple[str, str]]) -> list[Decision]:
    """The decision of every input document in a cluster of two or more documents, sorted by key.

    Clusters are exact groups joined by ``edges`` (verified pairs of representatives). Documents
    in no such cluster are kept alone; their rows need nothing from here.
    """
    root_of = components(edges)
    clusters: dict[str, set[str]] = {}
    for key in [*rep, *root_of]:
        r = rep.get(key, key)
        clusters.setdefault(root_of.get(r, r), set()).add(key)
    length = collisions.length
    decisions = []
    for members in clusters.values():
        if len(members) < 2:
            continue
        # Reference documents first, then the longest text, then the smallest key.
        keeper = min(members, key=lambda k: (k[0], -length[k], k))
        inputs = sorted(k for k in members if k.startswith(INPUT))
        if not inputs:
            continue
        keeper_rep = rep.get(keeper, keeper)
        for key in inputs:
            kept = key == keeper
            own_rep = rep.get(key, key)
            match = None if kept else ("exact" if own_rep == keeper_rep else "near")
            decisions.append(
                Decision(
                    key=key,
                    cluster_id=inputs[0][1:],
                    kept=kept,
                    cluster_size=len(inputs),
                    duplicate_of=None if kept else keeper[1:],
                    against=not kept and keeper.startswith(REFERENCE),
                    match=match,
                    rep=own_rep,
                    keeper_rep=keeper_rep,
                )
            )
    return sorted(decisions, key=lambda d: d.key)


def decision_stats(decisions: list[Decision], documents: int, bytes_in: int, length: dict[str, int]) -> dict[str, int]:
    """The run's stats as ``dedup._stats`` counts them over every input document, in its order.

    ``documents`` and ``bytes_in`` count all input documents; a document outside ``decisions``
    is kept alone (cluster of one, not against anything).
    """
    removed = [d for d in decisions if not d.kept]
    heads = [d for d in decisions if d.doc_id == d.cluster_id]  # one row per cluster
    return {
        "documents-in": documents,
        "kept": documents - len(removed),
        "exact-duplicates": sum(d.match == "exact" for d in decisions),
        "near-duplicates": sum(d.match == "near" for d in decisions),
        "against-duplicates": sum(d.against for d in decisions),
        "clusters": sum(d.cluster_size > 1 or d.against for d in heads),
        "largest-cluster": max([d.cluster_size for d in decisions] + ([1] if documents else [0])),
        "bytes-in": bytes_in,
        "bytes-kept": bytes_in - sum(length[d.key] for d in removed),
    }
