"""Decision rows of each kind, shaped as the orchestration records them (lakehouse/decisions.py's
conventions), for the tests of what reads ``factory.decisions``: the CLI, lineage and the UI."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lakehouse.decisions import new_decision
from mixtures.manifest import Manifest
from mixtures.pin import pin
from mixtures.spec import spec_from_dict
from tests.corpora import make_table

FACTORY = "team"


def gate_decision(
    subject: str = "code",
    verdict: str = "promoted",
    *,
    table: str = "decontaminated.code",
    production: int | None = 11,
    candidate: int = 12,
    reason: str = "the candidate is not worse beyond seed noise: +0.0250 (p 0.41, 3 seeds, alpha 0.05)",
    sweep_id: str = "gate-code-0a1b",
    decided_at: str = "2026-01-01T10:00:00+00:00",
    factory: str = FACTORY,
) -> dict[str, Any]:
    inputs = {
        "table": table,
        "production": production,
        "candidate": candidate,
        "policy": {"promote": "not-worse", "alpha": 0.05, "seeds": 3},
    }
    before = None if production is None else {"table": table, "tag": "production", "snapshot_id": production}
    after = {"table": table, "tag": "production", "snapshot_id": candidate} if verdict == "promoted" else before
    evidence = {
        "sweep_id": sweep_id,
        "metric": "loss/code",
        "seeds": 3,
        "base": [5.125, 5.25, 5.0],
        "candidate": [5.0, 5.5, 4.95],
        "differences": [-0.125, 0.25, -0.05],
        "test": "welch",
        "p_value": 0.4125,
        "interval": [-0.3375, 0.3708],
        "alpha": 0.05,
        "mode": "not-worse",
    }
    row = new_decision(
        factory,
        "refinement-gate",
        subject,
        verdict,
        reason,
        inputs=inputs,
        evidence=evidence,
        before=before,
        after=after,
    )
    return {**row, "decided_at": decided_at}


def mixture_decision(
    subject: str = "main",
    *,
    before_fingerprint: str | None = "sha256:" + "0f" * 32,
    after_fingerprint: str = "sha256:" + "ab" * 32,
    manifest: str = "/factory/mixtures/main/manifest.json",
    components: dict[str, str] | None = None,
    sweep_id: str = "mix-main-77",
    decided_at: str = "2026-01-02T10:00:00+00:00",
) -> dict[str, Any]:
    components = components or {"code": "decontaminated.code@12", "text": "filtered.text@5"}
    inputs = {"components": components, "search": {"trials": 8, "seed": 3}}
    before = None
    if before_fingerprint is not None:
        before = {"manifest": manifest, "fingerprint": before_fingerprint, "weights": {"code": 0.5, "text": 0.5}}
    after = {"manifest": manifest, "fingerprint": after_fingerprint, "weights": {"code": 0.625, "text": 0.375}}
    evidence = {"sweep_id": sweep_id, "fit": {"model": "lightgbm", "cv_spearman": 0.81}, "trials": 8}
    reason = "a search of 8 proxy runs chose new weights (cross-validated Spearman 0.810)"
    row = new_decision(
        FACTORY, "mixture", subject, "determined", reason, inputs=inputs, evidence=evidence, before=before, after=after
    )
    return {**row, "decided_at": decided_at}


def ablation_decision(
    subject: str = "lr",
    verdict: str = "adopted",
    *,
    run: str = "tiny",
    sweep_id: str = "ablate-lr-5c",
    runs: Sequence[str] = (),
    decided_at: str = "2026-01-03T10:00:00+00:00",
) -> dict[str, Any]:
    inputs = {"run": run, "base_config": "c0ffee", "spec": {"variants": {"low-lr": {"optim.lr": 0.001}}, "seeds": 3}}
    before = {"run": run, "overrides": ["train.steps=4"]}
    after = {"run": run, "overrides": [*before["overrides"], "optim.lr=0.001"]} if verdict == "adopted" else before
    evidence = {
        "sweep_id": sweep_id,
        "alpha": 0.05,
        "base": [4.5, 4.625, 4.55],
        "runs": list(runs),
        "variants": [
            {
                "variant": "low-lr",
                "metrics": [4.25, 4.375, 4.3],
                "differences": [-0.25, -0.25, -0.25],
                "p_value": 0.0021,
                "interval": [-0.31, -0.19],
                "exceeds_noise": True,
            }
        ],
    }
    reason = "low-lr -0.2500 (p 0.0021) beats the base beyond seed noise: run tiny's next run takes it"
    row = new_decision(
        FACTORY, "ablation", subject, verdict, reason, inputs=inputs, evidence=evidence, before=before, after=after
    )
    return {**row, "decided_at": decided_at}


def pinned_manifest(
    catalog, path: Path, *, code_files: int = 1, weights: tuple[float, float] = (0.5, 0.5)
) -> tuple[Manifest, list[int], int]:
    """``decontaminated.code`` (a snapshot per file) and ``filtered.text`` made and pinned as
    mixture ``main``, saved at ``path``: the manifest, code's snapshot ids oldest first, text's."""
    code = make_table(catalog, "decontaminated.code", 20, kind="code", files=code_files)
    text = make_table(catalog, "filtered.text", 20, files=1).current_snapshot().snapshot_id
    spec = {
        "name": "main",
        "seed": 1,
        "components": [
            {"name": "code", "table": "decontaminated.code", "weight": weights[0]},
            {"name": "text", "table": "filtered.text", "weight": weights[1]},
        ],
    }
    manifest = pin(catalog, spec_from_dict(spec))
    path.parent.mkdir(parents=True, exist_ok=True)
    manifest.save(path)
    snapshots = [s.snapshot_id for s in sorted(code.snapshots(), key=lambda s: s.sequence_number)]
    return manifest, snapshots, text


def hand_made_checkpoint(run_dir: Path, manifest_path: Path, step: int = 4) -> Path:
    """A complete checkpoint folder holding only the ``lineage.json`` a run on the manifest at
    ``manifest_path`` writes (what lineage and the UI read of a checkpoint; no model shards)."""
    manifest = json.loads(manifest_path.read_text())
    folder = run_dir / "checkpoints" / f"step-{step}"
    folder.mkdir(parents=True)
    lineage = {
        "checkpoint": str(folder),
        "step": step,
        "code_version": "test",
        "manifest": {"path": str(manifest_path), "name": manifest["name"], "fingerprint": manifest["fingerprint"]},
        "tokenizer": {"path": str(run_dir / "tokenizer.json"), "sha256": "f" * 64},
        "loader_position": {"next_global_batch": step, "sequences": 8 * step, "tokens": 256 * step},
        "components": [
            {"name": c["name"], "weight": c["weight"], "table": c["table"], "snapshot_id": c["snapshot_id"], "runs": []}
            for c in manifest["components"]
        ],
    }
    (folder / "lineage.json").write_text(json.dumps(lineage))
    (folder / "COMPLETE").write_text("")
    return folder


def write_run_record(run_dir: Path, run: str, decisions: Sequence[str]) -> None:
    """The ``factory.json`` the orchestration writes in a training run's folder."""
    record = {"factory": FACTORY, "run": run, "decisions": list(decisions)}
    (run_dir / "factory.json").write_text(json.dumps(record))
