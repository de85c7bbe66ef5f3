"""Declared experiments, and ablation adoption (docs/factory.md, "Experiments", "Ablation adoption").

An ablation declared in the definition runs once per base: its run's declared training config
(the file's bytes and the run's ``set``) and the ablation's own keys. Adding it, or changing the
run's config, runs it; nothing else does. It trains on the run's current mixture. Its verdict is
a decision: ``adopted`` when a variant beats the base beyond seed noise (the lowest mean of those
that do) and adoption is on; ``winner`` when one does but adoption is off; ``rejected`` when
every variant is worse beyond seed noise; ``inconclusive`` otherwise. An ablation declared with a
``[ladder]`` runs as a ladder (``experiments.ladder``): a variant wins only when the ladder adopts
it (better beyond seed noise at every size), the largest gain at the largest size first, and
``rejected`` needs the ladder to reject every variant.

An adopted variant's keys become ``--set`` overrides of the run's next training run (a new run
folder: the one in progress keeps its config) for as long as the ablation stays declared and the
run's declared config is unchanged. A declared sweep runs once per spec and base; its trials
are rows of ``experiments.trials``, and nothing is decided from them.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

import dagster as dg
import tomlkit

from experiments.sweep_spec import toml_literal
from lakehouse.decisions import decision_id, find_decision, new_decision, read_decisions, record_decision
from lakehouse.faults import maybe_fail
from orchestration.ablations import run_ablation, run_ladder
from orchestration.commands import run_factory
from orchestration.definition import Experiment, FactoryDefinition, Run
from orchestration.keys import TOKENIZER, experiment_key, mixture_key
from orchestration.layout import experiment_folder, mixture_folder, read_current, tokenizer_path
from orchestration.locks import exclusive
from orchestration.state import catalog

KIND = "ablation"
LADDER_KEY = "ladder"  # an ablation declared with it runs as a ladder (`factory ablate --ladder`)


def experiment_inputs(definition: FactoryDefinition, experiment: Experiment) -> dict[str, Any]:
    """What an experiment is about: its run's declared config and its own keys (not the data)."""
    run = definition.runs[experiment.run]
    config = hashlib.sha256(Path(run.config).read_bytes()).hexdigest()
    return {"run": run.name, "base_config": {"sha256": config, "set": list(run.set)}, "spec": dict(experiment.spec)}


def adopted_overrides(definition: FactoryDefinition, run: Run) -> tuple[list[str], list[str]]:
    """The overrides adopted for ``run`` by its declared ablations on its current config, in the
    order they were decided, and those decisions' ids."""
    wanted = {
        decision_id(KIND, e.name, experiment_inputs(definition, e)): e.name
        for e in definition.experiments.values()
        if e.kind == "ablation" and e.run == run.name
    }
    if not wanted:
        return [], []
    rows = [r for r in read_decisions(catalog(), factory=definition.name) if r["decision_id"] in wanted]
    adopted = [r for r in rows if r["verdict"] == "adopted"]
    return [o for r in adopted for o in r["after"]["overrides"]], [r["decision_id"] for r in adopted]


def experiment_asset(definition: FactoryDefinition, experiment: Experiment) -> dg.AssetsDefinition:
    run = definition.runs[experiment.run]

    @dg.asset(
        key=experiment_key(experiment.name),
        deps=[mixture_key(run.mixture), TOKENIZER],
        group_name="experiments",
        kinds={"iceberg"},
        required_resource_keys={"commands"},
        description=f"{experiment.kind} {experiment.name} on run {run.name}'s config and data "
        f"(`factory {'ablate' if experiment.kind == 'ablation' else 'sweep'}`)",
    )
    def experiment_(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        with exclusive(definition.folder(), f"experiment-{experiment.name}", context.log.info):
            if experiment.kind == "sweep":
                return _sweep(context, definition, experiment)
            row = decide(context, definition, experiment)
        return dg.MaterializeResult(metadata={"decision": row["decision_id"], "verdict": row["verdict"]})

    return experiment_


def decide(context: dg.AssetExecutionContext, definition: FactoryDefinition, experiment: Experiment) -> dict:
    """The ablation's decision: found if taken before on this base, else the ablation is run."""
    inputs = experiment_inputs(definition, experiment)
    row = find_decision(catalog(), decision_id(KIND, experiment.name, inputs))
    if row is not None:
        return row
    run = definition.runs[experiment.run]
    spec = {**experiment.spec, "name": f"ablate-{experiment.name}", "config": run.config}
    spec["set"] = [*run.set, *experiment.spec.get("set", []), *_data_overrides(definition, run)]
    folder, adopt = experiment_folder(definition, experiment.name), definition.policies.ablation_adoption
    if LADDER_KEY in experiment.spec:
        verdict, best, text, evidence = _ladder(context, spec, folder, adopt)
    else:
        verdict, best, text, evidence = _one_size(context, spec, folder, adopt)
    before = {"run": run.name, "overrides": adopted_overrides(definition, run)[0]}
    after = before
    reason = text
    if best is not None:
        reason = f"{text} beats the base beyond seed noise; adoption is off"
        if verdict == "adopted":
            changes = [f"{k}={toml_literal(v)}" for k, v in experiment.spec["variants"][best].items()]
            after = {"run": run.name, "overrides": [*before["overrides"], *changes]}
            reason = f"{text} beats the base beyond seed noise: run {run.name}'s next run takes it"
    row = new_decision(
        definition.name, KIND, experiment.name, verdict, reason, inputs=inputs, evidence=evidence, before=before,
        after=after, orchestrator_run=context.run.run_id,
    )  # fmt: skip
    maybe_fail("ablation-before-record")
    record_decision(catalog(), row)
    return row


def _one_size(context: dg.AssetExecutionContext, spec: dict, folder: Path, adopt: bool) -> tuple:
    """(verdict, the winning variant or None, the winner shown or the reason, evidence) of an ablation."""
    outcome = run_ablation(context, spec, folder)
    reports = outcome.reports[1:]
    evidence = {
        "sweep_id": outcome.ablation_id,
        "alpha": outcome.alpha,
        "base": list(outcome.reports[0].metrics),
        "variants": [
            {**outcome.evidence(r.variant), "exceeds_noise": r.exceeds_noise, "metrics": list(r.metrics)}
            for r in reports
        ],
    }
    verdict, best = ablation_verdict(reports, adopt)
    if best is None:
        text = {
            "rejected": "every variant is worse than the base beyond seed noise",
            "inconclusive": "no variant beats the base beyond seed noise",
        }[verdict]
        return verdict, None, text, evidence
    return verdict, best.variant, f"{best.variant} {best.difference:+.4f} (p {best.p_value:.3g})", evidence


def _ladder(context: dg.AssetExecutionContext, spec: dict, folder: Path, adopt: bool) -> tuple:
    """As ``_one_size``, for an ablation declared with a ``[ladder]`` (`factory ablate --ladder`)."""
    outcome = run_ladder(context, spec, folder)
    verdict, best = ladder_decision(outcome.verdicts, adopt)
    if best is None:
        text = "; ".join(f"{v.variant}: {v.verdict}, {v.reason}" for v in outcome.verdicts)
        return verdict, None, text, outcome.evidence()
    largest = best.sizes[-1]
    shown = f"{best.variant} {largest.difference:+.4f} at {largest.size} (p {largest.p_value:.3g}), at every size"
    return verdict, best.variant, shown, outcome.evidence()


def ladder_decision(verdicts: list, adopt: bool) -> tuple[str, Any]:
    """(verdict, the winning variant's LadderVerdict or None) from a ladder's verdicts: of the variants
    the ladder adopts, the one with the largest gain at the largest size wins; ``rejected`` when the
    ladder rejects every variant; ``inconclusive`` otherwise."""
    from experiments.ladder import ADOPT, REJECT

    winners = sorted((v for v in verdicts if v.verdict == ADOPT), key=lambda v: v.sizes[-1].difference)
    if winners:
        return ("adopted" if adopt else "winner"), winners[0]
    if verdicts and all(v.verdict == REJECT for v in verdicts):
        return "rejected", None
    return "inconclusive", None


def ablation_verdict(reports: list, adopt: bool) -> tuple[str, Any]:
    """(verdict, the winning variant's report or None) from the variants' reports against the base
    (lower is better): the variant with the lowest mean of those better beyond seed noise wins."""
    winners = sorted((r for r in reports if r.exceeds_noise and r.difference < 0), key=lambda r: r.mean)
    if winners:
        return ("adopted" if adopt else "winner"), winners[0]
    if reports and all(r.exceeds_noise and r.difference > 0 for r in reports):
        return "rejected", None
    return "inconclusive", None


def _sweep(context: dg.AssetExecutionContext, definition: FactoryDefinition, experiment: Experiment):
    from experiments.sweep import TUNE_DIR, sweep_dir_of
    from experiments.sweep_spec import load_sweep_spec

    run = definition.runs[experiment.run]
    spec = {**experiment.spec, "name": f"sweep-{experiment.name}", "config": run.config}
    spec["set"] = [*run.set, *experiment.spec.get("set", []), *_data_overrides(definition, run)]
    text = tomlkit.dumps(spec)
    folder = experiment_folder(definition, experiment.name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"sweep-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"
    path.write_text(text, encoding="utf-8")
    sweep_id = load_sweep_spec(path).sweep_id
    key = hashlib.sha256(json.dumps(experiment_inputs(definition, experiment), sort_keys=True).encode()).hexdigest()
    done = folder / f"done-{key[:12]}.json"  # once per base, whatever data the run has meanwhile
    if done.exists():
        return dg.MaterializeResult(metadata={"sweep_id": json.loads(done.read_text())["sweep_id"]})
    state = sweep_dir_of(sweep_id) / TUNE_DIR
    run_factory(context, ["sweep", str(path), *(["--resume"] if state.is_dir() else [])])
    done.write_text(json.dumps({"sweep_id": sweep_id}) + "\n")
    return dg.MaterializeResult(metadata={"sweep_id": sweep_id})


def sweep_done(definition: FactoryDefinition, experiment: Experiment) -> bool:
    key = hashlib.sha256(json.dumps(experiment_inputs(definition, experiment), sort_keys=True).encode()).hexdigest()
    return (experiment_folder(definition, experiment.name) / f"done-{key[:12]}.json").exists()


def _data_overrides(definition: FactoryDefinition, run: Run) -> list[str]:
    """The run's current mixture manifest and the factory's tokenizer, as `--set` overrides."""
    mixture = read_current(mixture_folder(definition, run.mixture))
    if mixture is None:
        raise dg.Failure(f"mixture {run.mixture} has no manifest yet: materialise mixture/{run.mixture} first")
    tokenizer = tokenizer_path(definition)
    return [f"data.manifest={toml_literal(mixture['manifest'])}", f"data.tokenizer={toml_literal(str(tokenizer))}"]
