"""Plain-text layout shared by the commands' output."""

from __future__ import annotations

import re

# C0 and C1 controls but the newline, DEL, and the bidirectional overrides and isolates
# (text that reads in another order than it is stored).
_UNPRINTABLE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def format_columns(rows: list[tuple[str, ...]]) -> str:
    """Rows of cells as left-aligned columns, the first row a header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def printable(text: str) -> str:
    """``text`` with each control character but the newline written as its escape (``\\x1b``): a
    value read from a file anyone may edit cannot recolour the terminal, move its cursor or hide text."""
    return _UNPRINTABLE.sub(lambda found: found[0].encode("unicode_escape").decode("ascii"), text)
