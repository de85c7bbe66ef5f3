"""Prose filters: datatrove's Gopher quality, Gopher repetition, C4 and FineWeb quality filters.

They are wrapped, not reimplemented: the decision is datatrove's own ``filter(doc)``. The
wrapper maps our validated config onto datatrove's arguments, turns its ``bool | (False,
reason)`` into a ``FilterResult``, and, for dropped documents only (so kept ones cost
nothing extra), adds a small text profile so the quarantine shows the numbers behind the
reason. Their word tokenizer is checked to run offline (``quality.tokenizer``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from quality import prose_rules
from quality.base import Doc, FilterResult, QualityFilter, fraction, require
from quality.fast_words import fast_words
from quality.shared_text import SharedText
from quality.tokenizer import offline_word_tokenizer


class _DatatroveFilter(QualityFilter):
    """Runs one datatrove filter; subclasses say which and how the config maps onto it."""

    uses_language = True

    def __init__(self, config: object | None = None, language: str = "eng") -> None:
        super().__init__(config)
        offline_word_tokenizer(language)  # fail now, not on the first document, if it needs a download
        self.language = language
        self._datatrove = self._build(language)
        self._words = fast_words(language)

    def _build(self, language: str):
        raise NotImplementedError

    def _rule(self, shared: SharedText) -> str | None:
        """The drop reason datatrove's filter would give, or None (``quality.prose_rules``)."""
        raise NotImplementedError

    def decide(self, doc: Doc, shared: SharedText) -> FilterResult:
        reason = self._rule(shared)
        if reason is None:
            return FilterResult.kept()
        return FilterResult(False, reason, text_profile(doc.text))

    def filter(self, doc: Doc) -> FilterResult:
        from datatrove.data import Document

        # A fresh datatrove Document each time: C4's filter rewrites doc.text (it drops lines),
        # and a filter stage here only decides; it never changes what is stored.
        verdict = self._datatrove.filter(Document(text=doc.text, id=doc.doc_id))
        keep, reason = verdict if isinstance(verdict, tuple) else (verdict, None)
        if keep:
            return FilterResult.kept()
        return FilterResult(False, reason or self.name, text_profile(doc.text))


# A letter (a word character that is neither a digit nor an underscore).
_LETTER = re.compile(r"[^\W\d_]")


def text_profile(text: str) -> dict[str, float]:
    """The basic numbers most prose rules are made of, to show beside a drop reason.

    Plain string operations, no word tokenizer: a filter may drop a document before it
    tokenizes it, and tokenizing again just to explain the drop would cost a fifth of the run.
    """
    from datatrove.pipeline.filters.gopher_repetition_filter import find_duplicates

    words = text.split()
    lines = [line for line in text.splitlines() if line.strip()]
    return {
        "chars": len(text),
        "lines": len(lines),
        "words": len(words),  # whitespace-separated
        "mean_word_length": sum(map(len, words)) / len(words) if words else 0.0,
        # (the share of whitespace-separated words holding a letter; a search per word, where
        # one findall of \S*[^\W\d_]\S* backtracked over every long word without a letter)
        "alpha_word_fraction": sum(1 for w in words if _LETTER.search(w)) / len(words) if words else 0.0,
        "duplicate_line_fraction": find_duplicates(lines)[0] / len(lines) if lines else 0.0,
    }


class GopherQuality(_DatatroveFilter):
    """Gopher's quality rules (word counts and lengths, symbols, bullets, stop words)."""

    name = "gopher_quality"

    @dataclass(frozen=True)
    class Config:
        min_doc_words: int | None = 50  # fewer non-symbol words: gopher_short_doc
        max_doc_words: int | None = 100_000  # more: gopher_long_doc
        min_avg_word_length: int | None = 3  # mean word length bounds
        max_avg_word_length: int | None = 10
        max_symbol_word_ratio: float | None = 0.1  # '#' or ellipses per word
        max_bullet_lines_ratio: float | None = 0.9  # lines starting with a bullet
        max_ellipsis_lines_ratio: float | None = 0.3  # lines ending with an ellipsis
        max_non_alpha_words_ratio: float | None = 0.8  # datatrove's name: the least share of words with a letter
        min_stop_words: int | None = 2  # at least this many of the stop words must appear
        stop_words: tuple[str, ...] | None = None  # default: the, be, to, of, and, that, have, with

        def __post_init__(self) -> None:
            for key in ("max_symbol_word_ratio", "max_bullet_lines_ratio", "max_ellipsis_lines_ratio",
                        "max_non_alpha_words_ratio"):  # fmt: skip
                if getattr(self, key) is not None:
                    fraction(f"gopher_quality.{key}", getattr(self, key))
            for key in ("min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length"):
                value = getattr(self, key)
                require(value is None or value >= 0, f"gopher_quality.{key} must be zero or more, got {value}")

    def _build(self, language: str):
        from datatrove.pipeline.filters import GopherQualityFilter

        params = asdict(self.config)
        params["stop_words"] = list(params["stop_words"]) if params["stop_words"] is not None else None
        native = GopherQualityFilter(**params, language=language)
        self._stop_words = frozenset(native.stop_words)
        return native

    def _rule(self, shared: SharedText) -> str | None:
        return prose_rules.gopher_quality(self.config, self._stop_words, shared, self._words)


class GopherRepetition(_DatatroveFilter):
    """Gopher's repetition rules (duplicate lines, paragraphs and n-grams)."""

    name = "gopher_repetition"

    @dataclass(frozen=True)
    class Config:
        dup_line_frac: float | None = 0.3  # share of lines that repeat an earlier line
        dup_para_frac: float | None = 0.3  # share of paragraphs that repeat an earlier one
        dup_line_char_frac: float | None = 0.2  # share of characters in repeated lines
        dup_para_char_frac: float | None = 0.2  # share of characters in repeated paragraphs
        # (n, most a single n-gram may cover) and (n, most that repeated n-grams may cover)
        top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
        dup_n_grams: tuple[tuple[int, float], ...] = field(
            default=((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))
        )

        def __post_init__(self) -> None:
            for key in ("dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac"):
                if getattr(self, key) is not None:
                    fraction(f"gopher_repetition.{key}", getattr(self, key))
            for key in ("top_n_grams", "dup_n_grams"):
                pairs = tuple(tuple(p) for p in getattr(self, key))
                require(
                    all(len(p) == 2 and int(p[0]) == p[0] > 0 and 0 <= p[1] <= 1 for p in pairs),
                    f"gopher_repetition.{key} must be [n, fraction] pairs with n >= 1, got {getattr(self, key)}",
                )
                object.__setattr__(self, key, tuple((int(n), float(f)) for n, f in pairs))

    def _build(self, language: str):
        from datatrove.pipeline.filters import GopherRepetitionFilter

        return GopherRepetitionFilter(**asdict(self.config), language=language)

    def _rule(self, shared: SharedText) -> str | None:
        return prose_rules.gopher_repetition(self.config, shared, self._words)


class C4Quality(_DatatroveFilter):
    """C4's rules, as a document filter: lorem ipsum, curly brackets, too few sentences.

    datatrove's C4 filter also removes lines (no terminal punctuation, too few words,
    'javascript', policy notices); here that only decides whether enough sentences remain.
    The document is stored unchanged: rewriting text after dedup could make new duplicates.
    """

    name = "c4_quality"

    @dataclass(frozen=True)
    class Config:
        split_paragraph: bool = True  # lines are paragraphs (C4); false: split into sentences
        remove_citations: bool = True  # ignore wikipedia-style [1] citations
        filter_no_terminal_punct: bool = True  # lines must end in . ? ! " '
        min_num_sentences: int = 5  # fewer sentences left in kept lines: too_few_sentences (-1: off)
        min_words_per_line: int = 3  # shorter lines are not counted (-1: off)
        max_word_length: int = 1000  # lines with a longer word are not counted (-1: off)
        filter_lorem_ipsum: bool = True  # drop documents with "lorem ipsum"
        filter_javascript: bool = True  # lines mentioning javascript are not counted
        filter_curly_bracket: bool = True  # drop documents with '{' (code, templates)
        filter_policy: bool = True  # cookie and terms-of-use lines are not counted

        def __post_init__(self) -> None:
            for key in ("min_num_sentences", "min_words_per_line", "max_word_length"):
                value = getattr(self, key)
                require(value == -1 or value >= 0, f"c4_quality.{key} must be -1 (off) or zero or more, got {value}")

    def _build(self, language: str):
        from datatrove.pipeline.filters import C4QualityFilter

        return C4QualityFilter(**asdict(self.config), language=language)

    def _rule(self, shared: SharedText) -> str | None:
        if not self.config.split_paragraph:  # sentences, not lines, are C4's units: datatrove's own path
            from datatrove.data import Document

            verdict = self._datatrove.filter(Document(text=shared.text))
            return None if verdict is True else verdict[1]
        return prose_rules.c4_quality(self.config, shared, self._words)


class FineWebQuality(_DatatroveFilter):
    """FineWeb's rules (terminal punctuation, short lines, duplicated characters, list-like text)."""

    name = "fineweb_quality"

    @dataclass(frozen=True)
    class Config:
        line_punct_thr: float = 0.12  # least share of lines ending in terminal punctuation
        line_punct_exclude_zero: bool = False  # keep documents where no line ends so
        short_line_thr: float = 0.67  # most share of short lines
        short_line_length: int = 30  # a line this long or shorter is short
        char_duplicates_ratio: float = 0.01  # most share of characters in duplicated lines
        new_line_ratio: float = 0.3  # most newlines per word

        def __post_init__(self) -> None:
            for key in ("line_punct_thr", "short_line_thr", "char_duplicates_ratio"):
                fraction(f"fineweb_quality.{key}", getattr(self, key))
            require(self.short_line_length >= 0, "fineweb_quality.short_line_length must be zero or more")
            require(self.new_line_ratio >= 0, "fineweb_quality.new_line_ratio must be zero or more")

    def _build(self, language: str):
        from datatrove.pipeline.filters import FineWebQualityFilter

        return FineWebQualityFilter(**asdict(self.config), language=language)

    def _rule(self, shared: SharedText) -> str | None:
        return prose_rules.fineweb_quality(self.config, shared, self._words)
