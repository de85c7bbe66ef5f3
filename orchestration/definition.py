"""A factory definition (``factory.toml``): sources, their refinement, mixtures, runs, evals,
experiments and policies, read into validated dataclasses (docs/factory.md documents every key).

Validated as strictly as the other configs: an unknown key, a value of the wrong kind and a
reference to something the file does not declare (a mixture naming an unknown source, a run an
unknown mixture) are refused with ``ConfigError`` naming the key and the file, before anything
runs. The training, filter, ablation, sweep and search settings a definition holds are checked
by the same code that checks those files on their own.

Relative paths (source paths, training configs, filter config files) are relative to the
definition's folder. ``${NAME}`` in a path is the environment variable ``NAME``;
``${FACTORY_HOME}`` is always set (the lakehouse folder the commands use).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakehouse.catalog import factory_home
from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError, FactoryError

# Names become Iceberg table names, Dagster asset keys and (with a prefix) spec names of at most 64
# characters: lower-case letters, digits, "_", at most 48.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}\Z")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
FORMATS = ("files", "jsonl", "parquet")
CADENCES = ("checkpoint", "final")
PROMOTE = ("not-worse", "better")

_TOP_KEYS = {"name", "sources", "tokenizer", "mixtures", "runs", "evals", "experiments", "policies"}
_SOURCE_KEYS = {"format", "paths", "include", "exclude", "inputs", "text_field", "id_field", "path_field",
                "lang_field", "max_doc_bytes", "dedup", "filter", "decontaminate", "watch"}  # fmt: skip
_INPUT_KEYS = {"paths", "include", "exclude"}
# factory dedup's options, by their --flag names with '_' for '-'.
DEDUP_KEYS = {"threshold": float, "num_perm": int, "bands": int, "rows": int, "ngram": int, "shingle": str,
              "min_shingles": int, "fn_weight": float, "seed": int, "verify": bool}  # fmt: skip
_DECONTAMINATE_KEYS = {"suites", "ngram"}
_TOKENIZER_KEYS = {"vocab_size", "sources", "max_bytes", "min_frequency"}
_MIXTURE_KEYS = {"weights", "components", "search", "seed", "heldout_fraction", "heldout_documents"}
# factory mix search's spec keys a definition may set (`name` is the mixture's; the rest as the spec file).
_SEARCH_KEYS = {"config", "trials", "seed", "set", "target", "nproc", "resources", "concentration", "candidates",
                "top", "folds", "min_weight"}  # fmt: skip
_RUN_KEYS = {"config", "mixture", "nproc", "set"}
_EVAL_KEYS = {"suites", "runs", "cadence", "every", "limit", "samples"}
_EXPERIMENT_KEYS = {"ablations", "sweeps"}
_ABLATION_KEYS = {"run", "seeds", "set", "target", "nproc", "resources", "variants", "alpha"}
_SWEEP_KEYS = {"run", "method", "samples", "seed", "nproc", "set", "target", "resources", "asha", "space"}
_POLICY_KEYS = {"refinement_gate", "mixture_redetermination", "ablation_adoption"}
_GATE_KEYS = {"enabled", "promote", "seeds", "alpha", "config", "set", "nproc", "resources", "target",
              "heldout_documents"}  # fmt: skip
_SWITCH_KEYS = {"enabled"}


@dataclass(frozen=True)
class SourceInput:
    """One set of paths ingested with its own include and exclude patterns."""

    paths: tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Source:
    """Where a source's raw records are and how they are refined: raw → dedup → filtered →
    decontaminated, each step optional but ingest."""

    name: str
    format: str
    inputs: tuple[SourceInput, ...]
    record_options: Mapping[str, Any] = field(default_factory=dict)  # ingest's --text-field, --id-field, …
    dedup: Mapping[str, Any] | None = field(default_factory=dict)  # None: no dedup step
    filter: str | None = None  # a shipped filter config name or a path
    decontaminate: tuple[str, ...] = ()  # eval sets
    ngram: int | None = None  # decontaminate's --ngram (None: the command's default)
    watch: float = 60.0  # seconds between the sensor's looks at the paths; 0: never looks

    def tables(self) -> list[tuple[str, str]]:
        """``(step, table)`` of each step of the chain, in order."""
        steps = [("raw", f"raw.{self.name}")]
        if self.dedup is not None:
            steps.append(("dedup", f"dedup.{self.name}"))
        if self.filter is not None:
            steps.append(("filtered", f"filtered.{self.name}"))
        if self.decontaminate:
            steps.append(("decontaminated", f"decontaminated.{self.name}"))
        return steps

    @property
    def final_table(self) -> str:
        """The table the chain ends in: its ``production`` tag is what training reads."""
        return self.tables()[-1][1]


@dataclass(frozen=True)
class Tokenizer:
    vocab_size: int = 16384
    sources: tuple[str, ...] = ()  # empty: every source
    max_bytes: int = 64 << 20
    min_frequency: int = 2


@dataclass(frozen=True)
class Heldout:
    """The held-out split: a fixed fraction, or enough for about ``documents`` documents."""

    fraction: float | None = None
    documents: int | None = None

    def fraction_for(self, records: int) -> float:
        """The fraction for a component of ``records`` documents: ``documents`` of them, at least 1 %
        and at most a quarter (every rank's evaluation shard needs documents of each component)."""
        if self.fraction is not None:
            return self.fraction
        return round(min(0.25, max(0.01, (self.documents or 20) / max(records, 1))), 4)


@dataclass(frozen=True)
class Mixture:
    name: str
    components: tuple[str, ...]  # source names, in the loader's order
    weights: Mapping[str, float] | None  # fixed weights; None when searched
    search: Mapping[str, Any] | None = None  # factory mix search's spec keys
    seed: int = 0
    heldout: Heldout = field(default_factory=Heldout)


@dataclass(frozen=True)
class Run:
    name: str
    config: str  # absolute path of the training config
    mixture: str
    nproc: int = 1
    set: tuple[str, ...] = ()


@dataclass(frozen=True)
class Eval:
    name: str
    suites: tuple[str, ...]
    runs: tuple[str, ...]
    cadence: str = "checkpoint"  # every complete checkpoint, or only the run's final one
    every: int = 0  # with cadence "checkpoint": only steps that are multiples of this (0: all)
    limit: int | None = None
    samples: int = 1


@dataclass(frozen=True)
class Experiment:
    """A declared ablation or sweep: its spec's keys, the run it takes its base config and data from."""

    name: str
    kind: str  # "ablation" or "sweep"
    run: str
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class Gate:
    enabled: bool = False
    promote: str = "not-worse"  # promote unless worse beyond seed noise, or only when better beyond it
    seeds: int = 3
    alpha: float = 0.05
    config: str = ""  # the proxies' training config (absolute path)
    set: tuple[str, ...] = ()
    nproc: int = 1
    resources: Mapping[str, float] = field(default_factory=dict)
    target: Mapping[str, float] = field(default_factory=dict)  # default: the gated source's held-out loss
    heldout_documents: int = 20


@dataclass(frozen=True)
class Policies:
    refinement_gate: Gate = field(default_factory=Gate)
    mixture_redetermination: bool = False
    ablation_adoption: bool = False


@dataclass(frozen=True)
class FactoryDefinition:
    name: str
    path: Path
    sources: Mapping[str, Source]
    tokenizer: Tokenizer
    mixtures: Mapping[str, Mixture]
    runs: Mapping[str, Run]
    evals: Mapping[str, Eval]
    experiments: Mapping[str, Experiment]
    policies: Policies

    def folder(self) -> Path:
        """Where this factory keeps its files: tokenizer, manifests, training runs, gate specs."""
        return factory_home() / "factories" / self.name


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
    refuse_unknown_keys(data, _TOP_KEYS, "the factory definition")
    _require(isinstance(data.get("name"), str) and _NAME.match(data["name"]), "name", 'a name such as "team"')
    base = path.parent
    sources = {name: _source(name, value, base) for name, value in _tables(data, "sources").items()}
    _check(bool(sources), "sources: declare at least one [sources.NAME]")
    tokenizer = _tokenizer(data.get("tokenizer", {}), sources)
    mixtures = {name: _mixture(name, value, sources, base) for name, value in _tables(data, "mixtures").items()}
    runs = {name: _run(name, value, mixtures, base) for name, value in _tables(data, "runs").items()}
    evals = {name: _eval(name, value, runs) for name, value in _tables(data, "evals").items()}
    experiments = _experiments(data.get("experiments", {}), runs)
    policies = _policies(data.get("policies", {}), sources, base)
    return FactoryDefinition(data["name"], path, sources, tokenizer, mixtures, runs, evals, experiments, policies)


# --- sections -------------------------------------------------------------------------------------


def _source(name: str, data: Any, base: Path) -> Source:
    key = f"sources.{name}"
    _check_name(name, key)
    refuse_unknown_keys(data, _SOURCE_KEYS, key)
    _require(data.get("format") in FORMATS, f"{key}.format", f"one of {', '.join(FORMATS)}")
    if "inputs" in data:
        _check(
            not _INPUT_KEYS & set(data), f"{key}: give paths, include and exclude in `inputs` or beside them, not both"
        )
        given = data["inputs"]
        _require(isinstance(given, list) and given, f"{key}.inputs", "a list of {paths, include, exclude} tables")
        inputs = tuple(_input(item, f"{key}.inputs[{n}]", base) for n, item in enumerate(given))
    else:
        inputs = (_input({k: data[k] for k in _INPUT_KEYS if k in data}, key, base),)
    record_options = {}
    for option in ("text_field", "id_field", "path_field", "lang_field"):
        if option in data:
            record_options[option] = _string(data[option], f"{key}.{option}")
    if "max_doc_bytes" in data:
        record_options["max_doc_bytes"] = _positive_int(data["max_doc_bytes"], f"{key}.max_doc_bytes")
    suites, ngram = _decontaminate(data.get("decontaminate"), f"{key}.decontaminate")
    watch = data.get("watch", 60)
    _require(_is_number(watch) and watch >= 0, f"{key}.watch", "seconds, >= 0 (0: the sensor never looks)")
    return Source(
        name=name,
        format=data["format"],
        inputs=inputs,
        record_options=record_options,
        dedup=_dedup(data.get("dedup", {}), f"{key}.dedup"),
        filter=_filter(data.get("filter"), f"{key}.filter", base, name),
        decontaminate=suites,
        ngram=ngram,
        watch=float(watch),
    )


def _input(data: Any, key: str, base: Path) -> SourceInput:
    _require(isinstance(data, Mapping), key, "a table with paths, include, exclude")
    refuse_unknown_keys(data, _INPUT_KEYS, key)
    paths = _strings(data.get("paths"), f"{key}.paths")
    _check(bool(paths), f"{key}.paths: give at least one path or URI")
    return SourceInput(
        paths=tuple(_location(p, f"{key}.paths", base) for p in paths),
        include=_strings(data.get("include", []), f"{key}.include"),
        exclude=_strings(data.get("exclude", []), f"{key}.exclude"),
    )


def _dedup(data: Any, key: str) -> dict[str, Any] | None:
    if data is False:
        return None
    _require(isinstance(data, Mapping), key, "a table of factory dedup's options, or false to skip dedup")
    refuse_unknown_keys(data, DEDUP_KEYS, key)
    for option, kind in DEDUP_KEYS.items():
        if option in data:
            value = data[option]
            ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
            _require(ok or (kind is float and _is_number(value)), f"{key}.{option}", f"a {kind.__name__}")
    _check_dedup_values(data, key)
    return dict(data)


def _check_dedup_values(data: Mapping[str, Any], key: str) -> None:
    """The values, checked by the dedup job's own configs before anything runs."""
    from pipelines.minhash import MinHashConfig
    from pipelines.shingles import ShingleConfig

    try:
        ShingleConfig(
            unit=data.get("shingle", "word"), n=data.get("ngram", 5), min_shingles=data.get("min_shingles", 5)
        )
        MinHashConfig(
            threshold=data.get("threshold", 0.8), num_perm=data.get("num_perm", 128), bands=data.get("bands"),
            rows=data.get("rows"), seed=data.get("seed", 1), fn_weight=data.get("fn_weight", 0.5),
        )  # fmt: skip
    except (FactoryError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _filter(value: Any, key: str, base: Path, source: str) -> str | None:
    if value is None or value is False:
        return None
    _require(isinstance(value, str) and value, key, "a shipped filter config (code, text, docs) or a TOML path")
    from quality.config import load_config

    name = str((base / value).resolve()) if value.endswith(".toml") or "/" in value else value
    try:
        config = load_config(name)
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {name}: {exc.strerror or exc}") from None
    # The filter job validates every kept document's `source` against the config's (it is the
    # source's name): a mismatch would fail every run, so it is refused here.
    _check(
        not config.sources or source in config.sources,
        f"{key}: the filter config {value} takes documents of source(s) {', '.join(config.sources)}, not {source!r}; "
        "name the source so, or copy the config and add it to its `sources`",
    )
    return name


def _decontaminate(value: Any, key: str) -> tuple[tuple[str, ...], int | None]:
    from quality.contamination import EVAL_SETS

    if value is None:
        return (), None
    if isinstance(value, list):
        value = {"suites": value}
    _require(isinstance(value, Mapping), key, "a list of eval sets, or {suites = [...], ngram = N}")
    refuse_unknown_keys(value, _DECONTAMINATE_KEYS, key)
    suites = _strings(value.get("suites"), f"{key}.suites")
    _check(bool(suites), f"{key}.suites: name at least one eval set ({', '.join(EVAL_SETS)})")
    unknown = sorted(set(suites) - set(EVAL_SETS))
    _check(not unknown, f"{key}.suites: unknown eval set(s) {', '.join(unknown)}; known: {', '.join(EVAL_SETS)}")
    ngram = value.get("ngram")
    if ngram is not None:
        _positive_int(ngram, f"{key}.ngram")
    return suites, ngram


def _tokenizer(data: Any, sources: Mapping[str, Source]) -> Tokenizer:
    _require(isinstance(data, Mapping), "tokenizer", "a table")
    refuse_unknown_keys(data, _TOKENIZER_KEYS, "tokenizer")
    vocab = data.get("vocab_size", 16384)
    _require(_is_int(vocab) and vocab >= 259, "tokenizer.vocab_size", "an integer >= 259 (256 bytes and 2 specials)")
    names = _strings(data.get("sources", []), "tokenizer.sources")
    _check_refs(names, sources, "tokenizer.sources", "source")
    return Tokenizer(
        vocab_size=vocab,
        sources=names,
        max_bytes=_positive_int(data.get("max_bytes", 64 << 20), "tokenizer.max_bytes"),
        min_frequency=_positive_int(data.get("min_frequency", 2), "tokenizer.min_frequency"),
    )


def _mixture(name: str, data: Any, sources: Mapping[str, Source], base: Path) -> Mixture:
    key = f"mixtures.{name}"
    _check_name(name, key)
    refuse_unknown_keys(data, _MIXTURE_KEYS, key)
    _check(("weights" in data) != ("search" in data), f"{key}: give either `weights` (fixed) or `search`, not both")
    weights = None
    if "weights" in data:
        _check("components" not in data, f"{key}: `weights` names the components; drop `components`")
        weights = data["weights"]
        _require(isinstance(weights, Mapping) and weights, f"{key}.weights", "a table {source = weight}")
        for source, weight in weights.items():
            _require(_is_number(weight) and weight >= 0, f"{key}.weights.{source}", "a number >= 0")
        _check(sum(weights.values()) > 0, f"{key}.weights: the weights sum to zero")
        components = tuple(weights)
    else:
        components = _strings(data.get("components", list(sources)), f"{key}.components")
    _check_refs(components, sources, f"{key}.{'weights' if weights else 'components'}", "source")
    search = None if weights is not None else _search(data["search"], f"{key}.search", components, base)
    seed = data.get("seed", 0)
    _require(_is_int(seed) and 0 <= seed < 2**63, f"{key}.seed", "an integer >= 0")
    return Mixture(name, components, None if weights is None else dict(weights), search, seed, _heldout(data, key))


def _heldout(data: Mapping[str, Any], key: str) -> Heldout:
    _check(
        not ("heldout_fraction" in data and "heldout_documents" in data),
        f"{key}: give heldout_fraction or heldout_documents, not both",
    )
    if "heldout_fraction" in data:
        value = data["heldout_fraction"]
        _require(_is_number(value) and 0 <= value < 1, f"{key}.heldout_fraction", "a number in [0, 1)")
        return Heldout(fraction=float(value))
    return Heldout(documents=_positive_int(data.get("heldout_documents", 20), f"{key}.heldout_documents"))


def _search(data: Any, key: str, components: tuple[str, ...], base: Path) -> dict[str, Any]:
    """factory mix search's spec keys, checked by the search spec's own validation."""
    from experiments.mixture_search import search_spec_from_dict

    _require(isinstance(data, Mapping), key, "a table of factory mix search's spec keys (config, trials, …)")
    refuse_unknown_keys(data, _SEARCH_KEYS, key)
    _check("config" in data, f"{key}.config: give the proxies' training config")
    spec = {**data, "config": _config_path(data["config"], f"{key}.config", base)}
    unknown = sorted(set(spec.get("target", {})) - set(components))
    _check(not unknown, f"{key}.target: unknown component(s) {', '.join(unknown)}; components: {', '.join(components)}")
    try:
        search_spec_from_dict({**spec, "name": "check"})
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return spec


def _run(name: str, data: Any, mixtures: Mapping[str, Mixture], base: Path) -> Run:
    key = f"runs.{name}"
    _check_name(name, key)
    refuse_unknown_keys(data, _RUN_KEYS, key)
    _check("config" in data and "mixture" in data, f"{key}: give `config` (a training config) and `mixture`")
    _check_refs((data["mixture"],), mixtures, f"{key}.mixture", "mixture")
    overrides = _strings(data.get("set", []), f"{key}.set")
    config = _config_path(data["config"], f"{key}.config", base, overrides)
    return Run(name, config, data["mixture"], _positive_int(data.get("nproc", 1), f"{key}.nproc"), overrides)


def _eval(name: str, data: Any, runs: Mapping[str, Run]) -> Eval:
    from evals.registry import SUITES

    key = f"evals.{name}"
    _check_name(name, key)
    refuse_unknown_keys(data, _EVAL_KEYS, key)
    suites = _strings(data.get("suites", ["heldout"]), f"{key}.suites")
    unknown = sorted(set(suites) - set(SUITES))
    _check(
        bool(suites) and not unknown, f"{key}.suites: unknown suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}"
    )
    names = _strings(data.get("runs", list(runs)), f"{key}.runs")
    _check_refs(names, runs, f"{key}.runs", "run")
    cadence = data.get("cadence", "checkpoint")
    _require(cadence in CADENCES, f"{key}.cadence", f"one of {', '.join(CADENCES)}")
    every = data.get("every", 0)
    _require(_is_int(every) and every >= 0, f"{key}.every", "an integer >= 0 (0: every checkpoint)")
    limit = data.get("limit")
    return Eval(
        name, suites, names, cadence, every,
        None if limit is None else _positive_int(limit, f"{key}.limit"),
        _positive_int(data.get("samples", 1), f"{key}.samples"),
    )  # fmt: skip


def _experiments(data: Any, runs: Mapping[str, Run]) -> dict[str, Experiment]:
    _require(isinstance(data, Mapping), "experiments", "a table with [experiments.ablations.NAME] and sweeps")
    refuse_unknown_keys(data, _EXPERIMENT_KEYS, "experiments")
    found: dict[str, Experiment] = {}
    for kind, keys, section in (("ablation", _ABLATION_KEYS, "ablations"), ("sweep", _SWEEP_KEYS, "sweeps")):
        for name, spec in _tables(data, section, f"experiments.{section}").items():
            key = f"experiments.{section}.{name}"
            _check_name(name, key)
            _check(name not in found, f"{key}: an ablation and a sweep share the name {name!r}")
            refuse_unknown_keys(spec, keys, key)
            _check("run" in spec, f"{key}.run: name the run whose config and data are the base")
            _check_refs((spec["run"],), runs, f"{key}.run", "run")
            _check_experiment_spec(kind, name, spec, runs[spec["run"]], key)
            found[name] = Experiment(name, kind, spec["run"], {k: v for k, v in spec.items() if k != "run"})
    return found


def _check_experiment_spec(kind: str, name: str, spec: Mapping[str, Any], run: Run, key: str) -> None:
    """The spec's keys, checked by the ablation's or sweep's own validation."""
    from experiments.ablation import ablation_spec_from_dict
    from experiments.sweep_spec import sweep_spec_from_dict

    full = {**{k: v for k, v in spec.items() if k != "run"}, "name": name, "config": run.config}
    try:
        (ablation_spec_from_dict if kind == "ablation" else sweep_spec_from_dict)(full)
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _policies(data: Any, sources: Mapping[str, Source], base: Path) -> Policies:
    _require(isinstance(data, Mapping), "policies", "a table")
    refuse_unknown_keys(data, _POLICY_KEYS, "policies")
    return Policies(
        refinement_gate=_gate(data.get("refinement_gate", {}), sources, base),
        mixture_redetermination=_switch(data.get("mixture_redetermination", {}), "policies.mixture_redetermination"),
        ablation_adoption=_switch(data.get("ablation_adoption", {}), "policies.ablation_adoption"),
    )


def _switch(data: Any, key: str) -> bool:
    _require(isinstance(data, Mapping), key, "a table: { enabled = true }")
    refuse_unknown_keys(data, _SWITCH_KEYS, key)
    return _bool(data.get("enabled", False), f"{key}.enabled")


def _gate(data: Any, sources: Mapping[str, Source], base: Path) -> Gate:
    key = "policies.refinement_gate"
    _require(isinstance(data, Mapping), key, "a table")
    refuse_unknown_keys(data, _GATE_KEYS, key)
    enabled = _bool(data.get("enabled", False), f"{key}.enabled")
    promote = data.get("promote", "not-worse")
    _require(promote in PROMOTE, f"{key}.promote", f"one of {', '.join(PROMOTE)}")
    seeds = data.get("seeds", 3)
    _require(_is_int(seeds) and seeds >= 2, f"{key}.seeds", "an integer >= 2 (seed noise needs two seeds)")
    alpha = data.get("alpha", 0.05)
    _require(_is_number(alpha) and 0 < alpha < 1, f"{key}.alpha", "a number in (0, 1)")
    overrides = _strings(data.get("set", []), f"{key}.set")
    _check(not enabled or "config" in data, f"{key}.config: give the proxies' training config")
    config = _config_path(data["config"], f"{key}.config", base, overrides) if "config" in data else ""
    target = data.get("target", {})
    _require(isinstance(target, Mapping), f"{key}.target", "a table {source = weight}")
    _check_refs(tuple(target), sources, f"{key}.target", "source")
    resources = data.get("resources", {})
    _require(isinstance(resources, Mapping), f"{key}.resources", "a table { cpus = N, gpus = N }")
    refuse_unknown_keys(resources, {"cpus", "gpus"}, f"{key}.resources")
    return Gate(
        enabled, promote, seeds, float(alpha), config, overrides,
        _positive_int(data.get("nproc", 1), f"{key}.nproc"), dict(resources), dict(target),
        _positive_int(data.get("heldout_documents", 20), f"{key}.heldout_documents"),
    )  # fmt: skip


# --- values ---------------------------------------------------------------------------------------


def _config_path(value: Any, key: str, base: Path, overrides: tuple[str, ...] = ()) -> str:
    """A training config's absolute path, the config (with ``overrides``) checked by the trainer's own loader."""
    from trainer.config import load_config

    _require(isinstance(value, str) and value, key, "a training config path")
    path = base / expand(value, key)
    try:
        load_config(path, list(overrides))
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return str(path.resolve())


def _location(value: str, key: str, base: Path) -> str:
    """A path or URI with ``${NAME}`` expanded; a relative local path made absolute from ``base``."""
    value = expand(value, key)
    return value if "://" in value else str((base / value).resolve())


def expand(value: str, key: str) -> str:
    """``value`` with each ``${NAME}`` replaced by the environment's ``NAME``."""

    def variable(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "FACTORY_HOME":
            return str(factory_home().resolve())
        if name not in os.environ:
            raise ConfigError(f"{key}: ${{{name}}} is not set in the environment")
        return os.environ[name]

    return _VARIABLE.sub(variable, value)


def _tables(data: Mapping[str, Any], section: str, key: str | None = None) -> dict[str, Mapping[str, Any]]:
    value = data.get(section, {})
    key = key or section
    _require(isinstance(value, Mapping), key, f"tables [{key}.NAME]")
    for name, item in value.items():
        _require(isinstance(item, Mapping), f"{key}.{name}", "a table")
    return dict(value)


def _check_refs(names: tuple[str, ...], declared: Mapping[str, Any], key: str, what: str) -> None:
    unknown = [n for n in names if n not in declared]
    _check(
        not unknown,
        f"{key}: unknown {what}(s) {', '.join(map(str, unknown))}; declared: {', '.join(declared) or '(none)'}",
    )


def _check_name(name: str, key: str) -> None:
    _check(
        bool(_NAME.match(name)),
        f"{key}: the name {name!r} must be lower-case letters, digits and '_', a letter first, at most 48 characters",
    )


def _strings(value: Any, key: str) -> tuple[str, ...]:
    _require(isinstance(value, list) and all(isinstance(v, str) for v in value), key, "a list of strings")
    return tuple(value)


def _string(value: Any, key: str) -> str:
    _require(isinstance(value, str) and value, key, "a non-empty string")
    return value


def _positive_int(value: Any, key: str) -> int:
    _require(_is_int(value) and value >= 1, key, "an integer >= 1")
    return value


def _bool(value: Any, key: str) -> bool:
    _require(isinstance(value, bool), key, "true or false")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _require(ok: Any, key: str, wanted: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: give {wanted}")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
