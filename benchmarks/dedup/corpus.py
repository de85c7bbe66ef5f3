"""The benchmark corpus: Python source files of this machine, as JSONL shards and a document table.

Files come from the standard library and the installed packages (the project's virtual
environment and the interpreter's own site-packages, which overlap: the same packages in other
versions, a realistic source of near duplicates). The order is a seeded shuffle of the sorted
list, so ``--mb`` takes a varied sample and the same machine gives the same corpus.
"""

from __future__ import annotations

import json
import random
import string
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHARDS = 8  # datatrove's reader parallelises over files: enough shards for its tasks
MAX_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Corpus:
    folder: Path  # holds shard-*.jsonl
    documents: int
    bytes: int

    @property
    def megabytes(self) -> float:
        return self.bytes / 1e6


def source_roots() -> list[tuple[str, Path]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    roots = [("stdlib", stdlib), ("venv", Path(sysconfig.get_paths()["purelib"]))]
    for site in (stdlib / "site-packages", stdlib / "dist-packages"):
        if site.is_dir() and site.resolve() != roots[1][1].resolve():
            roots.append((f"system-{site.name}", site))
    return roots


def candidate_files() -> list[tuple[str, Path]]:
    files = []
    for name, root in source_roots():
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root)
            if name == "stdlib" and relative.parts[0] in ("site-packages", "dist-packages"):
                continue
            files.append((f"{name}/{relative.as_posix()}", path))
    random.Random(0).shuffle(files)
    return files


def build(folder: Path, megabytes: float) -> Corpus:
    """Write (once) about ``megabytes`` of source files as JSONL shards under ``folder``."""
    marker = folder / "corpus.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        return Corpus(folder, info["documents"], info["bytes"])
    folder.mkdir(parents=True, exist_ok=True)
    budget, total, records = megabytes * 1e6, 0, []
    for doc_id, text in _sources():
        records.append({"id": doc_id, "text": text})
        total += len(text.encode("utf-8"))
        if total >= budget:
            break
    for shard in range(SHARDS):
        with open(folder / f"shard-{shard:02d}.jsonl", "w", encoding="utf-8") as out:
            for record in records[shard::SHARDS]:
                out.write(json.dumps(record) + "\n")
    marker.write_text(json.dumps({"documents": len(records), "bytes": total}))
    print(f"corpus: {len(records)} files, {total / 1e6:.1f} MB → {folder}", file=sys.stderr)
    return Corpus(folder, len(records), total)


def _sources() -> Iterator[tuple[str, str]]:
    """(id, text) of the machine's source files; then, past them, the same files again with their
    letters rotated (pass k: a → a + k), as often as asked.

    This machine holds some 550 MB of Python source; the scaling run needs more. A rotated pass
    has the source's lengths, structure and duplicate pairs among its own files, but none of its
    word shingles is in another pass: duplicates grow with the corpus as in the source, not faster."""
    files = []
    for doc_id, path in candidate_files():
        try:
            data = path.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.strip() or len(data) > MAX_FILE_BYTES or "\x00" in text:
            continue
        files.append(doc_id)
        yield doc_id, text
    for shift in range(1, 26):
        rotate = str.maketrans(_rotated(string.ascii_lowercase, shift) | _rotated(string.ascii_uppercase, shift))
        for doc_id in files:
            path = _path_of(doc_id)
            yield f"{doc_id}@rot{shift}", path.read_text(encoding="utf-8").translate(rotate)


def _rotated(letters: str, shift: int) -> dict[str, str]:
    return dict(zip(letters, letters[shift:] + letters[:shift], strict=True))


def _path_of(doc_id: str) -> Path:
    name, _, relative = doc_id.partition("/")
    return dict(source_roots())[name] / relative


def read_records(folder: Path) -> list[dict]:
    records = []
    for shard in sorted(folder.glob("shard-*.jsonl")):
        with open(shard, encoding="utf-8") as lines:
            records.extend(json.loads(line) for line in lines)
    return records
