"""Reading a factory definition (``factory.toml``): its sections into the validated dataclasses of
``orchestration.definition`` (docs/factory.md documents every key).

Validated as strictly as the other configs: an unknown key, a value of the wrong kind and a
reference to something the file does not declare (a mixture naming an unknown source, a run an
unknown mixture) are refused with ``ConfigError`` naming the key and the file, before anything
runs. The training, filter, ablation, sweep and search settings a definition holds are checked
by the same code that checks those files on their own.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError, FactoryError
from orchestration.definition import (
    Eval,
    Experiment,
    FactoryDefinition,
    Gate,
    Heldout,
    Mixture,
    Policies,
    Run,
    Source,
)
from orchestration.definition_sources import check_table_clashes, source_section, tokenizer_section
from orchestration.definition_values import (
    FACTORY_SET,
    NAME,
    boolean,
    check,
    check_name,
    check_refs,
    config_path,
    is_int,
    is_number,
    positive_int,
    refuse_owned,
    require,
    strings,
    tables,
)

CADENCES = ("checkpoint", "final")
PROMOTE = ("not-worse", "better")
TOP_KEYS = {"name", "sources", "tokenizer", "mixtures", "runs", "evals", "experiments", "policies"}
MIXTURE_KEYS = {"weights", "components", "search", "seed", "heldout_fraction", "heldout_documents"}
# factory mix search's spec keys a definition may set (`name` is the mixture's; the rest as the spec file).
SEARCH_KEYS = {"config", "trials", "seed", "set", "target", "nproc", "resources", "concentration", "candidates",
               "top", "folds", "min_weight"}  # fmt: skip
RUN_KEYS = {"config", "mixture", "nproc", "set"}
EVAL_KEYS = {"suites", "runs", "cadence", "every", "limit", "samples"}
EXPERIMENT_KEYS = {"ablations", "sweeps"}
ABLATION_KEYS = {"run", "seeds", "set", "target", "nproc", "resources", "variants", "alpha", "ladder"}
SWEEP_KEYS = {"run", "method", "samples", "seed", "nproc", "set", "target", "resources", "asha", "space"}
POLICY_KEYS = {"refinement_gate", "mixture_redetermination", "ablation_adoption"}
GATE_KEYS = {"enabled", "promote", "seeds", "alpha", "config", "set", "nproc", "resources", "target",
             "heldout_documents"}  # fmt: skip
SWITCH_KEYS = {"enabled"}
# The training config keys the factory sets for each kind of training (besides FACTORY_SET), which
# a `set` there may not override: an ablation's trials take their seeds from `seeds`; the gate's and
# a search's trials train on other data, evaluated on the base manifest's held-out split.
ABLATION_OWNED = (*FACTORY_SET, "run.seed")
SEARCH_OWNED = (*FACTORY_SET, "eval.manifest")
GATE_OWNED = (*FACTORY_SET, "run.seed", "eval.manifest")


def load_definition(path: str | Path) -> FactoryDefinition:
    """Read and validate a factory definition; ``ConfigError`` naming the key and the file."""
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the factory definition {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    try:
        return _parse(data, path)
    except FactoryError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _parse(data: Mapping[str, Any], path: Path) -> FactoryDefinition:
    refuse_unknown_keys(data, TOP_KEYS, "the factory definition")
    require(isinstance(data.get("name"), str) and NAME.match(data["name"]), "name", 'a name such as "team"')
    base = path.parent
    sources = {name: source_section(name, value, base) for name, value in tables(data, "sources").items()}
    check(bool(sources), "sources: declare at least one [sources.NAME]")
    check_table_clashes(sources)
    tokenizer = tokenizer_section(data.get("tokenizer", {}), sources)
    mixtures = {name: _mixture(name, value, sources, base) for name, value in tables(data, "mixtures").items()}
    runs = {name: _run(name, value, mixtures, base) for name, value in tables(data, "runs").items()}
    evals = {name: _eval(name, value, runs) for name, value in tables(data, "evals").items()}
    experiments = _experiments(data.get("experiments", {}), runs)
    policies = _policies(data.get("policies", {}), sources, base)
    return FactoryDefinition(data["name"], path, sources, tokenizer, mixtures, runs, evals, experiments, policies)


def _mixture(name: str, data: Any, sources: Mapping[str, Source], base: Path) -> Mixture:
    key = f"mixtures.{name}"
    check_name(name, key)
    refuse_unknown_keys(data, MIXTURE_KEYS, key)
    check("weights" in data or "search" in data, f"{key}: give `weights` (fixed) or `search` (searched)")
    check(not ("weights" in data and "search" in data), f"{key}: give either `weights` (fixed) or `search`, not both")
    weights = None
    if "weights" in data:
        check("components" not in data, f"{key}: `weights` names the components; drop `components`")
        weights = data["weights"]
        require(isinstance(weights, Mapping) and weights, f"{key}.weights", "a table {source = weight}")
        for source, weight in weights.items():
            require(is_number(weight) and weight >= 0, f"{key}.weights.{source}", "a number >= 0")
        check(sum(weights.values()) > 0, f"{key}.weights: the weights sum to zero")
        components = tuple(weights)
    else:
        components = strings(data.get("components", list(sources)), f"{key}.components")
    check_refs(components, sources, f"{key}.{'weights' if weights else 'components'}", "source")
    search = None if weights is not None else _search(data["search"], f"{key}.search", components, base)
    seed = data.get("seed", 0)
    require(is_int(seed) and 0 <= seed < 2**63, f"{key}.seed", "an integer >= 0")
    return Mixture(name, components, None if weights is None else dict(weights), search, seed, _heldout(data, key))


def _heldout(data: Mapping[str, Any], key: str) -> Heldout:
    check(
        not ("heldout_fraction" in data and "heldout_documents" in data),
        f"{key}: give heldout_fraction or heldout_documents, not both",
    )
    if "heldout_fraction" in data:
        value = data["heldout_fraction"]
        require(is_number(value) and 0 <= value < 1, f"{key}.heldout_fraction", "a number in [0, 1)")
        return Heldout(fraction=float(value))
    return Heldout(documents=positive_int(data.get("heldout_documents", 20), f"{key}.heldout_documents"))


def _search(data: Any, key: str, components: tuple[str, ...], base: Path) -> dict[str, Any]:
    """factory mix search's spec keys, checked by the search spec's own validation."""
    from experiments.mixture_search import search_spec_from_dict

    require(isinstance(data, Mapping), key, "a table of factory mix search's spec keys (config, trials, …)")
    refuse_unknown_keys(data, SEARCH_KEYS, key)
    check("config" in data, f"{key}.config: give the proxies' training config")
    overrides = strings(data.get("set", []), f"{key}.set")
    refuse_owned(overrides, f"{key}.set", SEARCH_OWNED)
    spec = {**data, "config": config_path(data["config"], f"{key}.config", base, overrides)}
    unknown = sorted(set(spec.get("target", {})) - set(components))
    check(not unknown, f"{key}.target: unknown component(s) {', '.join(unknown)}; components: {', '.join(components)}")
    try:
        search_spec_from_dict({**spec, "name": "check"})
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return spec


def _run(name: str, data: Any, mixtures: Mapping[str, Mixture], base: Path) -> Run:
    key = f"runs.{name}"
    check_name(name, key)
    refuse_unknown_keys(data, RUN_KEYS, key)
    check("config" in data and "mixture" in data, f"{key}: give `config` (a training config) and `mixture`")
    check_refs((data["mixture"],), mixtures, f"{key}.mixture", "mixture")
    overrides = strings(data.get("set", []), f"{key}.set")
    refuse_owned(overrides, f"{key}.set")
    config = config_path(data["config"], f"{key}.config", base, overrides)
    return Run(name, config, data["mixture"], positive_int(data.get("nproc", 1), f"{key}.nproc"), overrides)


def _eval(name: str, data: Any, runs: Mapping[str, Run]) -> Eval:
    from evals.registry import SUITES

    key = f"evals.{name}"
    check_name(name, key)
    refuse_unknown_keys(data, EVAL_KEYS, key)
    suites = strings(data.get("suites", ["heldout"]), f"{key}.suites")
    unknown = sorted(set(suites) - set(SUITES))
    check(
        bool(suites) and not unknown, f"{key}.suites: unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}"
    )
    names = strings(data.get("runs", list(runs)), f"{key}.runs")
    check_refs(names, runs, f"{key}.runs", "run")
    cadence = data.get("cadence", "checkpoint")
    require(cadence in CADENCES, f"{key}.cadence", f"one of {', '.join(CADENCES)}")
    every = data.get("every", 0)
    require(is_int(every) and every >= 0, f"{key}.every", "an integer >= 0 (0: every checkpoint)")
    limit = data.get("limit")
    return Eval(
        name, suites, names, cadence, every,
        None if limit is None else positive_int(limit, f"{key}.limit"),
        positive_int(data.get("samples", 1), f"{key}.samples"),
    )  # fmt: skip


def _experiments(data: Any, runs: Mapping[str, Run]) -> dict[str, Experiment]:
    require(isinstance(data, Mapping), "experiments", "a table with [experiments.ablations.NAME] and sweeps")
    refuse_unknown_keys(data, EXPERIMENT_KEYS, "experiments")
    found: dict[str, Experiment] = {}
    for kind, keys, section in (("ablation", ABLATION_KEYS, "ablations"), ("sweep", SWEEP_KEYS, "sweeps")):
        for name, spec in tables(data, section, f"experiments.{section}").items():
            key = f"experiments.{section}.{name}"
            check_name(name, key)
            check(name not in found, f"{key}: an ablation and a sweep share the name {name!r}")
            refuse_unknown_keys(spec, keys, key)
            check("run" in spec, f"{key}.run: name the run whose config and data are the base")
            check_refs((spec["run"],), runs, f"{key}.run", "run")
            _check_experiment_spec(kind, name, spec, runs[spec["run"]], key)
            found[name] = Experiment(name, kind, spec["run"], {k: v for k, v in spec.items() if k != "run"})
    return found


def _check_experiment_spec(kind: str, name: str, spec: Mapping[str, Any], run: Run, key: str) -> None:
    """The spec's keys, checked by the ablation's or sweep's own validation."""
    from experiments.ablation import ablation_spec_from_dict
    from experiments.ladder_spec import ladder_spec_from_dict
    from experiments.sweep_spec import sweep_spec_from_dict
    from experiments.trial import param_overrides

    full = {**{k: v for k, v in spec.items() if k != "run"}, "name": name, "config": run.config}
    check_spec = ladder_spec_from_dict if "ladder" in spec else ablation_spec_from_dict
    try:
        (check_spec if kind == "ablation" else sweep_spec_from_dict)(full)
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    owned = ABLATION_OWNED if kind == "ablation" else FACTORY_SET
    refuse_owned(tuple(spec.get("set", ())), f"{key}.set", owned)
    for where, changes in _varied(spec, key):
        refuse_owned(changes, where, owned, how="varied")
    # Its trials train the run's config with the run's overrides and then its own (checked as strings above).
    overrides = (*run.set, *spec.get("set", ()))
    config_path(run.config, f"{key}.set", Path("/"), overrides)
    for where, changes in _trial_changes(spec, key):  # a mistyped key fails now, not after the chain ran
        if extra := param_overrides(changes):
            config_path(run.config, where, Path("/"), (*overrides, *extra))


def _trial_changes(spec: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, the config keys and values a trial sets) for each ablation variant, each ladder size,
    and each variant at each size: what `factory ablate` checks before Ray starts."""
    variants = [(f"{key}.variants.{name}", changes) for name, changes in spec.get("variants", {}).items()]
    ladder = spec.get("ladder")
    sizes = [(f"{key}.ladder.sizes.{name}", keys) for name, keys in (ladder or {}).get("sizes", {}).items()]
    both = [
        (f"{v} at size {s.rpartition('.')[2]}", {**size, **changes}) for v, changes in variants for s, size in sizes
    ]
    return [*variants, *sizes, *both]


def _varied(spec: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, its config keys) for what an experiment varies: each ablation variant, each ladder
    size, a sweep's space (the spec's shape is checked already)."""
    ladder = spec.get("ladder") if isinstance(spec.get("ladder"), Mapping) else {}
    tables = [(f"{key}.variants.{name}", changes) for name, changes in spec.get("variants", {}).items()]
    tables += [(f"{key}.ladder.sizes.{name}", keys) for name, keys in ladder.get("sizes", {}).items()]
    tables.append((f"{key}.space", spec.get("space", {})))
    return [(where, changes) for where, changes in tables if isinstance(changes, Mapping)]


def _policies(data: Any, sources: Mapping[str, Source], base: Path) -> Policies:
    require(isinstance(data, Mapping), "policies", "a table")
    refuse_unknown_keys(data, POLICY_KEYS, "policies")
    return Policies(
        refinement_gate=_gate(data.get("refinement_gate", {}), sources, base),
        mixture_redetermination=_switch(data.get("mixture_redetermination", {}), "policies.mixture_redetermination"),
        ablation_adoption=_switch(data.get("ablation_adoption", {}), "policies.ablation_adoption"),
    )


def _switch(data: Any, key: str) -> bool:
    require(isinstance(data, Mapping), key, "a table: { enabled = true }")
    refuse_unknown_keys(data, SWITCH_KEYS, key)
    return boolean(data.get("enabled", False), f"{key}.enabled")


def _gate(data: Any, sources: Mapping[str, Source], base: Path) -> Gate:
    from experiments.sweep_spec import check_weights, trial_resources

    key = "policies.refinement_gate"
    require(isinstance(data, Mapping), key, "a table")
    refuse_unknown_keys(data, GATE_KEYS, key)
    enabled = boolean(data.get("enabled", False), f"{key}.enabled")
    promote = data.get("promote", "not-worse")
    require(promote in PROMOTE, f"{key}.promote", f"one of {', '.join(PROMOTE)}")
    seeds = data.get("seeds", 3)
    require(is_int(seeds) and seeds >= 2, f"{key}.seeds", "an integer >= 2 (seed noise needs two seeds)")
    alpha = data.get("alpha", 0.05)
    require(is_number(alpha) and 0 < alpha < 1, f"{key}.alpha", "a number in (0, 1)")
    overrides = strings(data.get("set", []), f"{key}.set")
    refuse_owned(overrides, f"{key}.set", GATE_OWNED)
    check(not enabled or "config" in data, f"{key}.config: give the proxies' training config")
    config = config_path(data["config"], f"{key}.config", base, overrides) if "config" in data else ""
    target = data.get("target", {})
    require(isinstance(target, Mapping), f"{key}.target", "a table {source = weight}")
    check_refs(tuple(target), sources, f"{key}.target", "source")
    if target:  # as the gate's ablation will check them, named by this file's keys
        check_weights(target, "target", key)
    trial_resources(data, key)
    return Gate(
        enabled, promote, seeds, float(alpha), config, overrides,
        positive_int(data.get("nproc", 1), f"{key}.nproc"), dict(data.get("resources", {})), dict(target),
        positive_int(data.get("heldout_documents", 20), f"{key}.heldout_documents"),
    )  # fmt: skip
