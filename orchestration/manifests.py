"""Pinning a mixture for the orchestration: a mixture spec written to a file and `factory mix pin`
run on it. Components are pinned by snapshot id, so the spec says exactly what was pinned; its
file and the manifest are named by the spec's hash, and a spec pinned before is not pinned again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import tomlkit

from lakehouse.commit import record_count
from lakehouse.refs import parse_identifier
from orchestration.commands import run_factory
from orchestration.definition import Heldout
from orchestration.state import catalog


@dataclass(frozen=True)
class Pinned:
    """A component pinned to one snapshot of its source's final table."""

    name: str
    table: str
    snapshot_id: int

    @property
    def ref(self) -> str:
        return f"{self.table}@{self.snapshot_id}"


def pin_mixture(
    context: dg.AssetExecutionContext,
    folder: Path,
    name: str,
    seed: int,
    components: Sequence[Pinned],
    weights: Mapping[str, float],
    heldout: Heldout,
) -> Path:
    """The manifest of ``components`` at ``weights`` (pinned now, or found pinned before)."""
    spec = {
        "name": name,
        "seed": seed,
        "components": [
            {
                "name": c.name,
                "table": c.table,
                "ref": str(c.snapshot_id),
                "weight": float(weights[c.name]),
                "heldout_fraction": heldout.fraction_for(_records(c)),
            }
            for c in components
        ],
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / f"manifest-{digest}.json"
    if not manifest.exists():
        spec_path = folder / f"mixture-{digest}.toml"
        spec_path.write_text(tomlkit.dumps(spec), encoding="utf-8")
        run_factory(context, ["mix", "pin", str(spec_path), "--output", str(manifest)])
    return manifest


def fingerprint_of(manifest: Path) -> str:
    return json.loads(manifest.read_text(encoding="utf-8"))["fingerprint"]


def _records(component: Pinned) -> int:
    table = catalog().load_table(parse_identifier(component.table))
    return record_count(table, component.snapshot_id)
