"""Finding ingest input files, reading them, and spreading them over Spark tasks."""

from __future__ import annotations

import fnmatch
import io
import math
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakehouse.errors import InputError
from pipelines.ingest_records import RecordConfig, file_record, jsonl_records, mapping_records, refused

FORMATS = ("jsonl", "parquet", "files")

# What a directory contributes when no --include is given.
DEFAULT_INCLUDE = {
    "jsonl": ("*.jsonl", "*.jsonl.gz", "*.jsonl.zst", "*.ndjson", "*.ndjson.gz", "*.ndjson.zst", "*.json.gz"),
    "parquet": ("*.parquet",),
    "files": ("*",),
}
# Version-control metadata is never a document.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})


@dataclass(frozen=True)
class InputFile:
    """One file to ingest: where it is, its id-stable relative path, its size."""

    uri: str
    relpath: str
    size: int


def discover(
    paths: Sequence[str], fmt: str, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> list[InputFile]:
    """Every input file under ``paths``, sorted by relative path.

    A file's relative path is taken from the parent of the argument that named it, so
    ``/usr/lib/python3.11`` yields ``python3.11/json/decoder.py``: the same input gives the
    same paths (and so the same document ids) wherever it lies.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not paths:
        raise InputError("no input paths given")
    include = tuple(include) or DEFAULT_INCLUDE[fmt]
    found: dict[str, InputFile] = {}
    for given in paths:
        for item in _expand(given, include, tuple(exclude)):
            other = found.get(item.relpath)
            if other is not None and other.uri != item.uri:
                raise InputError(
                    f"two inputs share the relative path {item.relpath!r} ({other.uri} and {item.uri}); "
                    "their document ids would collide. Ingest them separately or give their parent folders."
                )
            found[item.relpath] = item
    if not found:
        raise InputError(f"no {fmt} input files found under {', '.join(paths)} (include: {', '.join(include)})")
    return sorted(found.values(), key=lambda f: f.relpath)


def _expand(given: str, include: tuple[str, ...], exclude: tuple[str, ...]) -> Iterator[InputFile]:
    uri = given if "://" in given else Path(given).resolve().as_uri()
    fs, root = pafs.FileSystem.from_uri(uri)
    info = fs.get_file_info(root)
    scheme = uri.split("://", 1)[0]
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"input {given} does not exist")
    if info.type == pafs.FileType.File:
        yield InputFile(f"{scheme}://{root}", posixpath.basename(root), info.size)
        return
    base = posixpath.dirname(root.rstrip("/"))
    for entry in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        if entry.type != pafs.FileType.File:
            continue
        relpath = posixpath.relpath(entry.path, base)
        inner = posixpath.relpath(entry.path, root)
        if SKIPPED_DIRS.intersection(inner.split("/")[:-1]):
            continue
        if not _matches(inner, include) or _matches(inner, exclude):
            continue
        yield InputFile(f"{scheme}://{entry.path}", relpath, entry.size)


def _matches(relpath: str, patterns: tuple[str, ...]) -> bool:
    name = posixpath.basename(relpath)
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(relpath, p) for p in patterns)


def plan_tasks(files: Sequence[InputFile], parallelism: int, target_bytes: int = 64 << 20) -> list[list[InputFile]]:
    """Spread files over tasks of similar size: enough tasks to keep every core busy."""
    total = sum(f.size for f in files)
    n_tasks = max(1, min(len(files), max(parallelism * 4, math.ceil(total / target_bytes))))
    groups: list[list[InputFile]] = [[] for _ in range(n_tasks)]
    loads = [0] * n_tasks
    # Largest first onto the lightest task; ties go to the lowest index, so the plan is stable.
    for f in sorted(files, key=lambda f: (-f.size, f.relpath)):
        i = min(range(n_tasks), key=lambda k: (loads[k], k))
        groups[i].append(f)
        loads[i] += max(f.size, 1)
    return [sorted(g, key=lambda f: f.relpath) for g in groups if g]


def encode_group(group: Sequence[InputFile]) -> list[dict]:
    return [asdict(f) for f in group]


def read_records(files: Sequence[dict], fmt: str, cfg: RecordConfig) -> Iterator[dict]:
    """Rows (documents and refusals) of each file in turn. A file that cannot be read is one
    refused row ``unreadable``, after whatever rows it gave before failing."""
    for spec in files:
        f = InputFile(**spec)
        try:
            yield from _read_file(f, fmt, cfg)
        except (OSError, ValueError, EOFError) as exc:  # corrupt archive, vanished file, bad Parquet
            yield refused(cfg, f.relpath, f.relpath, f.relpath, -1, "unreadable", f"{type(exc).__name__}: {exc}", None)


def _read_file(f: InputFile, fmt: str, cfg: RecordConfig) -> Iterator[dict]:
    fs, path = pafs.FileSystem.from_uri(f.uri)
    if fmt == "jsonl":
        with fs.open_input_stream(path, compression="detect") as stream:
            yield from jsonl_records(io.BufferedReader(stream, buffer_size=1 << 20), f.relpath, cfg)
    elif fmt == "parquet":
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            rows = (row for batch in parquet.iter_batches(batch_size=1024) for row in batch.to_pylist())
            yield from mapping_records(rows, f.relpath, cfg)
    else:
        with fs.open_input_file(path) as handle:
            yield file_record(f.relpath, f.size, lambda n: handle.read() if n < 0 else handle.read(n), cfg)
