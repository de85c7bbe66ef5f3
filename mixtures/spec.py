"""Mixture specs: which table snapshots to train on, in which proportions.

A spec is a TOML or YAML file::

    name = "code-and-text"
    seed = 1234

    [[components]]
    name = "code"
    table = "dedup.code"
    ref = "v1"                      # snapshot id, tag or branch; default: current main
    weight = 0.7
    filter = "lang = 'python'"      # optional pyiceberg row filter
    heldout_fraction = 0.01         # optional share of documents kept out for evals

    [[components]]
    name = "text"
    table = "raw.text"
    weight = 0.3

Weights may instead be given together in a ``[weights]`` table (``code = 0.7``). Weights are
relative: they are normalised to sum to one. ``factory mix pin`` turns a spec into a manifest.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import FactoryError, MixtureSpecError
from lakehouse.refs import TableRef

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}\Z")
_COMPONENT_KEYS = {"name", "table", "ref", "weight", "filter", "heldout_fraction"}
_SPEC_KEYS = {"name", "seed", "components", "weights"}


@dataclass(frozen=True)
class ComponentSpec:
    """One source of documents in a mixture."""

    name: str
    """Short name of the component, unique in the spec (used in metrics and loader state)."""
    table: str
    """Document table, ``namespace.table``."""
    weight: float
    """Relative share of training sequences drawn from this component (normalised over the spec)."""
    ref: str | None = None
    """Snapshot id, tag or branch to pin; None pins the current snapshot of main."""
    filter: str | None = None
    """Row filter in pyiceberg's expression syntax (``lang = 'python' and n_bytes < 100000``)."""
    heldout_fraction: float = 0.0
    """Share of documents (by a hash of ``doc_id``) kept out of training for evaluation."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise MixtureSpecError(
                f"component name {self.name!r}: use letters, digits, '_', '.', '-' (at most 64 characters)"
            )
        try:
            parsed = TableRef.parse(self.table)
        except FactoryError as exc:
            raise MixtureSpecError(f"component {self.name!r}: {exc}") from exc
        if parsed.ref is not None:
            raise MixtureSpecError(f"component {self.name!r}: give the ref in `ref`, not in the table name")
        if self.ref is not None:
            try:
                TableRef.parse(f"{self.table}@{self.ref}")
            except FactoryError as exc:
                raise MixtureSpecError(f"component {self.name!r}: {exc}") from exc
        if isinstance(self.weight, bool) or not isinstance(self.weight, int | float) or not math.isfinite(self.weight):
            raise MixtureSpecError(f"component {self.name!r}: weight must be a finite number, got {self.weight!r}")
        if self.weight < 0:
            raise MixtureSpecError(f"component {self.name!r}: weight {self.weight} is negative")
        if not isinstance(self.heldout_fraction, int | float) or not 0.0 <= self.heldout_fraction < 1.0:
            raise MixtureSpecError(
                f"component {self.name!r}: heldout_fraction must be in [0, 1), got {self.heldout_fraction!r}"
            )
        if self.filter is not None:
            check_filter(self.filter, self.name)

    @property
    def reference(self) -> str:
        """``namespace.table[@ref]`` as ``lakehouse.catalog.resolve`` takes it."""
        return f"{self.table}@{self.ref}" if self.ref is not None else self.table


@dataclass(frozen=True)
class MixtureSpec:
    """A named, seeded set of weighted components."""

    components: tuple[ComponentSpec, ...]
    """The components, in the order the loader numbers them."""
    seed: int = 0
    """Seed of every shuffle of the stream (file orders per epoch, document windows, batch layout)."""
    name: str = "mixture"
    """Name recorded in the manifest and shown in logs."""

    def __post_init__(self) -> None:
        if not self.components:
            raise MixtureSpecError("a mixture needs at least one component")
        names = [c.name for c in self.components]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise MixtureSpecError(f"component names must be unique; repeated: {', '.join(duplicated)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise MixtureSpecError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        if sum(c.weight for c in self.components) <= 0:
            raise MixtureSpecError("the weights sum to zero: give at least one component a positive weight")

    @property
    def weights(self) -> dict[str, float]:
        """Normalised weights by component name."""
        total = sum(c.weight for c in self.components)
        return {c.name: c.weight / total for c in self.components}


def check_filter(text: str, component: str) -> None:
    """Refuse a row filter that pyiceberg cannot parse (column names are checked at pin time)."""
    from pyiceberg.expressions.parser import parse

    if not isinstance(text, str) or not text.strip():
        raise MixtureSpecError(f"component {component!r}: filter must be a non-empty expression")
    try:
        parse(text)
    except Exception:  # pyparsing raises its own exception types
        # Its message spells out the whole grammar it expected (some 3,000 characters): an example helps more.
        raise MixtureSpecError(
            f"component {component!r}: cannot parse filter {text!r}; write it as pyiceberg's row filters "
            "are written, e.g. lang = 'python' and n_bytes < 100000"
        ) from None


def load_spec(path: str | Path) -> MixtureSpec:
    """Read a TOML (``.toml``) or YAML (``.yaml``/``.yml``) mixture spec."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MixtureSpecError(f"cannot read mixture spec {path}: {exc.strerror or exc}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(raw)
        else:
            data = tomllib.loads(raw)
    except Exception as exc:  # tomllib.TOMLDecodeError, yaml.YAMLError
        raise MixtureSpecError(f"{path} is not valid {'YAML' if path.suffix != '.toml' else 'TOML'}: {exc}") from exc
    try:
        return spec_from_dict(data)
    except MixtureSpecError as exc:
        raise MixtureSpecError(f"{path}: {exc}") from exc


def spec_from_dict(data: Any) -> MixtureSpec:
    """Validate a parsed spec: unknown keys, weights given twice or for unknown components are errors."""
    if not isinstance(data, Mapping):
        raise MixtureSpecError("a mixture spec is a table with `seed` and `[[components]]`")
    refuse_unknown_keys(data, _SPEC_KEYS, "the spec", MixtureSpecError)
    entries = data.get("components")
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise MixtureSpecError("`components` must be a list of tables ([[components]] in TOML)")
    weights = data.get("weights", {})
    if not isinstance(weights, Mapping):
        raise MixtureSpecError("`weights` must be a table of component name = weight")
    names = [e.get("name") for e in entries]
    unknown = sorted(str(n) for n in weights if n not in names)
    if unknown:
        raise MixtureSpecError(
            f"`weights` names unknown component(s): {', '.join(unknown)} (components: {', '.join(map(str, names))})"
        )
    components = []
    for entry in entries:
        refuse_unknown_keys(entry, _COMPONENT_KEYS, f"component {entry.get('name')!r}", MixtureSpecError)
        name = entry.get("name")
        if "table" not in entry or name is None:
            raise MixtureSpecError(f"component {name!r}: `name` and `table` are required")
        if "weight" in entry and name in weights:
            raise MixtureSpecError(f"component {name!r}: weight given twice (in the component and in `weights`)")
        weight = entry.get("weight", weights.get(name))
        if weight is None:
            raise MixtureSpecError(f"component {name!r}: no weight (set `weight` or `weights.{name}`)")
        ref = entry.get("ref")
        components.append(
            ComponentSpec(
                name=name,
                table=entry["table"],
                weight=weight,
                ref=str(ref) if ref is not None else None,
                filter=entry.get("filter"),
                heldout_fraction=entry.get("heldout_fraction", 0.0),
            )
        )
    return MixtureSpec(components=tuple(components), seed=data.get("seed", 0), name=str(data.get("name", "mixture")))
