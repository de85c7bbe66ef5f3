"""Finding ingest input files, reading them, and spreading them over Spark tasks."""

from __future__ import annotations

import fnmatch
import io
import logging
import math
import os
import posixpath
import stat
from collections.abc import Iterable, Iterator, Sequence
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
from pipelines.ingest_streams import DECODE_ERRORS, READ_BYTES, compression_by_name, read_lines, unsupported_message

log = logging.getLogger("factory.ingest")

FORMATS = ("jsonl", "parquet", "files")

# What a directory contributes when no --include is given.
DEFAULT_INCLUDE = {
    "jsonl": (
        *(f"*.{kind}{z}" for kind in ("jsonl", "ndjson") for z in ("", ".gz", ".zst", ".xz", ".bz2")),
        "*.json.gz",
    ),
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
    """Every input file under ``paths``, sorted by relative path; each file once.

    A file's relative path is taken from the parent of the argument that named it, so
    ``/usr/lib/python3.11`` yields ``python3.11/json/decoder.py``: the same input gives the
    same paths (and so the same document ids) wherever it lies. A file reached twice (named by
    two arguments, or through a symlink or hard link) is read once, under its first name.
    """
    if fmt not in FORMATS:
        raise InputError(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not paths:
        raise InputError("no input paths given")
    if any(not given for given in paths):
        # "$DATA" with DATA unset: Path("") is the current folder, which nobody meant to ingest.
        raise InputError("an input path is empty (an unset shell variable?); give the files or folders to ingest")
    default = not include
    include = tuple(include) or DEFAULT_INCLUDE[fmt]
    found: dict[str, InputFile] = {}
    seen: dict[tuple, InputFile] = {}  # a file's identity -> its first naming
    for given in paths:
        for item, identity in _expand(given, include, tuple(exclude), default):
            first = seen.get(identity)
            if first is not None:
                log.info(
                    "%s is the same file as %s: read once, as %s", redact(item.uri), redact(first.uri), first.relpath
                )
                continue
            other = found.get(item.relpath)
            if other is not None and other.uri != item.uri:
                raise InputError(
                    f"two inputs share the relative path {item.relpath!r} ({other.uri} and {item.uri}); "
                    "their document ids would collide. Ingest them separately or give their parent folders."
                )
            seen[identity] = found[item.relpath] = item
    if not found:
        kind = "" if fmt == "files" else f"{fmt} "  # "no files input files" otherwise
        raise InputError(f"no {kind}input files found under {', '.join(paths)} (include: {', '.join(include)})")
    if fmt == "jsonl":
        _refuse_unread_compressions(found.values())
    return sorted(found.values(), key=lambda f: f.relpath)


def _refuse_unread_compressions(files: Iterable[InputFile]) -> None:
    """Refuse, before any work, a JSONL file whose name says a compression ingest cannot read:
    read as text, its every line would be quarantined as invalid-utf8. (One whose name does not
    say it is caught by its first bytes when read: one ``unreadable`` row.)"""
    for f in files:
        compression = compression_by_name(f.relpath)
        if compression is not None and compression.reader is None:
            raise InputError(f"input {unsupported_message(f.relpath, compression)}, or leave it out with --exclude")


# A listed file: its path in its filesystem, its path inside the input, its size, and what it is
# (a local file's device and inode, so that a file reached twice is read once; else its path).
Listed = tuple[str, str, int, tuple]


def _expand(
    given: str, include: tuple[str, ...], exclude: tuple[str, ...], default: bool = False
) -> Iterator[tuple[InputFile, tuple]]:
    uri = _local_uri(given) if "://" not in given else given
    try:
        fs, root = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError) as exc:  # an unknown scheme, a malformed URI
        raise InputError(
            f"cannot read input {redact(given)}: {redact(str(exc))} (local paths, file://, s3://, gs://, hdfs:// "
            "and the other filesystems pyarrow knows are read)"
        ) from None
    local = isinstance(fs, pafs.LocalFileSystem)
    listed = _list_local(given, root, exclude) if local else _list_store(given, fs, root)
    base = posixpath.dirname(root.rstrip("/"))
    unmatched: list[str] = []
    for path, inner, size, identity in listed:
        if inner and SKIPPED_DIRS.intersection(inner.split("/")[:-1]):
            continue
        if inner and _matches(inner, exclude):
            continue
        if inner and not _matches(inner, include, fold_case=default):
            unmatched.append(inner)
            continue
        if local:
            _check_name(given, path, inner)
        relpath = posixpath.relpath(path, base) if inner else posixpath.basename(root)
        yield InputFile(_shown_uri(uri, path), relpath, size, uri, path), identity
    if unmatched:
        # Not an error (a folder often holds notes, schemas, other formats), but never silent: a
        # file named *.JSONL or *.json left out by surprise is a whole part of the corpus missing.
        log.info(
            "%s: %d file(s) match no include pattern and are skipped (e.g. %s); --include GLOB takes them",
            redact(given),
            len(unmatched),
            ", ".join(_shown_name(n) for n in unmatched[:3]),
        )


def _local_uri(given: str) -> str:
    try:
        resolved = Path(given).resolve()
    except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError on a symlink loop
        raise InputError(
            f"cannot read input {_shown_name(given)}: {exc}; it is a symlink loop or a broken link: fix or remove it"
        ) from None
    _check_name(given, str(resolved), "")
    return resolved.as_uri()


def _list_store(given: str, fs: pafs.FileSystem, root: str) -> Iterator[Listed]:
    """An object store's (or another pyarrow filesystem's) files: no symlinks there to loop."""
    try:
        info = fs.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            raise InputError(f"input {redact(given)} does not exist")
        if info.type == pafs.FileType.File:
            yield root, "", info.size, (_shown_uri(given, root),)
            return
        entries = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    except OSError as exc:  # refused keys, no such bucket, an unreachable store
        raise InputError(
            f"cannot list input {redact(given)}: {redact(str(exc))}; check its address and the access it is given"
        ) from None
    for entry in entries:
        if entry.type == pafs.FileType.File:
            yield entry.path, posixpath.relpath(entry.path, root), entry.size, (_shown_uri(given, entry.path),)


def _list_local(given: str, root: str, exclude: tuple[str, ...] = ()) -> Iterator[Listed]:
    """A local input's regular files, in name order.

    Folder symlinks are followed (a data folder often links in shards kept elsewhere), but each
    real folder, by device and inode, is listed once: a link back to a folder above (a loop) or a
    second link to a folder already listed adds nothing, so no file is read twice and no listing
    runs forever. A broken or looping file link, a FIFO, a socket or a device is no document:
    such an entry is skipped with a warning (a FIFO would block the reading task forever). A
    folder whose path inside the input, with a trailing slash, matches an --exclude pattern
    (``logs/*``, ``*/tmp/*``) is not listed at all, so an unreadable one can be left out."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        raise InputError(f"input {_shown_name(given)} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read input {_shown_name(given)}: {exc.strerror}; {_access_hint(exc)}") from None
    if stat.S_ISREG(st.st_mode):
        yield root, "", st.st_size, (st.st_dev, st.st_ino)
        return
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(
            f"input {_shown_name(given)} is neither a file nor a folder (a FIFO, socket or device); "
            "give the files or folders to ingest"
        )
    listed_dirs = {(st.st_dev, st.st_ino): ""}
    stack = [(root, "")]
    while stack:
        folder, inner = stack.pop()
        subfolders = []
        for entry in _scan(given, folder):
            entry_inner = posixpath.join(inner, entry.name) if inner else entry.name
            try:
                est = entry.stat()  # follows symlinks
            except OSError as exc:
                log.warning(
                    "%s: skipping %s: %s (a broken or looping link?)",
                    _shown_name(given),
                    _shown_name(entry_inner),
                    exc.strerror,
                )
                continue
            if stat.S_ISREG(est.st_mode):
                yield entry.path, entry_inner, est.st_size, (est.st_dev, est.st_ino)
            elif stat.S_ISDIR(est.st_mode):
                if entry.name in SKIPPED_DIRS or any(fnmatch.fnmatchcase(entry_inner + "/", p) for p in exclude):
                    continue
                key = (est.st_dev, est.st_ino)
                if key in listed_dirs:
                    log.info(
                        "%s: not listing %s: it leads to the folder %s, listed already (a symlink loop or a second link)",
                        _shown_name(given),
                        _shown_name(entry_inner),
                        _shown_name(listed_dirs[key] or "the input itself"),
                    )
                    continue
                listed_dirs[key] = entry_inner
                subfolders.append((entry.path, entry_inner))
            else:
                log.warning(
                    "%s: skipping %s: not a regular file (a FIFO, socket or device)",
                    _shown_name(given),
                    _shown_name(entry_inner),
                )
        stack.extend(reversed(subfolders))  # depth first, in name order


def _scan(given: str, folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError as exc:
        raise InputError(
            f"cannot list folder {_shown_name(folder)} of input {_shown_name(given)}: {exc.strerror}; "
            f"{_access_hint(exc)}, or leave it out with --exclude"
        ) from None


def _access_hint(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "grant the user running this command read access to it"
    return "check that it exists and can be read"


def _check_name(given: str, path: str, inner: str) -> None:
    """Refuse a path that is not valid UTF-8: its relative path makes the documents' ids and
    paths (text), and pyarrow opens files by UTF-8 path, so such a file cannot be read at all.
    Refused, not skipped: skipping would leave part of the input out with only a log line."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        where = f"folder {_shown_name(given)} holds {_shown_name(inner)}" if inner else f"input {_shown_name(path)}"
        raise InputError(
            f"{where}, a name that is not valid UTF-8; rename it (e.g. with convmv -f latin1 -t utf8)"
            + (", or leave it out with --exclude" if inner else "")
        ) from None


def _shown_name(name: str) -> str:
    """A path as printable text: bytes that are not UTF-8 shown as ``\\xe9``."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _shown_uri(given: str, path: str) -> str:
    """The URI of ``path`` (a path in the filesystem of ``given``) as shown and recorded: the
    scheme and host of ``given`` without its userinfo or query. An object store's path starts
    with its bucket; an absolute path (``file://``, ``hdfs://host:port/``) keeps the host."""
    parts = urlsplit(given)
    if not path.startswith("/"):
        return f"{parts.scheme}://{path}"
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{path}"


def _matches(relpath: str, patterns: tuple[str, ...], fold_case: bool = False) -> bool:
    """Whether the file's name or its path inside the input matches a pattern. The default
    patterns match any case (``B.JSONL`` is JSONL too); patterns given are matched as typed."""
    name = posixpath.basename(relpath)
    if fold_case:
        name, relpath = name.lower(), relpath.lower()
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
    except (OSError, ValueError, EOFError, *DECODE_ERRORS):
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
    with fs.open_input_stream(path, compression=None) as stream:
        # A line longer than the whole sample is skipped unheld, as the job refuses it unparsed.
        for line in read_lines(io.BufferedReader(stream, READ_BYTES), f.relpath, SAMPLE_BYTES):
            if records >= SAMPLE_RECORDS or budget <= 0:
                break
            if not isinstance(line, bytes):  # too long, or a cut-short file's last: the job quarantines them
                break
            budget -= len(line)
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # malformed: the job quarantines such lines
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
        except (OSError, ValueError, EOFError, *DECODE_ERRORS) as exc:  # corrupt archive, vanished file, bad Parquet
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
        # Decompressed here, not by pyarrow: pyarrow reads no xz, and its error at a cut loses the
        # lines of the whole read it ends (ingest_streams.py).
        with fs.open_input_stream(path, compression=None) as stream:
            lines = read_lines(io.BufferedReader(stream, READ_BYTES), f.relpath, cfg.max_line_bytes)
            yield from jsonl_records(lines, f.relpath, cfg)
    elif fmt == "parquet":
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            rows = (row for batch in parquet.iter_batches(batch_size=1024) for row in batch.to_pylist())
            yield from mapping_records(rows, f.relpath, cfg)
    else:
        with fs.open_input_file(path) as handle:
            yield file_record(f.relpath, f.size, lambda n: handle.read() if n < 0 else handle.read(n), cfg)
