"""Dedup clusters: members side by side, each diffed against the kept document, with the exact
Jaccard of the project's shingles and the MinHash estimate, computed by the dedup job's own code
(pipelines.shingles, pipelines.minhash, pipelines.similarity) under the run's recorded parameters."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.expressions import EqualTo, GreaterThan
from pyiceberg.table import Table

from lakehouse.catalog import load_table
from lakehouse.commit import recorded_inputs, recorded_params, summary_properties
from lakehouse.compact import data_snapshot
from lakehouse.refs import parse_identifier
from pipelines.minhash import MinHashConfig, estimated_similarity, signatures
from pipelines.shingles import ShingleConfig, shingle
from pipelines.similarity import pair_jaccard
from ui.cache import memo, pinned
from ui.documents import find_document
from ui.sources import NotFound

# The clusters list reads at most this many rows of duplicates (a page, not an export).
LIST_LIMIT = 5000


@dataclass
class Member:
    doc_id: str
    kept: bool
    match: str | None
    similarity: float | None  # recorded by the job
    jaccard: float | None  # recorded by the job
    text: str | None
    found_in: str | None
    diff: list[tuple[str, str]]  # (op, line): op is " ", "+" or "-" against the kept document
    exact_jaccard: float | None = None  # recomputed here
    minhash_estimate: float | None = None  # recomputed here


@memo(32, key=pinned)
def list_clusters(table: Table, snapshot_id: int) -> list[dict]:
    """Clusters with more than one member: id, size, how they matched."""
    rows = (
        table.scan(
            snapshot_id=snapshot_id,
            row_filter=GreaterThan("cluster_size", 1),
            selected_fields=("cluster_id", "cluster_size", "kept", "match"),
            limit=LIST_LIMIT,
        )
        .to_arrow()
        .to_pylist()
    )
    clusters: dict[str, dict] = {}
    for row in rows:
        entry = clusters.setdefault(
            row["cluster_id"], {"cluster_id": row["cluster_id"], "size": row["cluster_size"], "matches": set()}
        )
        if row["match"]:
            entry["matches"].add(row["match"])
    return sorted(clusters.values(), key=lambda c: (-c["size"], c["cluster_id"]))


# Members carry their texts and diffs: fewer of them are kept. The catalog only finds the
# source tables the pinned snapshot's summary names, by their pinned snapshots: not part of the key.
@memo(16, key=lambda _catalog, table, snapshot_id, cluster_id: pinned(table, snapshot_id, cluster_id))
def cluster_members(catalog, table: Table, snapshot_id: int, cluster_id: str) -> list[Member]:
    rows = table.scan(snapshot_id=snapshot_id, row_filter=EqualTo("cluster_id", cluster_id)).to_arrow().to_pylist()
    if not rows:
        raise NotFound(f"no cluster {cluster_id!r} in this snapshot")
    # The dedup run that made these rows, through any compaction since (its params, its inputs).
    made = data_snapshot(table, table.snapshot_by_id(snapshot_id))
    props, where = summary_properties(made), f"{'.'.join(table.name())}@{made.snapshot_id}'s"
    params = recorded_params(props.get("factory.params"), f"{where} factory.params")
    inputs = recorded_inputs(props.get("factory.inputs"), f"{where} factory.inputs")
    sources = [(entry["table"], entry["snapshot_id"]) for entry in inputs if "table" in entry]
    rows.sort(key=lambda r: (not r["kept"], r["doc_id"]))
    members = []
    for row in rows:
        text, where = _text_of(catalog, sources, row["doc_id"])
        members.append(
            Member(
                row["doc_id"], row["kept"], row.get("match"), row.get("similarity"), row.get("jaccard"), text, where, []
            )
        )
    kept = next((m for m in members if m.kept and m.text is not None), None)
    if kept is None:  # kept in the --against snapshot: compare with what the rows say it duplicates
        anchor = next((r["duplicate_of"] for r in rows if r.get("duplicate_of")), None)
        text, where = _text_of(catalog, sources, anchor) if anchor else (None, None)
        if text is not None:
            kept = Member(anchor, True, None, None, None, text, where, [])
            members.insert(0, kept)
    if kept is not None:
        _compare(kept, members, params)
    return members


def _text_of(catalog, sources: list[tuple[str, int]], doc_id: str) -> tuple[str | None, str | None]:
    for name, snapshot_id in sources:
        table = load_table(catalog, parse_identifier(name))
        row, _, _ = find_document(table, snapshot_id, name, doc_id)
        if row is not None:
            return row.get("text"), f"{name}@{snapshot_id}"
    return None, None


def _compare(kept: Member, members: list[Member], params: dict) -> None:
    others = [m for m in members if m is not kept and m.text is not None]
    shingles = ShingleConfig(unit=params.get("shingle_unit", "word"), n=int(params.get("ngram", 5)))
    minhash = MinHashConfig(
        threshold=float(params.get("threshold", 0.8)),
        num_perm=int(params.get("num_perm", 128)),
        seed=int(params.get("seed", 1)),
    )
    if others:
        left = shingle(pa.array([kept.text] * len(others)), shingles)
        right = shingle(pa.array([m.text for m in others]), shingles)
        exact = pair_jaccard(left, right)
        estimate = estimated_similarity(signatures(left, minhash), signatures(right, minhash))
        for m, j, e in zip(others, exact, estimate, strict=True):
            m.exact_jaccard, m.minhash_estimate = float(j), float(e)
    kept_lines = kept.text.splitlines()
    for m in members:
        if m is kept or m.text is None:
            continue
        m.diff = [
            (line[0], line[2:])
            for line in difflib.ndiff(kept_lines, m.text.splitlines())
            if line[:1] in (" ", "+", "-")
        ]
