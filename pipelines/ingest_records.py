"""Raw input records → document rows or quarantine rows. Plain functions, no Spark.

Every record read becomes exactly one row: a document (``reason`` is None) or a refused
record with its reason, so the job's counts add up (in = ingested + quarantined).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import orjson
import pyarrow as pa

from lakehouse.errors import InputError
from lakehouse.schemas import QUARANTINE_RECORD_BYTES
from pipelines.ingest_streams import CutShort, Line, Overlong

# Columns of a parsed row. origin/ordinal say where the record came from (input-relative file
# path, line or row number); they order duplicates deterministically and are not stored.
_PARSED_FIELDS = (
    ("doc_id", pa.string(), "string"),
    ("source", pa.string(), "string"),
    ("text", pa.string(), "string"),
    ("path", pa.string(), "string"),
    ("lang", pa.string(), "string"),
    ("n_bytes", pa.int64(), "long"),
    ("origin", pa.string(), "string"),
    ("ordinal", pa.int64(), "long"),
    ("reason", pa.string(), "string"),
    ("detail", pa.string(), "string"),
    ("record", pa.binary(), "binary"),
)
PARSED_ARROW_SCHEMA = pa.schema([(name, arrow) for name, arrow, _ in _PARSED_FIELDS])
PARSED_SCHEMA = ", ".join(f"{name} {spark}" for name, _, spark in _PARSED_FIELDS)

_SOURCE = re.compile(r"[a-z][a-z0-9_\-]{0,63}\Z")

# The most JSON can grow a text: a control character is six bytes escaped (\u0001). A JSONL line
# longer than this many times --max-doc-bytes cannot hold a text within it, so it is refused as
# too-large unread, never held whole.
JSON_ESCAPE_GROWTH = 6
# The reason of a compressed file whose data stops mid-stream (its good lines are kept).
TRUNCATED = "truncated-file"


@dataclass(frozen=True)
class RecordConfig:
    """How records of one ingest become documents."""

    source: str
    text_field: str = "text"  # JSONL/Parquet field holding the text
    id_field: str | None = None  # field holding a stable id; else the record's position is its id
    path_field: str | None = None  # field holding a path or URL for the ``path`` column
    lang_field: str | None = None  # field holding the language for the ``lang`` column
    max_doc_bytes: int = 10 * 1024 * 1024  # larger documents are refused as ``too-large``

    def __post_init__(self) -> None:
        if not _SOURCE.match(self.source):
            raise InputError(f"invalid source name {self.source!r}: lowercase letters, digits, '_' or '-', e.g. code")
        if self.max_doc_bytes <= 0:
            raise InputError(f"--max-doc-bytes must be positive, got {self.max_doc_bytes}")
        if not self.text_field:
            raise InputError("--text-field must name a field")

    @property
    def max_line_bytes(self) -> int:
        """The longest JSONL line read whole; a longer one is too-large whatever it holds."""
        return JSON_ESCAPE_GROWTH * self.max_doc_bytes


def doc_id_for(source: str, key: str) -> str:
    """The stable id of the record ``key`` of ``source``: the same input gives the same id."""
    return hashlib.sha256(f"{source}\x00{key}".encode()).hexdigest()[:32]


def document(cfg: RecordConfig, key: str, text: str, path: str, lang: str | None, origin: str, ordinal: int) -> dict:
    return {
        "doc_id": doc_id_for(cfg.source, key),
        "source": cfg.source,
        "text": text,
        "path": path,
        "lang": lang,
        "n_bytes": len(text.encode("utf-8")),
        "origin": origin,
        "ordinal": ordinal,
        "reason": None,
        "detail": None,
        "record": None,
    }


def refused(
    cfg: RecordConfig, key: str, path: str, origin: str, ordinal: int, reason: str, detail: str, raw: bytes | None
) -> dict:
    return {
        "doc_id": doc_id_for(cfg.source, key),
        "source": cfg.source,
        "text": None,
        "path": path,
        "lang": None,
        "n_bytes": None,
        "origin": origin,
        "ordinal": ordinal,
        "reason": reason,
        "detail": detail,
        "record": raw[:QUARANTINE_RECORD_BYTES] if raw is not None else None,
    }


def check_text(text: str, max_doc_bytes: int) -> tuple[str, str] | None:
    """Why ``text`` cannot be a document, as ``(reason, detail)``, or None when it can."""
    if not text.strip():
        return "empty", "text is empty or whitespace only"
    n_bytes = len(text.encode("utf-8"))
    if n_bytes > max_doc_bytes:
        return "too-large", f"{n_bytes} bytes > --max-doc-bytes {max_doc_bytes}"
    nul = text.find("\x00")
    if nul >= 0:
        return "nul-byte", f"NUL character at offset {nul}"
    return None


UTF8_BOM = b"\xef\xbb\xbf"


def decode_utf8(raw: bytes) -> tuple[str | None, str | None]:
    """``(text, None)`` or ``(None, detail)`` for bytes that are not valid UTF-8."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start}: {exc.reason}"


def jsonl_records(lines: Iterable[Line], origin: str, cfg: RecordConfig) -> Iterator[dict]:
    """One row per non-blank line of a JSONL file (``origin`` is its input-relative path), as
    ``pipelines.ingest_streams.read_lines`` gives them: a line too long to read is ``too-large``, and
    a compressed file cut short ends in one ``truncated-file`` row after its good lines."""
    for line_no, line in enumerate(lines, start=1):
        position = f"{origin}:{line_no}"
        if isinstance(line, Overlong):
            detail = (
                f"line of {line.size} bytes > {cfg.max_line_bytes} ({JSON_ESCAPE_GROWTH} x --max-doc-bytes "
                f"{cfg.max_doc_bytes}, the most JSON takes for a text within it); not read whole"
            )
            yield refused(cfg, position, position, origin, line_no, "too-large", detail, line.head)
            continue
        if isinstance(line, CutShort):
            yield refused(cfg, position, position, origin, line_no, TRUNCATED, _cut_detail(line, line_no), line.head)
            return
        line = line.rstrip(b"\r\n")
        if line_no == 1:
            # Windows editors start UTF-8 files with a byte order mark; RFC 8259 lets a parser ignore it.
            line = line.removeprefix(UTF8_BOM)
        if not line.strip():
            continue
        yield _json_record(line, position, origin, line_no, cfg)


def _cut_detail(cut: CutShort, line_no: int) -> str:
    where = f"inside line {line_no}" if cut.head else f"before line {line_no}"
    return (
        f"the {cut.compression} data ends without its end marker after {cut.offset} decompressed bytes, "
        f"{where}: the file is cut short (an interrupted download or copy?); the {line_no - 1} line(s) "
        "before it were read. Fetch the whole file again: with a new size, --only-new-files reads it again"
    )


def _json_record(raw: bytes, position: str, origin: str, ordinal: int, cfg: RecordConfig) -> dict:
    def refuse(reason: str, detail: str, key: str = position, path: str = position) -> dict:
        return refused(cfg, key, path, origin, ordinal, reason, detail, raw)

    line, bad_utf8 = decode_utf8(raw)
    if line is None:
        return refuse("invalid-utf8", bad_utf8)
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        # A "\ud800" escape is valid JSON syntax but decodes to no valid UTF-8 text.
        return refuse("invalid-utf8" if "surrogate" in str(exc) else "malformed-json", str(exc))
    if not isinstance(obj, dict):
        return refuse("malformed-json", f"expected a JSON object, got {type(obj).__name__}")
    return _mapping_record(obj, position, origin, ordinal, cfg, refuse)


def _mapping_record(obj: dict, position: str, origin: str, ordinal: int, cfg: RecordConfig, refuse) -> dict:
    """A document from a record already parsed into fields (JSON object or Parquet row)."""
    key = position
    if cfg.id_field:
        record_id = obj.get(cfg.id_field)
        if record_id is None or record_id == "":
            return refuse("missing-id", f"no value in id field {cfg.id_field!r}")
        key = f"id:{record_id}"
    path = _optional_str(obj, cfg.path_field) or position
    text = obj.get(cfg.text_field)
    if isinstance(text, bytes):
        text, bad_utf8 = decode_utf8(text)
        if text is None:
            return refuse("invalid-utf8", bad_utf8, key, path)
    if text is None:
        missing = "is null" if cfg.text_field in obj else "is missing"
        return refuse("missing-text", f"text field {cfg.text_field!r} {missing}", key, path)
    if not isinstance(text, str):
        return refuse("missing-text", f"field {cfg.text_field!r} is {type(text).__name__}, not a string", key, path)
    problem = check_text(text, cfg.max_doc_bytes)
    if problem:
        return refuse(*problem, key, path)
    return document(cfg, key, text, path, _optional_str(obj, cfg.lang_field), origin, ordinal)


def _optional_str(obj: dict, name: str | None) -> str | None:
    if not name:
        return None
    value = obj.get(name)
    return None if value is None else str(value)


def mapping_records(rows: Iterable[dict], origin: str, cfg: RecordConfig) -> Iterator[dict]:
    """One row per Parquet row (as a dict); the row number is its position."""
    for row_no, obj in enumerate(rows):
        yield _mapping_record(obj, f"{origin}#{row_no}", origin, row_no, cfg, _row_refuser(obj, origin, row_no, cfg))


def _row_refuser(obj: dict, origin: str, row_no: int, cfg: RecordConfig):
    position = f"{origin}#{row_no}"

    def refuse(reason: str, detail: str, key: str = position, path: str = position) -> dict:
        raw = orjson.dumps(obj, default=repr, option=orjson.OPT_NON_STR_KEYS)
        return refused(cfg, key, path, origin, row_no, reason, detail, raw)

    return refuse


# --- source files -----------------------------------------------------------------------

# Bytes-level check git uses: a NUL in the first 8000 bytes means binary.
_BINARY_SNIFF_BYTES = 8000

BINARY_EXTENSIONS = frozenset(
    ".a .bin .bmp .bz2 .class .dll .dylib .eot .exe .gif .gz .ico .jar .jpeg .jpg .lz4 .mo .npy .npz "
    ".o .obj .otf .pdf .pickle .pkl .png .pyc .pyd .pyo .so .tar .tgz .ttf .wasm .webp .whl .woff "
    ".woff2 .xz .zip .zst .7z .mp3 .mp4 .wav .ogg .sqlite .db .parquet .avro .orc".split()
)

# Directories whose files are third-party copies, not the project's own source.
VENDORED_DIRS = frozenset(
    "node_modules bower_components vendor vendored third_party thirdparty third-party "
    "site-packages dist-packages .venv".split()
)

# A line this long in a web asset means it was minified, not written by hand.
MINIFIED_LINE_CHARS = 1000
_WEB_ASSETS = frozenset({"javascript", "css", "html", "json"})

LANG_BY_EXTENSION = {
    ".py": "python", ".pyi": "python", ".ipynb": "jupyter", ".c": "c", ".h": "c", ".cc": "cpp",
    ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp", ".cu": "cuda", ".rs": "rust",
    ".go": "go", ".java": "java", ".kt": "kotlin", ".scala": "scala", ".js": "javascript",
    ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript", ".ts": "typescript",
    ".tsx": "typescript", ".rb": "ruby", ".php": "php", ".cs": "csharp", ".swift": "swift",
    ".m": "objective-c", ".lua": "lua", ".pl": "perl", ".pm": "perl", ".r": "r", ".jl": "julia",
    ".hs": "haskell", ".ml": "ocaml", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang",
    ".clj": "clojure", ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".ps1": "powershell",
    ".sql": "sql", ".html": "html", ".htm": "html", ".css": "css", ".scss": "css", ".json": "json",
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".xml": "xml", ".md": "markdown",
    ".rst": "restructuredtext", ".tex": "tex", ".txt": "text", ".cfg": "ini", ".ini": "ini",
    ".mk": "makefile", ".cmake": "cmake", ".dockerfile": "dockerfile", ".proto": "protobuf",
    ".f90": "fortran", ".vim": "vim", ".el": "emacs-lisp", ".dart": "dart", ".zig": "zig",
}  # fmt: skip
LANG_BY_NAME = {"Makefile": "makefile", "Dockerfile": "dockerfile", "CMakeLists.txt": "cmake"}


def lang_from_path(path: str) -> str | None:
    """The language a file's name says it holds, or None."""
    name = posixpath.basename(path)
    if name in LANG_BY_NAME:
        return LANG_BY_NAME[name]
    return LANG_BY_EXTENSION.get(posixpath.splitext(name)[1].lower())


def file_refusal(relpath: str, size: int) -> tuple[str, str] | None:
    """Why a file is refused from its name and size alone (before reading it)."""
    name = posixpath.basename(relpath).lower()
    if posixpath.splitext(name)[1] in BINARY_EXTENSIONS:
        return "binary", f"binary file type {posixpath.splitext(name)[1]}"
    vendored = [d for d in relpath.split("/")[:-1] if d.lower() in VENDORED_DIRS]
    if vendored:
        return "vendored", f"inside a vendored directory {vendored[0]!r}"
    if ".min." in name:
        return "minified", "minified file name"
    return None


def file_record(relpath: str, size: int, read, cfg: RecordConfig) -> dict:
    """The row for one source file; ``read(n)`` returns up to ``n`` bytes of it (all when n<0)."""

    def refuse(reason: str, detail: str, raw: bytes | None) -> dict:
        return refused(cfg, relpath, relpath, relpath, 0, reason, detail, raw)

    by_name = file_refusal(relpath, size)
    if by_name:
        return refuse(*by_name, read(QUARANTINE_RECORD_BYTES))
    if size > cfg.max_doc_bytes:
        return refuse("too-large", f"{size} bytes > --max-doc-bytes {cfg.max_doc_bytes}", read(QUARANTINE_RECORD_BYTES))
    raw = read(-1)
    nul = raw.find(b"\x00", 0, _BINARY_SNIFF_BYTES)
    if nul >= 0:
        return refuse("binary", f"NUL byte at offset {nul}", raw)
    text, bad_utf8 = decode_utf8(raw)
    if text is None:
        return refuse("invalid-utf8", bad_utf8, raw)
    problem = check_text(text, cfg.max_doc_bytes)
    if problem:
        return refuse(*problem, raw)
    lang = lang_from_path(relpath)
    if lang in _WEB_ASSETS and max(map(len, text.splitlines()), default=0) > MINIFIED_LINE_CHARS:
        return refuse("minified", f"a line longer than {MINIFIED_LINE_CHARS} characters in a {lang} file", raw)
    return document(cfg, relpath, text, relpath, lang, relpath, 0)
