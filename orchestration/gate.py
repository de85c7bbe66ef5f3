"""The refinement gate: a source's newest refined snapshot becomes the one training reads (the
``production`` tag on its final table) only after a paired ablation says it may
(docs/factory.md, "The refinement gate").

The candidate is the final table's main head; the current one is what ``production`` names. The
ablation trains a small proxy with N seeds on the current snapshot (the base) and on the
candidate (the one variant), both evaluated on the base's held-out split, and compares the
target metric with Welch's test. ``promote = "not-worse"`` promotes unless the candidate is worse
beyond seed noise; ``"better"`` only when it is better beyond it. A refused candidate stays
unpromoted and training keeps reading the current snapshot. A snapshot without documents is
refused whatever the policy (its mixtures wait, or keep the current one). The first snapshot, with
nothing to compare it with, and every snapshot when the gate is off, are promoted without an ablation;
each promotion and refusal is a row of ``factory.decisions``, recorded before the tag moves.
"""

from typing import Any

import dagster as dg
from pyiceberg.catalog import Catalog

from experiments.sweep_spec import toml_literal
from lakehouse.commit import record_count
from lakehouse.decisions import decision_id, find_decision, new_decision, record_decision
from lakehouse.faults import maybe_fail
from lakehouse.publish import move_tag
from lakehouse.refs import parse_identifier
from orchestration.ablations import run_ablation
from orchestration.definition import FactoryDefinition, Gate, Heldout, Source
from orchestration.keys import production_key
from orchestration.layout import tokenizer_path
from orchestration.locks import exclusive, source_lock
from orchestration.manifests import Pinned, pin_mixture
from orchestration.state import PRODUCTION, catalog, head, tagged

KIND = "refinement-gate"


def production_asset(definition: FactoryDefinition, source: Source, upstream: dg.AssetKey) -> dg.AssetsDefinition:
    table = source.final_table

    @dg.asset(
        key=production_key(source.name),
        deps=[upstream],
        group_name=source.name,
        kinds={"iceberg"},
        required_resource_keys={"commands"},
        description=f"`{table}@{PRODUCTION}`: the snapshot training reads, moved only by the refinement gate",
    )
    def production(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        row = gate(context, definition, source)
        metadata: dict[str, Any] = {"table": table, PRODUCTION: tagged(catalog(), table)}
        if row is not None:
            metadata.update(decision=row["decision_id"], verdict=row["verdict"], reason=row["reason"])
        return dg.MaterializeResult(metadata=metadata)

    return production


def gate(context: dg.AssetExecutionContext, definition: FactoryDefinition, source: Source) -> dict[str, Any] | None:
    """Decide on the source's newest refined snapshot (once: a decision made before is acted on
    as recorded) and move the tag if it was promoted. None when there is nothing new. Two runs
    that reach the gate take turns: the second acts on the first's decision."""
    with exclusive(definition.folder(), source_lock(source.name), context.log.info):
        return _gate(context, definition, source)


def _gate(context: dg.AssetExecutionContext, definition: FactoryDefinition, source: Source) -> dict[str, Any] | None:
    cat = catalog()
    table = source.final_table
    candidate, current = head(cat, table), tagged(cat, table)
    if candidate is None:
        raise dg.Failure(f"{table} has no snapshot: nothing to promote")
    if candidate == current:
        context.log.info("%s@%s is already in production", table, candidate)
        return None
    policy = definition.policies.refinement_gate
    inputs = {"table": table, "production": current, "candidate": candidate, "policy": _policy(policy)}
    row = find_decision(cat, decision_id(KIND, source.name, inputs))
    if row is None:
        row = _decide(context, definition, source, inputs, cat)
        maybe_fail("gate-before-record")
        record_decision(cat, row)
    else:
        context.log.info("decided before: %s (%s)", row["verdict"], row["decision_id"])
    maybe_fail("gate-before-act")
    if row["verdict"] == "promoted":
        move_tag(cat, parse_identifier(table), PRODUCTION, current, candidate)
    context.log.info("%s@%s %s: %s", table, candidate, row["verdict"], row["reason"])
    return row


def _decide(
    context: dg.AssetExecutionContext,
    definition: FactoryDefinition,
    source: Source,
    inputs: dict[str, Any],
    cat: Catalog,
) -> dict[str, Any]:
    table, current, candidate = inputs["table"], inputs["production"], inputs["candidate"]
    policy = definition.policies.refinement_gate
    before = None if current is None else {"table": table, "tag": PRODUCTION, "snapshot_id": current}
    promoted = {"table": table, "tag": PRODUCTION, "snapshot_id": candidate}

    def decision(verdict: str, reason: str, evidence: dict[str, Any] | None = None) -> dict[str, Any]:
        after = promoted if verdict == "promoted" else before
        return new_decision(
            definition.name, KIND, source.name, verdict, reason, inputs=inputs, evidence=evidence,
            before=before, after=after, orchestrator_run=context.run.run_id,
        )  # fmt: skip

    if record_count(cat.load_table(table), candidate) == 0:  # every document dropped: nothing to train on
        return decision("refused", f"{table}@{candidate} holds no documents: its refinement dropped them all")
    if current is None:
        return decision("promoted", f"{table}@{candidate} is the first snapshot: there is nothing to compare it with")
    if not policy.enabled:
        return decision("promoted", "the refinement gate is off: every new refined snapshot is promoted")
    outcome = run_ablation(
        context, _ablation_spec(context, definition, source, current, candidate), _folder(definition, source)
    )
    evidence = {**outcome.evidence("candidate"), "mode": policy.promote, "metric": _target(policy, source)}
    verdict, why = gate_verdict(policy.promote, evidence["difference"], outcome.reports[1].exceeds_noise)
    shown = f"{evidence['difference']:+.4f} (p {evidence['p_value']:.3g}, {len(evidence['base'])} seeds, alpha {policy.alpha:g})"
    return decision(verdict, f"{why}: {shown}", evidence)


def gate_verdict(promote: str, difference: float, beyond_noise: bool) -> tuple[str, str]:
    """(verdict, why) from the candidate's difference from the base (lower is better) and whether
    it exceeds seed noise: ``not-worse`` refuses only a candidate worse beyond noise, ``better``
    promotes only one better beyond it."""
    if promote == "better":
        if beyond_noise and difference < 0:
            return "promoted", "the candidate is better beyond seed noise"
        return "refused", "the candidate is not better beyond seed noise"
    if beyond_noise and difference > 0:
        return "refused", "the candidate is worse beyond seed noise"
    return "promoted", "the candidate is not worse beyond seed noise"


def _ablation_spec(
    context: dg.AssetExecutionContext, definition: FactoryDefinition, source: Source, current: int, candidate: int
) -> dict[str, Any]:
    """Base: the proxy on the source's production snapshot; variant: the same on the candidate."""
    policy = definition.policies.refinement_gate
    tokenizer = tokenizer_path(definition)
    if not tokenizer.is_file():
        raise dg.Failure(f"the gate needs the factory's tokenizer ({tokenizer}); materialise `tokenizer` first")
    table = source.final_table
    base = pin_mixture(
        context, _folder(definition, source), f"gate-{source.name}", 0, [Pinned(source.name, table, current)],
        {source.name: 1.0}, Heldout(documents=policy.heldout_documents),
    )  # fmt: skip
    spec: dict[str, Any] = {
        "name": f"gate-{source.name}",
        "config": policy.config,
        "seeds": policy.seeds,
        "alpha": policy.alpha,
        "nproc": policy.nproc,
        "set": [
            *policy.set,
            f"data.manifest={toml_literal(str(base))}",
            f"data.tokenizer={toml_literal(str(tokenizer))}",
        ],
        "target": _target(policy, source),
        "variants": {"candidate": {f"component.{source.name}": f"{table}@{candidate}"}},
    }
    if policy.resources:
        spec["resources"] = dict(policy.resources)
    return spec


def _target(policy: Gate, source: Source) -> dict[str, float]:
    return dict(policy.target) or {source.name: 1.0}


def _policy(policy: Gate) -> dict[str, Any]:
    """What a gate decision depends on: changing it decides a refused candidate again."""
    if not policy.enabled:
        return {"enabled": False}
    return {
        "enabled": True, "promote": policy.promote, "seeds": policy.seeds, "alpha": policy.alpha,
        "config": policy.config, "set": list(policy.set), "target": dict(policy.target),
        "heldout_documents": policy.heldout_documents, "nproc": policy.nproc,
    }  # fmt: skip


def _folder(definition: FactoryDefinition, source: Source):
    return definition.folder() / "gates" / source.name
