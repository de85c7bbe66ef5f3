"""What the factory decided by itself (``factory.decisions``), and the links from a decision to its
evidence: the sweep whose trials it weighed, the snapshots, the manifests, the training runs.

A decision's JSON columns follow one convention per kind (lakehouse/decisions.py); the pages show
what each holds whatever the kind, and add a link wherever a value names something the UI has a
page for. What is read of ``factory.decisions`` is kept per the table's metadata file (ui/cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from cachetools.keys import hashkey

from lakehouse.decisions import DECISIONS_TABLE, describe_change, find_decision, read_decisions
from lakehouse.errors import FactoryError, InputError
from lakehouse.refs import TableRef
from trainer.lineage import RUN_RECORD, checkpoint_decisions
from ui.cache import file_key, memo
from ui.sources import NotFound, RunDir, Sources, read_json

HOME_DECISIONS = 5

# Evidence keys the page shows as tables or links rather than as plain facts.
_SHOWN_APART = {"sweep_id", "base", "candidate", "differences", "difference", "variants", "p_value", "interval"}


@dataclass(frozen=True)
class SnapshotLink:
    role: str
    table: str
    ref: str


@dataclass(frozen=True)
class RunLink:
    run: RunDir
    why: str


def list_decisions(sources: Sources, kind: str = "", subject: str = "") -> list[dict[str, Any]]:
    """The recorded decisions of ``kind`` about ``subject`` (either may be empty: any), newest first,
    each with ``change``: what it changed in a few words."""
    state = _state(sources)
    return [] if state is None else _listed(sources.catalog, state, kind, subject)


@memo(32, key=lambda _catalog, state, kind, subject: hashkey(state, kind, subject))
def _listed(catalog, state: str, kind: str, subject: str) -> list[dict[str, Any]]:
    rows = read_decisions(catalog, kind=kind or None, subject=subject or None)
    return [{**row, "change": describe_change(row)} for row in reversed(rows)]


@memo(256, key=lambda _catalog, state, decision_id: hashkey(state, decision_id))
def _found(catalog, state: str, decision_id: str) -> dict[str, Any] | None:
    return find_decision(catalog, decision_id)


def _state(sources: Sources) -> str | None:
    """What the kept decisions are keyed on: the table's metadata file, None if there is no table."""
    table = sources.optional_table(DECISIONS_TABLE)
    return None if table is None else table.metadata_location


def decision(sources: Sources, decision_id: str) -> dict[str, Any]:
    """One decision with everything its page shows; ``NotFound`` if it was never recorded."""
    state = _state(sources)
    row = None if state is None else _found(sources.catalog, state, decision_id)
    if row is None:
        raise NotFound(f"no decision {decision_id!r} in factory.decisions")
    evidence = row.get("evidence") or {}
    known = {m.fingerprint for m in sources.manifests()}
    return {
        "row": row,
        "change": describe_change(row),
        "sweep_id": evidence.get("sweep_id"),
        "by_seed": by_seed(evidence),
        "comparisons": comparisons(evidence),
        "facts": {k: v for k, v in evidence.items() if k not in _SHOWN_APART},
        "snapshots": snapshot_links(row),
        "manifests": [f for f in _fingerprints(row) if f in known],
        "runs": run_links(sources, row),
    }


def shaping(sources: Sources, lineage: dict[str, Any], checkpoint: Path) -> tuple[list[dict], list[str], str | None]:
    """The decisions that shaped a checkpoint's data (as ``factory lineage`` lists them), the ids its
    run's ``factory.json`` names that were never recorded, and why they could not be read, if so.
    Kept per the decisions table's state and the two files ``lineage`` and the run's list come from."""
    files = (file_key(checkpoint / "lineage.json"), file_key(checkpoint.parent.parent / RUN_RECORD))
    try:
        rows, not_found = _shaping(sources.catalog, lineage, checkpoint, (_state(sources), files))
    except InputError as exc:  # a broken factory.json: the rest of the checkpoint's page still shows
        return [], [], str(exc)
    return rows, not_found, None


@memo(64, key=lambda _catalog, _lineage, checkpoint, state: hashkey(str(checkpoint), state))
def _shaping(catalog, lineage: dict[str, Any], checkpoint: Path, state: tuple) -> tuple[list[dict], list[str]]:
    return checkpoint_decisions(catalog, lineage, checkpoint)


def by_seed(evidence: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The metric of each run by seed, side by side: the base, then the candidate or each variant
    (and a gate's per-seed differences); columns and rows, empty when the evidence has none."""
    columns: list[str] = []
    values: list[list[Any]] = []
    if isinstance(evidence.get("base"), list):
        columns.append("base")
        values.append(evidence["base"])
    for variant in evidence.get("variants") or []:
        columns.append(str(variant.get("variant")))
        values.append(list(variant.get("metrics") or variant.get("candidate") or []))
    for key in ("candidate", "differences"):
        if isinstance(evidence.get(key), list):
            columns.append("difference" if key == "differences" else key)
            values.append(evidence[key])
    seeds = max((len(v) for v in values), default=0)
    return columns, [[v[i] if i < len(v) else None for v in values] for i in range(seeds)]


def comparisons(evidence: dict[str, Any]) -> list[dict[str, Any]]:
    """Each comparison with the base: the gate's candidate, each ablation variant, or each variant of
    a ladder at each of its sizes (the paired test there)."""
    compared = evidence.get("variants") or ([{**evidence, "variant": "candidate"}] if "p_value" in evidence else [])
    found = []
    for entry in (size for variant in compared for size in _by_size(variant)):
        differences = [d for d in entry.get("differences") or [] if isinstance(d, (int, float))]
        difference = entry.get("difference", fmean(differences) if differences else None)
        found.append(
            {
                "variant": entry.get("variant"),
                "difference": difference,
                "p_value": entry.get("p_value"),
                "interval": entry.get("interval"),
                "exceeds_noise": entry.get("exceeds_noise"),
            }
        )
    return found


def _by_size(variant: dict[str, Any]) -> list[dict[str, Any]]:
    """A ladder's variant as one comparison per size (a size beyond seed noise when its outcome is
    better or worse); any other variant as it is."""
    from experiments.ladder import BETTER, NOISE, WORSE

    sizes = variant.get("sizes")
    if not isinstance(sizes, list):
        return [variant]
    beyond = {BETTER: True, WORSE: True, NOISE: False}
    return [
        {
            **size,
            "variant": f"{variant.get('variant')} at {size.get('size')}",
            "exceeds_noise": beyond.get(size.get("outcome")),
        }
        for size in sizes
        if isinstance(size, dict)
    ]


def snapshot_links(row: dict[str, Any]) -> list[SnapshotLink]:
    """Every snapshot the decision weighed or moved a tag between, once each."""
    inputs, links = row.get("inputs") or {}, []
    if inputs.get("table"):
        for role in ("production", "candidate"):
            if inputs.get(role) is not None:
                links.append(_link(role, f"{inputs['table']}@{inputs[role]}"))
    for name, ref in (inputs.get("components") or {}).items():
        links.append(_link(f"component {name}", str(ref)))
    for role in ("before", "after"):
        state = row.get(role) or {}
        if state.get("table") and state.get("snapshot_id") is not None:
            links.append(_link(role, f"{state['table']}@{state['snapshot_id']}"))
    unique: dict[tuple[str, str], SnapshotLink] = {}
    for link in links:
        if link is not None:
            unique.setdefault((link.table, link.ref), link)
    return list(unique.values())


def _link(role: str, text: str) -> SnapshotLink | None:
    try:
        ref = TableRef.parse(text)
    except FactoryError:  # not a reference a page could open: shown as recorded, without a link
        return None
    return SnapshotLink(role, ref.table_name, ref.ref) if ref.ref else None


def _fingerprints(row: dict[str, Any]) -> list[str]:
    found = [(row.get(role) or {}).get("fingerprint") for role in ("before", "after")]
    return list(dict.fromkeys(f for f in found if isinstance(f, str)))


def run_links(sources: Sources, row: dict[str, Any]) -> list[RunLink]:
    """The training runs under the UI's folders the decision is about or weighed: runs whose
    ``factory.json`` lists it or names its run, and run folders its columns name (an ablation's or
    gate's trial runs)."""
    named = _strings([row.get(k) for k in ("inputs", "evidence", "before", "after")])
    run_name = (row.get("inputs") or {}).get("run") if row["kind"] == "ablation" else None
    links = []
    for run in sources.runs():
        record = read_json(run.path / RUN_RECORD)
        listed = record.get("decisions")  # a hand-edited one may hold no list: its checkpoint's page says so
        if isinstance(listed, list) and row["decision_id"] in listed:
            links.append(RunLink(run, "took this decision"))
        elif run_name and record.get("run") == run_name:
            links.append(RunLink(run, f"a run of {run_name}"))
        elif str(run.path) in named:
            links.append(RunLink(run, "weighed as evidence"))
    return links


def _strings(value: Any) -> set[str]:
    """Every string in a JSON value, as paths resolved when they look like absolute ones."""
    if isinstance(value, str):
        return {value, str(Path(value).resolve())} if value.startswith("/") else {value}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value)) if value else set()
    return set()
