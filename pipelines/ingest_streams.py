"""A JSONL input's bytes: decompressed by what the file holds, cut into lines of bounded length.

The reading task sees every line once, in order, as one of three things: a line (bytes, its
newline removed), a line too long to hold (``Overlong``: its first bytes and its size, the rest
read and dropped on the way to its newline), or the end of a compressed file cut short
(``CutShort``: where the data stopped). Nothing here holds more than a bounded line and one
read's worth of data, whatever the file holds.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import posixpath
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import pyarrow as pa
import zstandard

from lakehouse.schemas import QUARANTINE_RECORD_BYTES

# Decompressed bytes asked for at a time: one read, never a whole line.
READ_BYTES = 1 << 20
# Compressed bytes fed to a zstd or lz4 decoder at a time.
_PIECE_BYTES = 64 << 10
# What a corrupt compressed file raises besides OSError/ValueError/EOFError (which callers catch).
DECODE_ERRORS: tuple[type[Exception], ...] = (zlib.error, lzma.LZMAError, zstandard.ZstdError)


class _Read1(Protocol):
    def read1(self, size: int = ..., /) -> bytes: ...


class UnsupportedCompression(ValueError):
    """A file compressed in a format ingest does not read."""


@dataclass(frozen=True)
class Compression:
    name: str
    suffixes: tuple[str, ...]  # lowercase
    magic: bytes  # b"": the format has none (its name alone says it)
    reader: Callable[[BinaryIO], _Read1] | None  # None: ingest does not read it
    hint: str = ""  # how to make such a file readable


def _zstd(stream: BinaryIO) -> _Read1:
    return _Frames(stream, lambda: zstandard.ZstdDecompressor().decompressobj())


def _lz4(stream: BinaryIO) -> _Read1:
    return _Lz4(stream)


COMPRESSIONS = (
    # The stdlib readers read every stream of a file (pigz, pbzip2, xz -T write several) and
    # raise EOFError at a cut, after handing over all they decoded before it.
    Compression("gzip", (".gz", ".gzip"), b"\x1f\x8b", lambda s: gzip.GzipFile(fileobj=s, mode="rb")),
    Compression("bzip2", (".bz2",), b"BZh", bz2.BZ2File),
    Compression("xz", (".xz", ".lzma"), b"\xfd7zXZ\x00", lzma.LZMAFile),  # FORMAT_AUTO reads .lzma too
    Compression("zstd", (".zst", ".zstd"), b"\x28\xb5\x2f\xfd", _zstd),
    Compression("lz4", (".lz4",), b"\x04\x22\x4d\x18", _lz4),
    Compression("zip", (".zip",), b"PK\x03\x04", None, "unzip it"),
    Compression("7z", (".7z",), b"7z\xbc\xaf\x27\x1c", None, "extract it (7z x)"),
    Compression("brotli", (".br",), b"", None, "decompress it (brotli -d)"),
    Compression("lzip", (".lz",), b"LZIP", None, "decompress it (lzip -d)"),
    Compression("compress", (".z",), b"\x1f\x9d", None, "decompress it (uncompress)"),
    Compression("snappy", (".sz", ".snappy"), b"\xff\x06\x00\x00sNaPpY", None, "decompress it"),
)
READ = tuple(c.name for c in COMPRESSIONS if c.reader is not None)


def compression_by_name(name: str) -> Compression | None:
    """The compression a file's name says (its last suffix, in any case), or None."""
    suffix = posixpath.splitext(name)[1].lower()
    return next((c for c in COMPRESSIONS if suffix in c.suffixes), None)


def compression_of(name: str, head: bytes) -> Compression | None:
    """What a file holds: the format its first bytes are the magic number of, else the one its name
    says (a format without a magic number; or a name that lies, whose reader then fails clearly)."""
    by_magic = next((c for c in COMPRESSIONS if c.magic and head.startswith(c.magic)), None)
    return by_magic or compression_by_name(name)


def unsupported_message(name: str, compression: Compression) -> str:
    return (
        f"{name} is {compression.name}-compressed, which ingest does not read (it reads "
        f"{', '.join(READ)} and plain files): {compression.hint} or recompress it (e.g. zstd)"
    )


@dataclass(frozen=True)
class Overlong:
    """A line longer than the bound: its first bytes (as quarantine keeps them) and its size."""

    head: bytes
    size: int


@dataclass(frozen=True)
class CutShort:
    """The end of a compressed file whose data stops without the format's end marker."""

    head: bytes  # the first bytes of the unfinished line (empty: the cut fell between lines)
    offset: int  # decompressed bytes read before the cut
    compression: str


Line = bytes | Overlong | CutShort


def read_lines(stream: io.BufferedReader, name: str, max_line_bytes: int) -> Iterator[Line]:
    """The lines of the file open as ``stream`` (``name`` is its name), decompressed if it is
    compressed; a line over ``max_line_bytes`` is an ``Overlong``, never held whole."""
    compression = compression_of(name, stream.peek(8)[:8])
    if compression is None:
        return _lines(stream, max_line_bytes, None)
    if compression.reader is None:
        raise UnsupportedCompression(unsupported_message(posixpath.basename(name), compression))
    return _lines(compression.reader(stream), max_line_bytes, compression.name)


def _lines(reader: _Read1, max_line_bytes: int, compression: str | None) -> Iterator[Line]:
    line = _LineBuffer(max_line_bytes)
    offset = 0
    while True:
        try:
            chunk = reader.read1(READ_BYTES)
        except EOFError:  # the compressed data stops mid-stream: everything before it was handed over
            if compression is None:
                raise
            yield CutShort(line.head(), offset, compression)
            return
        if not chunk:
            break
        offset += len(chunk)
        *complete, rest = chunk.split(b"\n")
        for piece in complete:
            if line.size or len(piece) > max_line_bytes:
                line.add(piece)
                yield line.take()
            else:  # a whole line inside one read: most are
                yield piece
        line.add(rest)
    if line.size:
        yield line.take()


class _LineBuffer:
    """The parts of the line being read; past ``max_bytes`` only its head and size are kept."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.overlong: bytes | None = None

    def add(self, part: bytes) -> None:
        self.size += len(part)
        if self.overlong is not None or not part:
            return
        self.parts.append(part)
        if self.size > self.max_bytes:
            self.overlong = self.head()
            self.parts = []

    def head(self) -> bytes:
        if self.overlong is not None:
            return self.overlong
        return b"".join(self.parts)[:QUARANTINE_RECORD_BYTES]

    def take(self) -> bytes | Overlong:
        if self.overlong is not None:
            line: bytes | Overlong = Overlong(self.overlong, self.size)
        else:
            line = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
        self.parts, self.size, self.overlong = [], 0, None
        return line


class _Frames:
    """zstd frames one after another (``zstd -T``, ``pzstd``, files joined with cat), the last one
    checked for its end: zstandard's own stream reader ends quietly at a cut."""

    def __init__(self, stream: BinaryIO, new: Callable[[], zstandard.ZstdDecompressionObj]) -> None:
        self.stream, self.new = stream, new
        self.decoder, self.fed = new(), False

    def read1(self, size: int = -1, /) -> bytes:
        while True:
            piece = self.stream.read(_PIECE_BYTES)
            if not piece:
                if self.fed:
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
                return b""
            out = []
            while piece:
                out.append(self.decoder.decompress(piece))
                self.fed = True
                piece = b""
                if self.decoder.eof:  # a frame ended: what follows it starts the next one
                    piece, self.decoder, self.fed = self.decoder.unused_data, self.new(), False
            data = b"".join(out)
            if data:
                return data


class _Lz4:
    """An LZ4 frame file, read by pyarrow in small reads: at a cut, pyarrow's error loses the data of
    the read it ends, so each read is kept small."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = pa.CompressedInputStream(pa.PythonFile(stream, mode="r"), "lz4")

    def read1(self, size: int = -1, /) -> bytes:
        try:
            return self.stream.read(_PIECE_BYTES)
        except OSError as exc:
            if "Truncated" in str(exc):
                raise EOFError(str(exc)) from exc
            raise
