"""Plain-text layout shared by the commands' output."""

from __future__ import annotations


def format_columns(rows: list[tuple[str, ...]]) -> str:
    """Rows of cells as left-aligned columns, the first row a header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows)
