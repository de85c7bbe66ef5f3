"""Generated documents for filter tests: varied English prose and ordinary source code."""

from __future__ import annotations

import random

_WORDS = (
    "river stone garden window morning letter village market teacher history music question "
    "winter harbor forest kitchen student library painting journey mountain station evening "
    "bridge summer silver meadow lantern orchard candle valley shelter blanket pocket season "
    "walked noticed carried opened listened painted gathered followed answered remembered "
    "quiet gentle bright careful distant curious ancient narrow patient sudden simple honest"
).split()
_GLUE = "the and of to with that have be in on for from".split()


def prose(seed: int, sentences: int = 12) -> str:
    """A few paragraphs of plain, unrepetitive English that passes the prose filters."""
    rng = random.Random(seed)
    out = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS if i % 2 == 0 else _GLUE) for i in range(rng.randint(9, 15))]
        words += rng.sample(_WORDS, 3)
        out.append(" ".join(words).capitalize() + ".")
    lines = [" ".join(out[i : i + 2]) for i in range(0, len(out), 2)]
    return "\n".join(lines) + "\n"


def python_source(seed: int, functions: int = 6) -> str:
    """A small, hand-written-looking Python module."""
    rng = random.Random(seed)
    body = ['"""Helpers for the garden planner."""', "", "import math", ""]
    for i in range(functions):
        name, arg = rng.choice(_WORDS), rng.choice(_WORDS)
        body += [
            f"def {name}_{i}({arg}, scale=2):",
            f'    """Return the {name} of {arg}, scaled."""',
            f"    total = sum(math.sqrt(x) for x in {arg})",
            "    if total > 10:",
            "        return total * scale",
            "    return total",
            "",
        ]
    return "\n".join(body)
