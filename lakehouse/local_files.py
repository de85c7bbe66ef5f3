"""Writing a local file whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` beside ``path``, then rename it into place: a reader, or a crash, never
    leaves or sees half a file (a rename within one folder is atomic on POSIX filesystems)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, path)
