"""Sweep specs: a base training config and a search space over any key ``--set`` accepts.

A spec is a TOML file::

    name = "lr-and-width"                  # the sweep id is the name and a hash of the spec
    config = "configs/demo-train.toml"     # base training config (paths relative to where you run)
    method = "grid"                        # grid, or random (sampled with `seed`)
    samples = 1                            # random: trials; grid: runs of each grid point
    seed = 0
    nproc = 1                              # ranks per trial (torchrun, as `factory train --nproc`)
    set = ["train.steps=20"]               # fixed overrides for every trial
    target = { code = 1.0 }                # the metric: weighted mean of the final held-out losses
                                           # (default: every component, equal weights)
    [resources]                            # what each trial asks of Ray: this bounds concurrency
    cpus = 1
    gpus = 0
    [asha]                                 # optional early stopping, on the evaluations
    grace_period = 1
    reduction_factor = 2
    [space]
    "optim.lr" = { loguniform = [1e-4, 1e-2] }
    "data.global_batch_size" = [8, 16]     # a list: grid values (random: a choice)
    "model.dim" = { choice = [32, 64] }
    "mixture.code" = { uniform = [0.2, 0.8] }   # relative weight of a component of the manifest

A ``mixture.<component>`` key gives a trial other weights: it pins its own manifest from the
base manifest's snapshots (``experiments.reweight``). Every other key is a training config key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError

MIXTURE_PREFIX = "mixture."
# ``component.<name> = "ns.table@ref"``: the component read from another table or snapshot (ablations).
COMPONENT_PREFIX = "component."
# A key whose value is a whole weight vector ({component: weight}); `factory mix search` uses it.
MIXTURE_KEY = "mixture"
_DISTRIBUTIONS = {"uniform", "loguniform", "choice", "randint"}
_SPEC_KEYS = {"name", "config", "method", "samples", "seed", "nproc", "set", "target", "resources", "asha", "space"}
_RESOURCE_KEYS = {"cpus", "gpus"}  # [resources] of a sweep, ablation or search spec
_ASHA_KEYS = {"grace_period", "reduction_factor"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z")


@dataclass(frozen=True)
class Asha:
    grace_period: int = 1  # evaluations every trial runs before it may be stopped
    reduction_factor: int = 2  # keep the best 1/reduction_factor at each rung


@dataclass(frozen=True)
class SweepSpec:
    name: str
    config: str
    space: Mapping[str, Any] = field(default_factory=dict)
    method: str = "grid"
    samples: int = 1
    seed: int = 0
    nproc: int = 1
    set: tuple[str, ...] = ()
    target: Mapping[str, float] = field(default_factory=dict)
    cpus: float = 1.0
    gpus: float = 0.0
    asha: Asha | None = None

    def __post_init__(self) -> None:
        _check(bool(_NAME.match(str(self.name))), f"sweep name {self.name!r}: letters, digits, '_', '.', '-'")
        _check(self.method in ("grid", "random"), f"method must be grid or random, got {self.method!r}")
        _check(_is_int(self.samples) and self.samples >= 1, "samples must be an integer >= 1")
        _check(_is_int(self.seed) and self.seed >= 0, "seed must be an integer >= 0")
        _check(_is_int(self.nproc) and self.nproc >= 1, "nproc must be an integer >= 1")
        _check(self.cpus > 0 and self.gpus >= 0, "resources: cpus must be > 0 and gpus >= 0")
        for key, value in self.space.items():
            check_dimension(key, value, self.method)
        for name, weight in self.target.items():
            _check(_is_number(weight) and weight >= 0, f"target.{name} must be a number >= 0")
        _check(not self.target or sum(self.target.values()) > 0, "target weights sum to zero")

    @property
    def sweep_id(self) -> str:
        """The name and a hash of everything that defines the sweep: the same spec, the same id
        (so ``--resume`` finds it), another spec under the same name, another id."""
        return f"{self.name}-{spec_hash(self.to_dict())[:10]}"

    def to_dict(self) -> dict[str, Any]:
        data = {
            "name": self.name,
            "config": self.config,
            "space": dict(self.space),
            "method": self.method,
            "samples": self.samples,
            "seed": self.seed,
            "nproc": self.nproc,
            "set": list(self.set),
            "target": dict(self.target),
            "resources": {"cpus": self.cpus, "gpus": self.gpus},
        }
        if self.asha is not None:
            data["asha"] = {"grace_period": self.asha.grace_period, "reduction_factor": self.asha.reduction_factor}
        return data


def spec_hash(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def check_dimension(key: str, value: Any, method: str) -> None:
    """Refuse a search dimension that is not a list of values or one known distribution."""
    section, dot, name = key.partition(".")
    _check(
        (bool(dot and section and name)) or key == MIXTURE_KEY,
        f"space key {key!r}: give section.key as for --set (e.g. optim.lr) or mixture.<component>",
    )
    if isinstance(value, list):
        _check(bool(value), f"space.{key}: an empty list of values")
        return
    _check(
        isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in _DISTRIBUTIONS,
        f"space.{key}: give a list of values or one of {{{', '.join(sorted(_DISTRIBUTIONS))} = [...]}}",
    )
    _check(method == "random", f'space.{key}: a distribution needs method = "random" (grid takes lists)')
    kind, args = next(iter(value.items()))
    if kind == "choice":
        _check(isinstance(args, list) and bool(args), f"space.{key}: choice takes a non-empty list")
        return
    _check(
        isinstance(args, list) and len(args) == 2 and all(_is_number(a) for a in args) and args[0] < args[1],
        f"space.{key}: {kind} takes [low, high] with low < high",
    )
    if kind == "loguniform":
        _check(args[0] > 0, f"space.{key}: loguniform needs low > 0")


def read_spec(path: Path, kind: str) -> dict[str, Any]:
    """A TOML spec file (a sweep, ablation or search spec) as a dict; a clear error if unreadable."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {kind} spec {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc


def load_sweep_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    data = read_spec(path, "sweep")
    try:
        return sweep_spec_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def sweep_spec_from_dict(data: Mapping[str, Any]) -> SweepSpec:
    refuse_unknown_keys(data, _SPEC_KEYS, "the sweep spec")
    _check("name" in data and "config" in data, "a sweep spec needs `name` and `config` (the base training config)")
    cpus, gpus = trial_resources(data)
    asha = None
    if "asha" in data:
        refuse_unknown_keys(data["asha"], _ASHA_KEYS, "[asha]")
        asha = Asha(**data["asha"])
        _check(asha.grace_period >= 1 and asha.reduction_factor >= 2, "asha: grace_period >= 1, reduction_factor >= 2")
    overrides = data.get("set", [])
    _check(isinstance(overrides, list) and all(isinstance(s, str) for s in overrides), "set: a list of KEY=VALUE")
    return SweepSpec(
        name=data["name"],
        config=str(data["config"]),
        space=dict(data.get("space", {})),
        method=data.get("method", "grid"),
        samples=data.get("samples", 1),
        seed=data.get("seed", 0),
        nproc=data.get("nproc", 1),
        set=tuple(overrides),
        target=dict(data.get("target", {})),
        cpus=cpus,
        gpus=gpus,
        asha=asha,
    )


def trial_resources(data: Mapping[str, Any]) -> tuple[float, float]:
    """The ``[resources]`` table of a sweep, ablation or search spec: (cpus, gpus) per trial."""
    resources = data.get("resources", {})
    refuse_unknown_keys(resources, _RESOURCE_KEYS, "[resources]")
    return float(resources.get("cpus", 1.0)), float(resources.get("gpus", 0.0))


def toml_literal(value: Any) -> str:
    """A value as ``--set`` parses it (TOML): a sampled numpy number becomes a plain one first."""
    if hasattr(value, "item"):  # numpy scalars from Tune's samplers
        value = value.item()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    return json.dumps(str(value))


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
