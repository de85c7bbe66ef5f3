"""Checking a factory definition's values: each failure a ``ConfigError`` naming the key (the
loader adds the file). Shared by the section parsers (``definition_load``, ``definition_sources``)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lakehouse.catalog import factory_home
from lakehouse.errors import ConfigError, FactoryError

# Names become Iceberg table names, Dagster asset keys and (with a prefix) spec names of at most 64
# characters: lower-case letters, digits, "_", at most 48.
NAME = re.compile(r"[a-z][a-z0-9_]{0,47}\Z")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# The training config keys the factory sets on every training it runs (a run, the gate's proxies, a
# search's, an experiment's trials), whatever the config file says: a config is checked with these
# placeholders, so one that leaves them out, as docs/factory.md says it may, loads.
FACTORY_SET = ("data.manifest", "data.tokenizer", "run.dir")
_PLACEHOLDERS = tuple(f"{name}='(set by the factory)'" for name in FACTORY_SET)
# What the factory sets each key to: its own value comes after a `set`'s, or before it where a
# `set` would win (a run), so a `set` of one is either ignored or breaks the factory's bookkeeping.
OWNED = {
    "data.manifest": "the manifest it trains on",
    "data.tokenizer": "the factory's tokenizer",
    "run.dir": "its run folder",
    "run.seed": "each trial's seed, from `seeds`",
    "eval.manifest": "the base manifest, so that every trial is evaluated on the same held-out split",
}


def config_path(value: Any, key: str, base: Path, overrides: tuple[str, ...] = ()) -> str:
    """A training config's absolute path, the config (with ``overrides``) checked by the trainer's own
    loader, the keys the factory sets (``FACTORY_SET``) filled by placeholders."""
    from trainer.config import load_config

    require(isinstance(value, str) and value, key, "a training config path")
    path = local_path(expand(value, key), base)
    try:
        load_config(path, [*_PLACEHOLDERS, *overrides])
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    return str(path.resolve())


def refuse_owned(names: Iterable[str], key: str, owned: tuple[str, ...] = FACTORY_SET, how: str = "overridden") -> None:
    """Refuse a key the factory sets (``owned``, explained by ``OWNED``) among ``names``: a ``set`` override
    (``name=value``), a variant's, a size's or a searched key."""
    for text in names:
        name = text.partition("=")[0].strip()
        if name in owned:
            raise ConfigError(f"{key}: {name} is set by the factory ({OWNED[name]}) and cannot be {how}; remove it")


def location(value: str, key: str, base: Path) -> str:
    """A path or URI with ``${NAME}`` expanded; a local path's ``~`` expanded, and made absolute from ``base``."""
    expanded = expand(value, key)
    return expanded if "://" in expanded else str(local_path(expanded, base).resolve())


def local_path(expanded: str, base: Path) -> Path:
    """A local path (its ``${NAME}`` expanded) with a leading ``~`` expanded as a shell would; a relative one
    under ``base``."""
    return base / Path(expanded).expanduser()


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


def tables(data: Mapping[str, Any], section: str, key: str | None = None) -> dict[str, Mapping[str, Any]]:
    value = data.get(section, {})
    key = key or section
    require(isinstance(value, Mapping), key, f"tables [{key}.NAME]")
    for name, item in value.items():
        require(isinstance(item, Mapping), f"{key}.{name}", "a table")
    return dict(value)


def check_refs(names: tuple[str, ...], declared: Mapping[str, Any], key: str, what: str) -> None:
    unknown = [n for n in names if n not in declared]
    check(
        not unknown,
        f"{key}: unknown {what}(s) {', '.join(map(str, unknown))}; declared: {', '.join(declared) or '(none)'}",
    )


def check_name(name: str, key: str) -> None:
    check(
        bool(NAME.match(name)),
        f"{key}: the name {name!r} must be lower-case letters, digits and '_', a letter first, at most 48 characters",
    )


def strings(value: Any, key: str) -> tuple[str, ...]:
    require(isinstance(value, list) and all(isinstance(v, str) for v in value), key, "a list of strings")
    return tuple(value)


def string(value: Any, key: str) -> str:
    require(isinstance(value, str) and value, key, "a non-empty string")
    return value


def positive_int(value: Any, key: str) -> int:
    require(is_int(value) and value >= 1, key, "an integer >= 1")
    return value


def boolean(value: Any, key: str) -> bool:
    require(isinstance(value, bool), key, "true or false")
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def require(ok: Any, key: str, wanted: str) -> None:
    if not ok:
        raise ConfigError(f"{key}: give {wanted}")


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
