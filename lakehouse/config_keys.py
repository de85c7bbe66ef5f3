"""Refusing unknown keys in a config: a misspelt setting must fail loudly, never be ignored."""

from __future__ import annotations

from collections.abc import Iterable

from lakehouse.errors import ConfigError, FactoryError


def refuse_unknown_keys(
    given: Iterable[object], allowed: Iterable[str], where: str, error: type[FactoryError] = ConfigError
) -> None:
    """Raise ``error`` naming each key of ``given`` that is not in ``allowed``, and what is allowed."""
    allowed = set(allowed)
    unknown = sorted(str(key) for key in given if key not in allowed)
    if unknown:
        raise error(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
