"""Refusing unknown keys and values of the wrong type in a config: a misspelt setting, or
``compile = "yes"`` where a boolean is meant, must fail loudly, never be ignored or guessed at."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterable, Mapping

from lakehouse.errors import ConfigError, FactoryError

_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


def refuse_unknown_keys(
    given: Iterable[object], allowed: Iterable[str], where: str, error: type[FactoryError] = ConfigError
) -> None:
    """Raise ``error`` naming each key of ``given`` that is not in ``allowed``, and what is allowed."""
    allowed = set(allowed)
    unknown = sorted(str(key) for key in given if key not in allowed)
    if unknown:
        raise error(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")


def refuse_wrong_types(
    given: Mapping[str, object], cls: type, where: str, error: type[FactoryError] = ConfigError
) -> None:
    """Raise ``error`` naming the first key of ``given`` whose value is not of the type that
    dataclass ``cls`` declares for it (an integer is a number too; a boolean is neither)."""
    hints = typing.get_type_hints(cls)
    for key, value in given.items():
        hint = hints.get(key)
        if hint is not None and not _matches(value, hint):
            raise error(f"{where}.{key} must be {_describe(hint)}, got {value!r}")


def _matches(value: object, hint: object) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
        return not args or all(_matches(v, args[0]) for v in value)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # TOML has inf and nan; no setting here means either
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    return True  # a type this check does not know: left to the dataclass's own checks


def _describe(hint: object) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a list of {len(args)} values ({', '.join(_describe(a) for a in args)})"
    if origin in (tuple, list):
        return f"a list of {_describe(args[0]) if args else 'values'}"
    if hint is type(None):
        return "absent"
    return _TYPE_NAMES.get(hint, getattr(hint, "__name__", str(hint)))
