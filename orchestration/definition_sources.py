"""The ``[sources.NAME]`` and ``[tokenizer]`` sections of a factory definition (docs/factory.md)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lakehouse.config_keys import refuse_unknown_keys
from lakehouse.errors import ConfigError, FactoryError
from orchestration.definition import Source, SourceInput, Tokenizer
from orchestration.definition_values import (
    check,
    check_name,
    check_refs,
    expand,
    is_int,
    is_number,
    local_path,
    location,
    positive_int,
    require,
    string,
    strings,
)

FORMATS = ("files", "jsonl", "parquet")
SOURCE_KEYS = {"format", "paths", "include", "exclude", "inputs", "text_field", "id_field", "path_field",
               "lang_field", "max_doc_bytes", "dedup", "filter", "decontaminate", "watch"}  # fmt: skip
INPUT_KEYS = {"paths", "include", "exclude"}
# factory dedup's options, by their --flag names with '_' for '-'.
DEDUP_KEYS = {"threshold": float, "num_perm": int, "bands": int, "rows": int, "ngram": int, "shingle": str,
              "min_shingles": int, "fn_weight": float, "seed": int, "verify": bool}  # fmt: skip
DECONTAMINATE_KEYS = {"suites", "ngram"}
TOKENIZER_KEYS = {"vocab_size", "sources", "max_bytes", "min_frequency"}
# Tables the steps write beside a source's own, in the same namespaces: a source of the same name
# would be written into them (tests/orchestration/test_definition.py pins these to the jobs' defaults).
QUARANTINE = "quarantine"  # lakehouse.refs.quarantine_identifier: <namespace of the output>.quarantine
INGESTED_FILES = "ingested_files"  # lakehouse.refs.ingested_files_identifier: <namespace>.ingested_files
CLUSTERS_SUFFIX = "_clusters"  # pipelines.dedup.DedupOptions.clusters_id: <output>_clusters
RESERVED = {
    QUARANTINE: "raw.quarantine, filtered.quarantine and decontaminated.quarantine are the steps' quarantine tables",
    INGESTED_FILES: "raw.ingested_files is the ledger of the files `factory ingest` read into each raw table",
    "rl_repositories": "raw.rl_repositories is the table `factory rl build` ingests repositories into",
}


def source_section(name: str, data: Any, base: Path) -> Source:
    key = f"sources.{name}"
    check_name(name, key)
    check(
        name not in RESERVED, f"{key}: the name {name!r} is the factory's own: {RESERVED.get(name)}; rename the source"
    )
    refuse_unknown_keys(data, SOURCE_KEYS, key)
    require(data.get("format") in FORMATS, f"{key}.format", f"one of {', '.join(FORMATS)}")
    if "inputs" in data:
        check(
            not INPUT_KEYS & set(data), f"{key}: give paths, include and exclude in `inputs` or beside them, not both"
        )
        given = data["inputs"]
        require(isinstance(given, list) and given, f"{key}.inputs", "a list of {paths, include, exclude} tables")
        inputs = tuple(_input(item, f"{key}.inputs[{n}]", base) for n, item in enumerate(given))
    else:
        inputs = (_input({k: data[k] for k in INPUT_KEYS if k in data}, key, base),)
    record_options = {}
    for option in ("text_field", "id_field", "path_field", "lang_field"):
        if option in data:
            record_options[option] = string(data[option], f"{key}.{option}")
    if "max_doc_bytes" in data:
        record_options["max_doc_bytes"] = positive_int(data["max_doc_bytes"], f"{key}.max_doc_bytes")
    suites, ngram = _decontaminate(data.get("decontaminate"), f"{key}.decontaminate")
    watch = data.get("watch", 60)
    require(is_number(watch) and watch >= 0, f"{key}.watch", "seconds, >= 0 (0: the sensor never looks)")
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


def check_table_clashes(sources: Mapping[str, Source]) -> None:
    """Refuse a source one of whose tables is another source's dedup clusters table
    (``sources.code_clusters`` beside a deduplicated ``sources.code``: both write ``dedup.code_clusters``)."""
    clusters = {f"dedup.{s.name}{CLUSTERS_SUFFIX}": s.name for s in sources.values() if s.dedup is not None}
    for source in sources.values():
        for _, table in source.tables():
            other = clusters.get(table)
            check(
                other is None,
                f"sources.{source.name}: its table {table} is also the dedup clusters table of sources.{other}; "
                "rename one of the two sources",
            )


def _input(data: Any, key: str, base: Path) -> SourceInput:
    require(isinstance(data, Mapping), key, "a table with paths, include, exclude")
    refuse_unknown_keys(data, INPUT_KEYS, key)
    paths = strings(data.get("paths"), f"{key}.paths")
    check(bool(paths), f"{key}.paths: give at least one path or URI")
    return SourceInput(
        paths=tuple(location(p, f"{key}.paths", base) for p in paths),
        include=strings(data.get("include", []), f"{key}.include"),
        exclude=strings(data.get("exclude", []), f"{key}.exclude"),
        key=key,
    )


def _dedup(data: Any, key: str) -> dict[str, Any] | None:
    if data is False:
        return None
    require(isinstance(data, Mapping), key, "a table of factory dedup's options, or false to skip dedup")
    refuse_unknown_keys(data, DEDUP_KEYS, key)
    for option, kind in DEDUP_KEYS.items():
        if option in data:
            value = data[option]
            ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
            require(ok or (kind is float and is_number(value)), f"{key}.{option}", f"a {kind.__name__}")
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
    require(isinstance(value, str) and value, key, "a shipped filter config (code, text, docs) or a TOML path")
    from quality.config import load_config

    value = expand(value, key)
    name = str(local_path(value, base).resolve()) if value.endswith(".toml") or "/" in value else value
    try:
        config = load_config(name)
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {name}: {exc.strerror or exc}") from None
    # The filter job validates every kept document's `source` against the config's (it is the
    # source's name): a mismatch would fail every run, so it is refused here.
    check(
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
    require(isinstance(value, Mapping), key, "a list of eval sets, or {suites = [...], ngram = N}")
    refuse_unknown_keys(value, DECONTAMINATE_KEYS, key)
    suites = strings(value.get("suites"), f"{key}.suites")
    check(bool(suites), f"{key}.suites: name at least one eval set ({', '.join(EVAL_SETS)})")
    unknown = sorted(set(suites) - set(EVAL_SETS))
    check(not unknown, f"{key}.suites: unknown eval set(s) {', '.join(unknown)}; known: {', '.join(EVAL_SETS)}")
    ngram = value.get("ngram")
    if ngram is not None:
        positive_int(ngram, f"{key}.ngram")
    return suites, ngram


def tokenizer_section(data: Any, sources: Mapping[str, Source]) -> Tokenizer:
    require(isinstance(data, Mapping), "tokenizer", "a table")
    refuse_unknown_keys(data, TOKENIZER_KEYS, "tokenizer")
    vocab = data.get("vocab_size", 16384)
    require(is_int(vocab) and vocab >= 259, "tokenizer.vocab_size", "an integer >= 259 (256 bytes and 2 specials)")
    names = strings(data.get("sources", []), "tokenizer.sources")
    check_refs(names, sources, "tokenizer.sources", "source")
    return Tokenizer(
        vocab_size=vocab,
        sources=names,
        max_bytes=positive_int(data.get("max_bytes", 64 << 20), "tokenizer.max_bytes"),
        min_frequency=positive_int(data.get("min_frequency", 2), "tokenizer.min_frequency"),
    )
