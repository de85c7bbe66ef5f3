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
from collections.abc import Callable, Mapping
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
SWEEP = "the sweep spec"  # how messages name the spec (a file's path or a definition's key goes before)


@dataclass(frozen=True)
class Asha:
    grace_period: int = 1  # evaluations every trial runs before it may be stopped
    reduction_factor: int = 2  # keep the best 1/reduction_factor at each rung

    def __post_init__(self) -> None:
        check_int(self.grace_period, "asha.grace_period", SWEEP, 1)
        check_int(self.reduction_factor, "asha.reduction_factor", SWEEP, 2)


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
        check_shared(self, SWEEP)
        require(self.method in ("grid", "random"), SWEEP, "method", "grid or random", self.method)
        check_int(self.samples, "samples", SWEEP, 1)
        check_int(self.seed, "seed", SWEEP, 0)
        for key, value in self.space.items():
            check_dimension(key, value, self.method)

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
        _check_weight_vectors(key, value)
        return
    _check(
        isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in _DISTRIBUTIONS,
        f"space.{key}: give a list of values or one of {{{', '.join(sorted(_DISTRIBUTIONS))} = [...]}}",
    )
    _check(method == "random", f'space.{key}: a distribution needs method = "random" (grid takes lists)')
    kind, args = next(iter(value.items()))
    if kind == "choice":
        _check(isinstance(args, list) and bool(args), f"space.{key}: choice takes a non-empty list")
        _check_weight_vectors(key, args)
        return
    _check(key != MIXTURE_KEY, f"space.{key}: whole weight vectors are a list (or a choice) of tables")
    _check(
        isinstance(args, list) and len(args) == 2 and all(_is_number(a) for a in args) and args[0] < args[1],
        f"space.{key}: {kind} takes [low, high] with low < high",
    )
    if kind == "loguniform":
        _check(args[0] > 0, f"space.{key}: loguniform needs low > 0")


def _check_weight_vectors(key: str, values: list[Any]) -> None:
    """The values of ``space.mixture``: each a whole weight vector {component = weight}."""
    if key == MIXTURE_KEY:
        for value in values:
            check_weights(value, f"space.{key}", SWEEP)


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
    refuse_unknown_keys(data, _SPEC_KEYS, SWEEP)
    _check("name" in data and "config" in data, "a sweep spec needs `name` and `config` (the base training config)")
    cpus, gpus = trial_resources(data, SWEEP)
    asha = None
    if "asha" in data:
        asha_keys = table(data, "asha", SWEEP)
        refuse_unknown_keys(asha_keys, _ASHA_KEYS, "[asha]")
        asha = Asha(**asha_keys)
    return SweepSpec(
        name=data["name"],
        config=str(data["config"]),
        space=table(data, "space", SWEEP),
        method=data.get("method", "grid"),
        samples=data.get("samples", 1),
        seed=data.get("seed", 0),
        nproc=data.get("nproc", 1),
        set=check_overrides(data.get("set", []), SWEEP),
        target=table(data, "target", SWEEP),
        cpus=cpus,
        gpus=gpus,
        asha=asha,
    )


def trial_resources(data: Mapping[str, Any], where: str) -> tuple[float, float]:
    """The ``[resources]`` table of a sweep, ablation or search spec: (cpus, gpus) per trial."""
    resources = table(data, "resources", where)
    refuse_unknown_keys(resources, _RESOURCE_KEYS, f"{where}: resources")
    cpus, gpus = resources.get("cpus", 1.0), resources.get("gpus", 0.0)
    check_resources(cpus, gpus, where)
    return float(cpus), float(gpus)


# --- the checks the three specs share; ``where`` names the spec in the message ------------------


def check_shared(spec: Any, where: str) -> None:
    """What a sweep, an ablation and a search spec share: name, set, target, nproc, [resources]."""
    check_name(spec.name, where)
    check_overrides(spec.set, where)
    check_weights(spec.target, "target", where)
    check_int(spec.nproc, "nproc", where, 1)
    check_resources(spec.cpus, spec.gpus, where)


def require(ok: bool, where: str, key: str, rule: str, value: Any) -> None:
    """``ConfigError("<where>: <key> must be <rule>, got <value>")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{where}: {key} must be {rule}, got {value!r}")


def check_int(value: Any, key: str, where: str, minimum: int) -> None:
    require(is_int(value) and value >= minimum, where, key, f"an integer >= {minimum}", value)


def check_number(value: Any, key: str, where: str, rule: str, ok: Callable[[Any], bool]) -> None:
    """``value`` a finite number (not a bool) for which ``ok`` holds; the message says "a number <rule>"."""
    require(_is_number(value) and ok(value), where, key, f"a number {rule}", value)


def check_name(name: Any, where: str) -> None:
    """The spec's name, which becomes a folder name under ``$FACTORY_HOME/sweeps/``."""
    rule = "letters, digits, '_', '.', '-' (the first a letter or digit, at most 64)"
    require(isinstance(name, str) and bool(_NAME.match(name)), where, "name", rule, name)


def table(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """``data[key]`` (default empty), which must be a table."""
    value = data.get(key, {})
    require(isinstance(value, Mapping), where, key, "a table", value)
    return dict(value)


def check_overrides(overrides: Any, where: str) -> tuple[str, ...]:
    """``set``: a list of ``section.key=value`` strings, as ``--set`` takes them."""
    from trainer.config import parse_override

    require(isinstance(overrides, list | tuple), where, "set", "a list of SECTION.NAME=VALUE strings", overrides)
    for item in overrides:
        ok = isinstance(item, str)
        if ok:
            try:
                parse_override(item)
            except ConfigError:
                ok = False
        require(ok, where, "each item of set", "a string SECTION.NAME=VALUE", item)
    return tuple(overrides)


def check_weights(weights: Any, key: str, where: str) -> None:
    """``target`` or ``prior``: a table {component = weight}, each a number >= 0, not all 0."""
    require(isinstance(weights, Mapping), where, key, "a table {component = weight}", weights)
    for name, weight in weights.items():
        check_number(weight, f"{key}.{name}", where, ">= 0", lambda w: w >= 0)
    _check(not weights or sum(weights.values()) > 0, f"{where}: {key}: the weights sum to zero")


def check_resources(cpus: Any, gpus: Any, where: str) -> None:
    check_number(cpus, "resources.cpus", where, "> 0", lambda n: n > 0)
    check_number(gpus, "resources.gpus", where, ">= 0", lambda n: n >= 0)


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


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
