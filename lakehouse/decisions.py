"""``factory.decisions``: what the factory decided by itself, on what evidence, and what it changed.

One row per decision (docs/factory.md, "Decisions"): a refinement gate that promoted or refused a
snapshot, a mixture determined again, an ablation's variant adopted or not. Each is committed as
its own snapshot through the commit protocol, as run ``<decision id>`` of job ``decision``. The
decision id is a hash of what the decision was about (its kind, subject and inputs), so a
decision taken again on the same inputs (a retried Dagster run, a daemon killed mid-way and
restarted) finds its row and commits nothing: every decision is recorded once.

A decision is recorded before it is acted on (the tag moved, the manifest written): a process
that dies between the two leaves the row, and the retry acts on the recorded verdict rather
than deciding again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from lakehouse.commit import CommitResult, Run
from lakehouse.errors import FactoryError
from lakehouse.rows import commit_rows, decode_json
from lakehouse.version import code_version

DECISIONS_TABLE = ("factory", "decisions")
JOB = "decision"
JSON_COLUMNS = ("evidence", "inputs", "before", "after")

# What each kind of decision may conclude.
VERDICTS = {
    "refinement-gate": ("promoted", "refused"),
    "mixture": ("determined", "kept"),
    # adopted: a variant won and the run's next config takes it; winner: a variant won but adoption
    # is off; rejected: every variant is worse beyond seed noise; inconclusive: anything else.
    "ablation": ("adopted", "winner", "rejected", "inconclusive"),
}

DECISIONS_SCHEMA = Schema(
    NestedField(1, "decision_id", StringType(), required=True, doc="hash of kind, subject and inputs"),
    NestedField(2, "factory", StringType(), required=True, doc="the factory definition's name"),
    NestedField(3, "kind", StringType(), required=True, doc="refinement-gate, mixture or ablation"),
    NestedField(4, "subject", StringType(), required=True, doc="what it was about: source, mixture or run name"),
    NestedField(5, "verdict", StringType(), required=True, doc="promoted, refused, determined, kept, adopted, …"),
    NestedField(6, "reason", StringType(), required=True, doc="one sentence: why"),
    NestedField(7, "evidence", StringType(), required=False, doc="JSON: runs, metrics by seed, test, p, interval"),
    NestedField(8, "inputs", StringType(), required=True, doc="JSON: the snapshots, specs and configs it weighed"),
    NestedField(9, "before", StringType(), required=False, doc="JSON: the state it replaced (tag, manifest, config)"),
    NestedField(10, "after", StringType(), required=False, doc="JSON: the state it made"),
    NestedField(11, "decided_at", StringType(), required=True, doc="UTC, ISO 8601"),
    NestedField(12, "orchestrator_run", StringType(), required=False, doc="the Dagster run that took it"),
    NestedField(13, "code_version", StringType(), required=True, doc="the deciding code (lakehouse/version.py)"),
)


def decision_id(kind: str, subject: str, inputs: Mapping[str, Any]) -> str:
    """``<kind>-<subject>-<hash>``: the same question on the same inputs has the same id."""
    digest = hashlib.sha256(json.dumps([kind, subject, inputs], sort_keys=True, default=str).encode()).hexdigest()
    # A run id's characters, and the whole hash whatever the subject's length.
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{kind}-{subject}")[:100]
    return f"{readable}-{digest[:16]}"


def new_decision(
    factory: str,
    kind: str,
    subject: str,
    verdict: str,
    reason: str,
    *,
    inputs: Mapping[str, Any],
    evidence: Mapping[str, Any] | None = None,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    orchestrator_run: str | None = None,
) -> dict[str, Any]:
    """A decision row, its id derived from ``kind``, ``subject`` and ``inputs``."""
    if verdict not in VERDICTS.get(kind, ()):
        raise FactoryError(f"a {kind} decision cannot conclude {verdict!r}; one of {VERDICTS.get(kind)}")
    return {
        "decision_id": decision_id(kind, subject, inputs),
        "factory": factory,
        "kind": kind,
        "subject": subject,
        "verdict": verdict,
        "reason": reason,
        "evidence": dict(evidence or {}),
        "inputs": dict(inputs),
        "before": None if before is None else dict(before),
        "after": None if after is None else dict(after),
        "decided_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "orchestrator_run": orchestrator_run,
        "code_version": code_version(),
    }


def record_decision(catalog: Catalog, row: Mapping[str, Any]) -> CommitResult | None:
    """Commit ``row`` as its own snapshot of ``factory.decisions``; None if it was recorded before."""
    run = Run(
        job=JOB,
        run_id=row["decision_id"],
        params={"kind": row["kind"], "subject": row["subject"], "factory": row["factory"]},
        inputs=[],
    )
    return commit_rows(catalog, DECISIONS_TABLE, DECISIONS_SCHEMA, run, [row])


def find_decision(catalog: Catalog, decision_id_: str) -> dict[str, Any] | None:
    """The recorded decision with this id, JSON columns decoded; None if there is none."""
    rows = read_decisions(catalog, row_filter=EqualTo("decision_id", decision_id_))
    return rows[0] if rows else None


def read_decisions(
    catalog: Catalog,
    *,
    row_filter: Any = None,
    factory: str | None = None,
    kind: str | None = None,
    subject: str | None = None,
) -> list[dict[str, Any]]:
    """Every recorded decision (of one factory, kind or subject, if named), oldest first, JSON
    columns decoded."""
    if not catalog.table_exists(DECISIONS_TABLE):
        return []
    table = catalog.load_table(DECISIONS_TABLE)
    if table.current_snapshot() is None:
        return []
    for column, value in (("factory", factory), ("kind", kind), ("subject", subject)):
        if value is not None:
            row_filter = EqualTo(column, value) if row_filter is None else row_filter & EqualTo(column, value)
    scan = table.scan() if row_filter is None else table.scan(row_filter=row_filter)
    rows = decode_json(scan.to_arrow().to_pylist(), JSON_COLUMNS)
    return sorted(rows, key=lambda r: (r["decided_at"], r["decision_id"]))


def shaping_decisions(
    decisions: list[dict[str, Any]], fingerprint: str, snapshots: set[tuple[str, int]]
) -> list[dict[str, Any]]:
    """The decisions that shaped a manifest's data: the gates that promoted one of its pinned
    ``snapshots`` (``(table, snapshot id)``) and the mixture decisions that made this manifest
    (``after.fingerprint``). Refusals shaped nothing they are not about: they are left out."""
    shaped = []
    for row in decisions:
        after = row.get("after") or {}
        if row["kind"] == "refinement-gate" and row["verdict"] == "promoted":
            if (after.get("table"), after.get("snapshot_id")) in snapshots:
                shaped.append(row)
        elif row["kind"] == "mixture" and after.get("fingerprint") == fingerprint:
            shaped.append(row)
    return shaped


def describe_change(row: Mapping[str, Any]) -> str:
    """What a decision changed, in a few words: ``@11 → @12`` (a tag), fingerprint prefixes (a
    manifest), ``+key=value`` (overrides a run takes); ``unchanged`` when it kept what was there."""
    before, after = row.get("before") or {}, row.get("after") or {}
    if row["kind"] == "refinement-gate":
        return _arrow(_snapshot(before), _snapshot(after))
    if row["kind"] == "mixture":
        return _arrow(_fingerprint_prefix(before), _fingerprint_prefix(after))
    if row["kind"] == "ablation":
        old, new = list(before.get("overrides") or []), list(after.get("overrides") or [])
        changes = [f"-{o}" for o in old if o not in new] + [f"+{o}" for o in new if o not in old]
        return " ".join(changes) if changes else ("unchanged" if before or after else "-")
    return "-"


def _snapshot(state: Mapping[str, Any]) -> str | None:
    return None if state.get("snapshot_id") is None else f"@{state['snapshot_id']}"


def _fingerprint_prefix(state: Mapping[str, Any]) -> str | None:
    fingerprint = state.get("fingerprint")
    return None if not fingerprint else str(fingerprint).removeprefix("sha256:")[:12]


def _arrow(old: str | None, new: str | None) -> str:
    if old is None and new is None:
        return "-"
    if old == new:
        return f"{old} unchanged"
    return f"{old or 'none'} → {new or 'none'}"
