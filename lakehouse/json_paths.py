"""The leaves of a JSON value by path (``optim.betas[1]``), and the paths where two values differ."""

from __future__ import annotations

import json

ABSENT = object()  # a path one of two values lacks


def flatten(value: object, path: str = "") -> dict[str, object]:
    """Each leaf of ``value`` by its path; an empty dict or list is a leaf."""
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in flatten(item, f"{path}.{key}" if path else key).items()}
    if isinstance(value, list) and value:
        return {k: v for i, item in enumerate(value) for k, v in flatten(item, f"{path}[{i}]").items()}
    return {path: value}


def differing_paths(before: object, after: object) -> list[str]:
    """The sorted leaf paths whose values differ, or that only one of the two has."""
    flat_before, flat_after = flatten(before), flatten(after)
    return [
        path
        for path in sorted(flat_before.keys() | flat_after.keys())
        if _json(flat_before.get(path, ABSENT)) != _json(flat_after.get(path, ABSENT))
    ]


def _json(value: object) -> str | None:
    # Compared as JSON text: in Python True == 1 == 1.0, as parameters they differ.
    return None if value is ABSENT else json.dumps(value, sort_keys=True)
