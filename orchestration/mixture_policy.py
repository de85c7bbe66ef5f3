"""Mixture re-determination: a searched mixture's weights are found again by `factory mix search`
when one of its components' production snapshots changes (docs/factory.md, "Mixture
re-determination").

- The first time, or when nothing it searched over has changed, nothing is searched: the
  mixture's current manifest stands.
- Searching again starts warm where that is valid. Trials measured data, so trials of other
  snapshots are never reused as points of the new fit; the earlier optimum becomes the new
  search's prior (the centre of the Dirichlet its mixtures are drawn from). A search interrupted
  on the same snapshots resumes its own trials (the search id covers the base manifest).
- With the policy off, a mixture searched once keeps its weights, pinned at the new snapshots.

Each outcome is a ``mixture`` decision, recorded before the mixture's current manifest moves.
"""

from __future__ import annotations

import hashlib
from typing import Any

import dagster as dg
import tomlkit

from experiments.sweep_spec import toml_literal
from lakehouse.decisions import decision_id, find_decision, new_decision, record_decision
from lakehouse.faults import maybe_fail
from orchestration.commands import run_factory
from orchestration.definition import FactoryDefinition, Mixture
from orchestration.layout import mixture_folder, read_current, tokenizer_path
from orchestration.manifests import Pinned, fingerprint_of, pin_mixture
from orchestration.state import catalog

KIND = "mixture"


def determine(
    context: dg.AssetExecutionContext, definition: FactoryDefinition, mixture: Mixture, pinned: list[Pinned]
) -> dict[str, Any]:
    """The mixture's current manifest record: unchanged, re-pinned with its weights, or searched."""
    folder = mixture_folder(definition, mixture.name)
    previous = read_current(folder)
    components = {p.name: p.ref for p in pinned}
    searched = dict(mixture.search or {})
    if previous is not None and previous["components"] == components and previous.get("search") == searched:
        context.log.info("mixture %s: its components have not changed since it was determined", mixture.name)
        return previous
    keep = previous is not None and not definition.policies.mixture_redetermination
    keep = keep and previous.get("search") == searched and set(previous["weights"]) == set(components)
    warm = previous is not None and set(previous["weights"]) == set(components)
    inputs = {"components": components, "search": searched, "prior": previous["weights"] if warm else None}
    inputs["keep"] = keep
    row = find_decision(catalog(), decision_id(KIND, mixture.name, inputs))
    if row is None:
        row = (
            _keep(context, definition, mixture, pinned, previous, inputs)
            if keep
            else _search(context, definition, mixture, pinned, previous, inputs)
        )
        maybe_fail("mixture-before-record")
        record_decision(catalog(), row)
    after = row["after"]
    return {**after, "components": components, "search": searched, "decision": row["decision_id"]}


def _keep(context, definition, mixture: Mixture, pinned, previous, inputs) -> dict[str, Any]:
    folder = mixture_folder(definition, mixture.name)
    manifest = pin_mixture(context, folder, mixture.name, mixture.seed, pinned, previous["weights"], mixture.heldout)
    after = {"manifest": str(manifest), "fingerprint": fingerprint_of(manifest), "weights": previous["weights"]}
    reason = "re-determination is off: the weights found before are kept, pinned at the new snapshots"
    return _decision(context, definition, mixture, "kept", reason, inputs, previous, after, {})


def _search(context, definition, mixture: Mixture, pinned, previous, inputs) -> dict[str, Any]:
    """`factory mix search` over the production snapshots; its winning manifest."""
    from experiments.mixture_search import load_search_spec
    from experiments.sweep import TUNE_DIR, sweep_dir_of
    from mixtures.manifest import Manifest

    folder = mixture_folder(definition, mixture.name)
    equal = {p.name: 1.0 for p in pinned}
    base = pin_mixture(context, folder / "base", mixture.name, mixture.seed, pinned, equal, mixture.heldout)
    tokenizer = tokenizer_path(definition)
    spec: dict[str, Any] = {k: v for k, v in (mixture.search or {}).items() if k != "set"}
    spec["name"] = f"mix-{mixture.name}"
    spec["set"] = [
        *mixture.search.get("set", []),
        f"data.manifest={toml_literal(str(base))}",
        f"data.tokenizer={toml_literal(str(tokenizer))}",
    ]
    if inputs["prior"]:
        spec["prior"] = dict(inputs["prior"])
    text = tomlkit.dumps(spec)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    spec_path, output = folder / f"search-{digest}.toml", folder / f"searched-{digest}.json"
    spec_path.write_text(text, encoding="utf-8")
    search_id = load_search_spec(spec_path).search_id
    resume = ["--resume"] if (sweep_dir_of(search_id) / TUNE_DIR).is_dir() else []
    run_factory(context, ["mix", "search", str(spec_path), "--output", str(output), *resume])
    manifest = Manifest.load(output)
    weights = {c.name: c.weight for c in manifest.components}
    provenance = manifest.provenance or {}
    after = {"manifest": str(output), "fingerprint": manifest.fingerprint, "weights": weights}
    fit = provenance.get("fit", {})
    trials = len(provenance.get("trials", []))
    shown = ", ".join(f"{k} {v:.3f}" for k, v in weights.items())
    warm = "warm-started from the earlier optimum" if inputs["prior"] else "from the components' token shares"
    reason = (
        f"search {search_id} ({trials} proxy trials, {warm}): {fit.get('model')} fit, cross-validated "
        f"Spearman {fit.get('cv_spearman', float('nan')):.3f}; weights {shown}"
    )
    evidence = {"sweep_id": search_id, "trials": trials, "fit": fit, "prior": provenance.get("prior")}
    return _decision(context, definition, mixture, "determined", reason, inputs, previous, after, evidence)


def _decision(context, definition, mixture, verdict, reason, inputs, previous, after, evidence) -> dict[str, Any]:
    before = None
    if previous is not None:
        before = {k: previous[k] for k in ("manifest", "fingerprint", "weights") if k in previous}
    return new_decision(
        definition.name, KIND, mixture.name, verdict, reason, inputs=inputs, evidence=evidence, before=before,
        after=after, orchestrator_run=context.run.run_id,
    )  # fmt: skip
