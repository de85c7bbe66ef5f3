"""Source-code filters, after the practice of The Stack v2 / StarCoder2 and The Stack / StarCoder.

datatrove has no code filters, so these are ours: each is a few lines of string statistics.
Thresholds are the papers' defaults; ``quality/configs/code.toml`` sets them per language
where practice differs (data formats such as JSON and YAML, prose formats such as Markdown).
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import regex

from quality.base import Doc, FilterResult, QualityFilter, fraction, require
from quality.shared_text import SharedText


class SizeBounds(QualityFilter):
    """Drop documents smaller or larger than the bounds (UTF-8 bytes)."""

    name = "size"

    @dataclass(frozen=True)
    class Config:
        min_bytes: int = 1  # smaller documents are dropped as too_small
        max_bytes: int = 1 << 20  # larger documents are dropped as too_large

        def __post_init__(self) -> None:
            require(self.min_bytes >= 0, f"size.min_bytes must be zero or more, got {self.min_bytes}")
            require(
                self.max_bytes >= self.min_bytes, f"size.max_bytes must be at least min_bytes, got {self.max_bytes}"
            )

    def filter(self, doc: Doc) -> FilterResult:
        size = doc.size
        if size < self.config.min_bytes:
            return FilterResult.dropped("too_small", n_bytes=size)
        if size > self.config.max_bytes:
            return FilterResult.dropped("too_large", n_bytes=size)
        return FilterResult.kept(n_bytes=size)


class MaxLineLength(QualityFilter):
    """Drop files with a very long line: minified, generated or data, not hand-written code."""

    name = "max_line_length"

    @dataclass(frozen=True)
    class Config:
        max_chars: int = 1000  # The Stack: files with a line over 1000 characters are dropped

        def __post_init__(self) -> None:
            require(self.max_chars > 0, f"max_line_length.max_chars must be positive, got {self.max_chars}")

    def filter(self, doc: Doc) -> FilterResult:
        return self._decide(doc.text.splitlines())

    def decide(self, doc: Doc, shared: SharedText) -> FilterResult:
        return self._decide(shared.splitlines())

    def _decide(self, lines: list[str]) -> FilterResult:
        longest = max(map(len, lines), default=0)
        if longest > self.config.max_chars:
            return FilterResult.dropped("line_too_long", max_line_length=longest)
        return FilterResult.kept(max_line_length=longest)


class MeanLineLength(QualityFilter):
    """Drop files whose lines are long on average."""

    name = "mean_line_length"

    @dataclass(frozen=True)
    class Config:
        max_chars: float = 100.0  # The Stack: files averaging over 100 characters a line are dropped

        def __post_init__(self) -> None:
            require(self.max_chars > 0, f"mean_line_length.max_chars must be positive, got {self.max_chars}")

    def filter(self, doc: Doc) -> FilterResult:
        return self._decide(doc.text.splitlines())

    def decide(self, doc: Doc, shared: SharedText) -> FilterResult:
        return self._decide(shared.splitlines())

    def _decide(self, lines: list[str]) -> FilterResult:
        mean = sum(map(len, lines)) / len(lines) if lines else 0.0
        if mean > self.config.max_chars:
            return FilterResult.dropped("mean_line_too_long", mean_line_length=mean)
        return FilterResult.kept(mean_line_length=mean)


class _CharacterFraction(QualityFilter):
    """Drop files where too few characters are of a class (``_ascii`` and ``_is`` say which)."""

    _ascii: bytes  # the ASCII characters of the class
    _is: staticmethod  # str.isalnum or str.isalpha: the class in Unicode
    _metric: str

    @dataclass(frozen=True)
    class Config:
        min_fraction: float = 0.25  # files with a smaller fraction are dropped

        def __post_init__(self) -> None:
            fraction("min_fraction", self.min_fraction)

    def filter(self, doc: Doc) -> FilterResult:
        text = doc.text
        value = self._count(text) / len(text) if text else 0.0
        if value < self.config.min_fraction:
            return FilterResult.dropped(f"low_{self._metric}", **{self._metric: value})
        return FilterResult.kept(**{self._metric: value})

    def _count(self, text: str) -> int:
        # Most source files are ASCII: counting through bytes.translate is ~7x faster than
        # testing each character; other text takes the Unicode-aware path.
        if text.isascii():
            data = text.encode("ascii")
            return len(data) - len(data.translate(None, self._ascii))
        return sum(map(self._is, text))


class AlphanumericFraction(_CharacterFraction):
    """The Stack: drop files with less than 25% alphanumeric characters."""

    name = "alphanumeric_fraction"
    _ascii = (string.ascii_letters + string.digits).encode()
    _is = staticmethod(str.isalnum)
    _metric = "alphanumeric_fraction"


class AlphabeticFraction(_CharacterFraction):
    """StarCoder2: drop files with less than 25% alphabetic characters (data, not code)."""

    name = "alphabetic_fraction"
    _ascii = string.ascii_letters.encode()
    _is = staticmethod(str.isalpha)
    _metric = "alphabetic_fraction"


# StarCoder2 drops files that say they were generated in their first lines.
AUTOGENERATED_MARKERS = (
    "auto-generated",
    "autogenerated",
    "automatically generated",
    "generated automatically",
    "this file is generated",
    "generated by",
    "do not edit",
)


class Autogenerated(QualityFilter):
    """Drop files whose first lines say they were generated by a tool."""

    name = "autogenerated"

    @dataclass(frozen=True)
    class Config:
        header_lines: int = 5  # how many of the first lines are searched
        markers: tuple[str, ...] = AUTOGENERATED_MARKERS  # case-insensitive phrases that mark a generated file

        def __post_init__(self) -> None:
            require(self.header_lines > 0, f"autogenerated.header_lines must be positive, got {self.header_lines}")
            require(
                all(isinstance(m, str) and m for m in self.markers), "autogenerated.markers must be non-empty strings"
            )
            object.__setattr__(self, "markers", tuple(m.lower() for m in self.markers))

    def filter(self, doc: Doc) -> FilterResult:
        lines = doc.text.split("\n", self.config.header_lines)[: self.config.header_lines]
        for number, line in enumerate(lines, start=1):
            lowered = line.lower()
            if any(marker in lowered for marker in self.config.markers):
                return FilterResult.dropped("autogenerated", marker_line=number)
        return FilterResult.kept()


# StarCoder2's patterns for data embedded in code: base64 blobs, hex byte arrays, \u escapes.
# The `regex` module runs the hex pattern twice as fast as `re`.
_ENCODED = {
    "base64": regex.compile(r"[a-zA-Z0-9+/\n=]{64,}"),
    "hex": regex.compile(r"(?:\b(?:0x|\\x)?[0-9a-fA-F]{2}(?:,|\b\s*)){8,}"),
    "unicode": regex.compile(r"(?:\\u[0-9a-fA-F]{4}){8,}"),
}
STARCODER2_KINDS = tuple(_ENCODED)

# The layouts real sources use that StarCoder2's patterns miss (issue 19, measured by
# benchmarks/quality/encoded.py): C and Python byte arrays written `0x3f, 0x1a, …` (any width,
# with C's u/L suffixes), long tables of decimal or float literals, `data:` URIs (base64 or
# percent-encoded), and huge string or bytes literals made of dense pieces ("…" "…" or b'\x..'
# lines). A run of literals may cross brackets, so `{{1, 2}, {3, 4}}` tables count as one run.
# Line comments between rows (`3814, 33,  # 16`) do not end a run.
_SEP = r"(?:\s*+(?:[,{}\[\]()]|(?:#|//)[^\n]*+)\s*+)++"
_HEX_LITERAL = r"(?:0[xX]|\\x)[0-9a-fA-F]{1,16}[uUlL]{0,3}"
_NUMBER = r"[-+]?+(?:\d++\.?+\d*+|\.\d++)(?:[eE][-+]?\d++)?+[uUlLfFdD]{0,3}+"
# A table's first number starts with a digit: the scan then tries far fewer starting places.
_FIRST_NUMBER = r"(?<![\w.])\d++(?:\.\d*+)?+(?:[eE][-+]?\d++)?+[uUlLfFdD]{0,3}+"
# A literal opens after a space, bracket or operator, with or without a prefix (b"", L""),
# never right after text: minified code would otherwise pair a closing quote with the next
# opening one. Only dense pieces (4+ characters, no unescaped space) make a run, so most of the
# strings of a file never reach the Python-side checks.
_QUOTED = r"""(?:"(?:[^"\\\s]|\\.){4,}+"|'(?:[^'\\\s]|\\.){4,}+')"""
_PIECE = rf"(?<=^|[\s(\[{{=,:+]|[\s(\[{{=,:+][bBrRuUfFL]{{1,2}}){_QUOTED}"
_NEXT_PIECE = rf"[ \t]*+(?:\+[ \t]*+)?+\\?+\n?+[ \t]*+[bBrRuUfFL]{{0,2}}+{_QUOTED}"
_ENCODED_MORE = {
    "hex_array": regex.compile(rf"(?:{_HEX_LITERAL}{_SEP}){{8,}}(?:{_HEX_LITERAL})?"),
    # (possessive quantifiers: separators and numbers never backtrack, which halves the scan's time)
    "number_table": regex.compile(rf"{_FIRST_NUMBER}(?:{_SEP}(?<![\w.]){_NUMBER}(?![\w.])){{15,}}"),
    "data_uri": regex.compile(r"data:[a-zA-Z]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*(?:;base64)?,[^\s\"'`()<>]{64,}"),
    "literal": regex.compile(rf"{_PIECE}(?:{_NEXT_PIECE})*", regex.MULTILINE),
}
ENCODED_KINDS = (*STARCODER2_KINDS, *_ENCODED_MORE)
_TABLE_KINDS = frozenset({"hex_array", "number_table"})
# Runs of the new kinds shorter than this are ordinary code: a 16-colour palette, a small
# lookup table, a short string. (StarCoder2's kinds count from their patterns' own minimums.)
_MIN_RUN_CHARS = {"number_table": 512, "literal": 256}
# A run of string literals is data when its contents are mostly escapes (b"\x89PNG\r\n…",
# "\u02c1-\u02d1…") or all in the base64/hex alphabet (a blob cut into "…" "…" lines); a
# keyword regex, minified code or CSS in a string is neither.
_LITERAL_PIECE = regex.compile(r""""((?:[^"\\\n]|\\.)*)"|'((?:[^'\\\n]|\\.)*)'""")
_ESCAPE = regex.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|[abfnrtv])")
_BLOB = regex.compile(r"[A-Za-z0-9+/= ]*")


def _data_literal(run: str) -> bool:
    contents = "".join(a or b for a, b in _LITERAL_PIECE.findall(run))
    if not contents:
        return False
    escaped = sum(m.end() - m.start() for m in _ESCAPE.finditer(contents))
    if escaped >= 0.5 * len(contents):
        return True
    return _BLOB.fullmatch(contents) is not None and contents.count(" ") <= 0.02 * len(contents)


def _class_table(chars: str, non_ascii: bool) -> np.ndarray:
    """A lookup table over code points: entries 0-127 for ASCII, entry 128 for all others."""
    table = np.zeros(129, dtype=bool)
    table[[ord(c) for c in chars]] = True
    table[128] = non_ascii
    return table


# StarCoder2's base64 class (no non-ASCII character is in it).
_BASE64_CLASS = _class_table(string.ascii_letters + string.digits + "+/\n=", non_ascii=False)
# Every character StarCoder2's hex pattern can match: hex digits, the 0x and \x prefixes, commas
# and whitespace (ASCII's, with the separators Python also counts, and any non-ASCII character,
# since some are Unicode spaces). A match has 8 units of 2 digits or more: 16 characters.
_HEX_CLASS = _class_table(string.hexdigits + "x\\," + string.whitespace + "\x1c\x1d\x1e\x1f", non_ascii=True)
_HEX_MIN = 16


def class_runs(text: str, table: np.ndarray, min_length: int) -> list[tuple[int, int]]:
    """(start, end) of each maximal run of ``text``'s characters in ``table`` at least ``min_length`` long.

    A few numpy passes over the code points: where a regex engine tries a pattern at every
    position, this finds the only stretches where a pattern made of those characters can match.
    """
    if text.isascii():
        points = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    else:
        points = np.minimum(np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32), 128)
    inside = np.zeros(len(points) + 2, dtype=np.int8)
    inside[1:-1] = table[points]
    edges = np.flatnonzero(np.diff(inside))  # run starts, then run ends, alternately
    starts, ends = edges[0::2], edges[1::2]
    long = ends - starts >= min_length
    return list(zip(starts[long].tolist(), ends[long].tolist(), strict=True))


def _fast_matches(kind: str, text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) of ``kind``'s matches, as its pattern's ``finditer`` over ``text`` gives them.

    base64: the pattern is greedy over one character class, so its matches are exactly the
    class's maximal runs of 64 or more; the regex engine tried every start inside every shorter
    run (each identifier, each line) and was half of the code filters' time. hex: a match lies
    inside a run of ``_HEX_CLASS``; the pattern runs over those runs only, from each run's start
    (it sees the character before it, for ``\\b``) to one past its end (that character cannot be
    matched, and ``\\b`` needs it). hex_array: each match holds 8 hex literals (``0x``/``\\x``).
    """
    if kind == "base64":
        yield from class_runs(text, _BASE64_CLASS, 64)
    elif kind == "hex":
        for start, end in class_runs(text, _HEX_CLASS, _HEX_MIN):
            for match in _ENCODED["hex"].finditer(text, start, min(end + 1, len(text))):
                yield match.start(), match.end()
    elif kind == "hex_array" and text.count("0x") + text.count("0X") + text.count("\\x") < 8:
        return
    else:
        pattern = _ENCODED.get(kind) or _ENCODED_MORE[kind]
        for match in pattern.finditer(text):
            yield match.start(), match.end()


_FAST_KINDS = frozenset({"base64", "hex", "hex_array"})


def encoded_runs(
    text: str, kinds: tuple[str, ...] = ENCODED_KINDS, *, fast: bool = False
) -> Iterator[tuple[str, int, int]]:
    """(kind, start, end) of each encoded run in ``text``, StarCoder2's kinds first.

    ``fast`` finds base64, hex and hex_array runs with ``_fast_matches``: the same runs.
    """
    for kind in kinds:
        if kind == "unicode" and "\\u" not in text:
            continue  # cheap test that spares the scan on almost every file
        if kind == "data_uri" and "data:" not in text:
            continue
        if fast and kind in _FAST_KINDS:
            for start, end in _fast_matches(kind, text):
                if end - start >= _MIN_RUN_CHARS.get(kind, 0):
                    yield kind, start, end
            continue
        pattern = _ENCODED.get(kind) or _ENCODED_MORE[kind]
        for match in pattern.finditer(text):
            if match.end() - match.start() < _MIN_RUN_CHARS.get(kind, 0):
                continue
            if kind == "literal" and not _data_literal(match[0]):
                continue
            yield kind, match.start(), match.end()


class EncodedData(QualityFilter):
    """Drop files that are mostly encoded data, or hold one long encoded run."""

    name = "encoded_data"

    @dataclass(frozen=True)
    class Config:
        max_run_chars: int = 1024  # StarCoder2: a single match longer than this drops the file
        max_fraction: float = 0.5  # StarCoder2: matches covering more than this fraction drop the file
        kinds: tuple[str, ...] = ENCODED_KINDS  # which patterns run; STARCODER2_KINDS is StarCoder2's filter
        # A table of numbers (hex_array, number_table) longer than this drops the file: a 256-entry
        # lookup table (~1.1 kB) is ordinary code, a frequency table of thousands is data.
        max_table_run_chars: int = 4096

        def __post_init__(self) -> None:
            require(self.max_run_chars > 0, f"encoded_data.max_run_chars must be positive, got {self.max_run_chars}")
            require(
                self.max_table_run_chars > 0,
                f"encoded_data.max_table_run_chars must be positive, got {self.max_table_run_chars}",
            )
            fraction("encoded_data.max_fraction", self.max_fraction)
            object.__setattr__(self, "kinds", tuple(self.kinds))
            unknown = sorted(set(self.kinds) - set(ENCODED_KINDS))
            require(not unknown, f"encoded_data.kinds: unknown {unknown}; known: {list(ENCODED_KINDS)}")

    def filter(self, doc: Doc) -> FilterResult:
        return self._decide(doc.text, fast=False)

    def decide(self, doc: Doc, shared: SharedText) -> FilterResult:
        return self._decide(doc.text, fast=True)

    def _decide(self, text: str, fast: bool) -> FilterResult:
        matched, longest, too_long = 0, 0, False
        covered: bytearray | None = None
        for kind, start, end in encoded_runs(text, self.config.kinds, fast=fast):
            length = end - start
            longest = max(longest, length)
            limit = self.config.max_table_run_chars if kind in _TABLE_KINDS else self.config.max_run_chars
            too_long = too_long or length > limit
            if kind in _ENCODED:
                matched += length  # StarCoder2's sum, overlaps and all, so its kinds decide as before
                continue
            if covered is None:  # the new kinds count only characters no earlier run covered
                covered = bytearray(len(text))
                earlier = tuple(k for k in self.config.kinds if k in _ENCODED)
                for _, s, e in encoded_runs(text, earlier, fast=fast):
                    covered[s:e] = b"\x01" * (e - s)
            matched += covered.count(0, start, end)
            covered[start:end] = b"\x01" * length
        share = matched / len(text) if text else 0.0
        if too_long:
            return FilterResult.dropped("encoded_run", encoded_run_chars=longest, encoded_fraction=share)
        if share > self.config.max_fraction:
            return FilterResult.dropped("encoded_fraction", encoded_run_chars=longest, encoded_fraction=share)
        return FilterResult.kept(encoded_run_chars=longest, encoded_fraction=share)
