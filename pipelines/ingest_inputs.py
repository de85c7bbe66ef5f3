"""Finding ingest input files, reading them, and spreading them over Spark tasks."""

from __future__ import annotations

import fnmatch
import io
import math
import posixpath
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakehouse.errors import InputError
from lakehouse.redact import redact
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
# A JSONL file's fields are judged by its first records (at most this many, from at most this
# many bytes): enough to catch a mistyped field name, cheap for any file.
SAMPLE_RECORDS, SAMPLE_BYTES = 100, 8 << 20
# Files whose fields are checked at once (each check is a footer read or a short read: I/O bound).
CHECK_THREADS = 8


@dataclass(frozen=True)
class InputFile:
    """One file to ingest: where it is, its id-stable relative path, its size.

    ``uri`` is what is shown and recorded (no credential, no query); ``source``, the input as
    given, is what the file is opened by: its userinfo and query (``?endpoint_override=…``,
    ``access_key=…``) configure the filesystem, and a file re-opened by ``uri`` alone would be
    read without them. ``path`` is the file's path inside that filesystem."""

    uri: str
    relpath: str
    size: int
    source: str = ""  # empty: ``uri`` itself (a file made by hand, as in tests)
    path: str = ""

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The filesystem the file was listed with, and its path there."""
        if not self.source:
            return pafs.FileSystem.from_uri(self.uri)
        return pafs.FileSystem.from_uri(self.source)[0], self.path


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
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError) as exc:  # an unknown scheme, a malformed URI
        raise InputError(
            f"cannot read input {redact(given)}: {redact(str(exc))} (local paths, file://, s3://, gs://, hdfs:// "
            "and the other filesystems pyarrow knows are read)"
        ) from None
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"input {redact(given)} does not exist")
    if info.type == pafs.FileType.File:
        yield InputFile(_shown_uri(uri, root), posixpath.basename(root), info.size, uri, root)
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
        yield InputFile(_shown_uri(uri, entry.path), relpath, entry.size, uri, entry.path)


def _shown_uri(given: str, path: str) -> str:
    """The URI of ``path`` (a path in the filesystem of ``given``) as shown and recorded: the
    scheme and host of ``given`` without its userinfo or query. An object store's path starts
    with its bucket; an absolute path (``file://``, ``hdfs://host:port/``) keeps the host."""
    parts = urlsplit(given)
    if not path.startswith("/"):
        return f"{parts.scheme}://{path}"
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{path}"


def _matches(relpath: str, patterns: tuple[str, ...]) -> bool:
    name = posixpath.basename(relpath)
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(relpath, p) for p in patterns)


def check_fields(files: Sequence[InputFile], fmt: str, cfg: RecordConfig) -> None:
    """Refuse, before any work, an input whose files lack a field the options name, or hold it
    with a type no record could use (text that is not text; an id, path or language that is a
    list or object). Parquet files are judged by their schema (the footer only); JSONL files by
    their first records: a field that none of them has is taken as mistyped. A file that cannot
    be read or judged (corrupt, or with no record at its start) is left to the job, which
    quarantines its records one by one, with a reason, as before.
    """
    named = {
        flag: name
        for flag, name in (
            ("--text-field", cfg.text_field),
            ("--id-field", cfg.id_field),
            ("--path-field", cfg.path_field),
            ("--lang-field", cfg.lang_field),
        )
        if name
    }
    if fmt == "files":
        return
    with ThreadPoolExecutor(CHECK_THREADS) as pool:
        problems = [p for p in pool.map(lambda f: _field_problem(f, fmt, named), files) if p]
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise InputError(
            f"{len(problems)} input file(s) cannot give documents with these options: {shown}. "
            "Name the fields the files hold (--text-field, --id-field, --path-field, --lang-field), "
            "or leave those files out; nothing was ingested."
        )


def _field_problem(f: InputFile, fmt: str, named: dict[str, str]) -> str | None:
    try:
        fields = _parquet_fields(f) if fmt == "parquet" else _jsonl_fields(f)
    except (OSError, ValueError, EOFError):
        return None
    if fields is None:
        return None
    where = f.uri.removeprefix("file://")
    for flag, name in named.items():
        if name not in fields:
            return f"{where} has no field {name!r} ({flag}); its fields: {', '.join(sorted(fields)) or 'none'}"
        kinds, shown = fields[name]
        if flag == "--text-field" and kinds and "text" not in kinds:
            return f"{where}: field {name!r} ({flag}) holds {shown}, not text"
        if flag != "--text-field" and kinds == {"nested"}:
            return f"{where}: field {name!r} ({flag}) holds {shown}, not a single value"
    return None


# What a field holds, as the kinds of its (non-null) values: "text" (strings or bytes), "value"
# (numbers, booleans, dates…) or "nested" (lists, structs, maps), and how to show its type.
Fields = dict[str, tuple[set[str], str]]


def _parquet_fields(f: InputFile) -> Fields:
    fs, path = f.filesystem()
    with fs.open_input_file(path) as handle:
        schema = pq.read_schema(handle)
    return {field.name: ({_arrow_kind(field.type)}, str(field.type)) for field in schema}


def _arrow_kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "text"
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return "text"
    return "nested" if pa.types.is_nested(t) else "value"


def _jsonl_fields(f: InputFile) -> Fields | None:
    """The fields of the file's first JSON objects and the kinds of their non-null values; None
    when its start holds no JSON object to judge by."""
    seen: dict[str, set[str]] = {}
    names: dict[str, set[str]] = {}
    records, budget = 0, SAMPLE_BYTES
    fs, path = f.filesystem()
    with fs.open_input_stream(path, compression="detect") as stream:
        lines = io.BufferedReader(stream, buffer_size=1 << 20)
        while records < SAMPLE_RECORDS and budget > 0:
            line = lines.readline(budget)
            if not line:
                break
            budget -= len(line)
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # malformed, or cut by the byte budget: the job quarantines such lines
            if not isinstance(obj, dict):
                continue
            records += 1
            for key, value in obj.items():
                kinds, shown = seen.setdefault(key, set()), names.setdefault(key, set())
                if value is not None:
                    kinds.add(_json_kind(value))
                    shown.add(type(value).__name__)
    if records == 0:
        return None
    return {key: (kinds, "/".join(sorted(names[key])) or "null") for key, kinds in seen.items()}


def _json_kind(value: object) -> str:
    if isinstance(value, str):
        return "text"
    return "nested" if isinstance(value, (dict, list)) else "value"


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


# The reason of a file that could not be read (whole); the ledger leaves such a file out.
UNREADABLE = "unreadable"


def read_records(files: Sequence[dict], fmt: str, cfg: RecordConfig) -> Iterator[dict]:
    """Rows (documents and refusals) of each file in turn. A file that cannot be read is one
    refused row ``unreadable`` (its ``path`` the file's relpath), after whatever rows it gave
    before failing."""
    for spec in files:
        f = InputFile(**spec)
        try:
            yield from _read_file(f, fmt, cfg)
        except (OSError, ValueError, EOFError) as exc:  # corrupt archive, vanished file, bad Parquet
            # The error may be passing (a store's hiccup, keys fixed later): the file is not
            # recorded as ingested, so --only-new-files tries it again, and the row says so.
            detail = (
                f"{type(exc).__name__}: {redact(str(exc))}; not recorded as ingested: "
                "the next run with --only-new-files reads the file again"
            )
            yield refused(cfg, f.relpath, f.relpath, f.relpath, -1, UNREADABLE, detail, None)


def _read_file(f: InputFile, fmt: str, cfg: RecordConfig) -> Iterator[dict]:
    fs, path = f.filesystem()
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
