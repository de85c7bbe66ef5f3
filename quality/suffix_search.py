"""spaCy's suffix search, reading only the end of each chunk where it can.

spaCy finds a chunk's suffix with one regular expression, ``piece1$|piece2$|…``, and
``search``: the engine tries every alternative at every position of the chunk, so each call
costs the chunk's length times some eighty alternatives, and it was a third of the prose
filters' tokenizing time. Every alternative ends at ``$``, so the match is the chunk's tail
from the leftmost position where any alternative matches; which alternative matches does not
change it, except in a tie between the two searches below, which goes back to spaCy's own.
An alternative that consumes at most ``w`` characters can only start in the last ``w + 1``
(``$`` also matches before a final newline), so those alternatives are searched from there
(a lookbehind still sees the characters before the start); the few unbounded ones (``\\.\\.+``)
are searched over the whole chunk, and the leftmost match wins.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from re import _parser  # the standard library's own parser: its getwidth() bounds a pattern

_UNBOUNDED = 1 << 16  # wider than any chunk worth a tail search


def tail_suffix_search(pieces: Sequence[str], current: Callable) -> Callable:
    """A function giving ``current(chunk)``'s match, for the suffix pattern made of ``pieces``.

    ``current`` is the tokenizer's ``suffix_search``; it is returned unchanged when ``pieces``
    are not what it was compiled from.
    """
    from spacy.util import compile_suffix_regex

    full = compile_suffix_regex(pieces)
    if getattr(current, "__self__", None) is None or current.__self__.pattern != full.pattern:
        return current
    widths = [_parser.parse(piece).getwidth()[1] for piece in pieces]
    bounded = [piece for piece, width in zip(pieces, widths, strict=True) if width < _UNBOUNDED]
    unbounded = [piece for piece, width in zip(pieces, widths, strict=True) if width >= _UNBOUNDED]
    if not bounded:
        return current
    reach = max(width for width in widths if width < _UNBOUNDED) + 1
    tail = compile_suffix_regex(bounded).search
    whole = compile_suffix_regex(unbounded).search if unbounded else None
    everything = full.search

    def search(chunk: str) -> re.Match | None:
        near = tail(chunk, max(0, len(chunk) - reach))
        far = whole(chunk) if whole is not None else None
        if far is None:
            return near
        if near is None or far.start() < near.start():
            return far
        if near.start() < far.start():
            return near
        return everything(chunk)  # the same start: spaCy's order of alternatives decides

    return search
